"""What the server benches share: `oxillama serve` started as a real process on a free 127.0.0.1 port (this
checkout's oxillama first on its path), its CPU time and RSS, and one streaming request read event by event.

    server = ServerProcess(model, parallel=8, n_ctx=1024, threads=2)
    server.wait_ready()
    usage, times = await stream_request(server.url, "/v1/completions", body)   # or stream_raw
    server.stop()
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


RCVLOWAT = 1 << 20     # bytes a lean client's socket holds before it reports them (stream_raw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float:
    """user + system seconds of every thread of process pid"""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """user + system seconds of one thread (tid == pid: the main thread, the server's event loop)"""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def prompt_cache_bytes(url: str) -> float:
    """The bytes of K/V the server's prompt cache holds (GET /metrics: oxillama:prompt_cache_bytes, summed
    over its models; 0 when the cache is off)."""
    import httpx
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("oxillama:prompt_cache_bytes"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def checkout_env() -> dict:
    """The environment of a child process that imports the oxillama this process imported."""
    import oxillama
    return dict(os.environ, PYTHONPATH=str(Path(oxillama.__file__).resolve().parents[1]))


class ServerProcess:
    """`python -m oxillama serve -m MODEL --parallel P --n-ctx N [--threads T]`, its output kept in a
    temporary file (shown when it exits before it is ready)."""

    def __init__(self, model: str, *, parallel: int, n_ctx: int, threads: int | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "oxillama", "serve", "-m", model, "--port", str(self.port),
               "--parallel", str(parallel), "--n-ctx", str(n_ctx)]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=checkout_env(),
                                     cwd=tempfile.gettempdir())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 300.0) -> None:
        import httpx
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"server exited: {self.log.read()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy")

    def stop(self) -> int:
        """SIGTERM (then SIGKILL after 60 s); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


async def stream_request(url: str, path: str, body: dict) -> tuple[dict, list[float]]:
    """POST body (with "stream": true) over a bare asyncio connection and read its server-sent events as
    they come: (the usage chunk's usage, the time of each event that carried text, taken when the read
    that completed it returned). Raises on an HTTP error or a stream without usage. Lean, as stream_raw,
    but woken for every event (a latency bench needs each one's time): ~0.05 ms a token of client CPU
    where httpx's streaming client took ~0.17 on this 2-core Xeon, which the server then lacked."""
    import asyncio
    reader, writer = await _post(url, path, body)
    usage, times = None, []
    buf, events, head, status = b"", b"", None, b""
    try:
        while True:
            data = await reader.read(1 << 16)
            now = time.perf_counter()
            if not data:
                break
            buf += data
            if head is None:
                if b"\r\n\r\n" not in buf:
                    continue
                head, _, buf = buf.partition(b"\r\n\r\n")
                status = head.split(b"\r\n", 1)[0]
                if b" 200 " not in status + b" ":
                    raise RuntimeError(f"{status.decode()}: {(buf + await reader.read())[:300]!r}")
                if b"transfer-encoding: chunked" not in head.lower():
                    raise RuntimeError("expected a chunked event stream")
            while True:                             # whole HTTP chunks -> the event stream's bytes
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(buf[:end].split(b";")[0], 16)
                if len(buf) < end + 2 + size + 2:
                    break
                events += buf[end + 2:end + 2 + size]
                buf = buf[end + 2 + size + 2:]
            complete, events = _split_events(events)
            for event in complete:
                for line in event.decode().split("\n"):
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    choice = chunk["choices"][0] if chunk.get("choices") else None
                    if choice and (choice.get("text") or (choice.get("delta") or {}).get("content")):
                        times.append(now)
    finally:
        writer.close()
    if usage is None:
        raise RuntimeError("no usage chunk in the stream")
    return usage, times


def _split_events(raw: bytes) -> tuple[list[bytes], bytes]:
    """(the complete events of an event stream's bytes so far, the bytes after them). Lines end at CR LF,
    LF or CR, and nowhere else (no byte of a multi-byte UTF-8 character is CR or LF, so the cut is made on
    bytes); a CR at the very end is kept back: it may be the first half of a CR LF."""
    keep = raw.endswith(b"\r")
    body = (raw[:-1] if keep else raw).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    *events, rest = body.split(b"\n\n")
    return events, rest + (b"\r" if keep else b"")


async def _post(url: str, path: str, body: dict):
    """A bare connection with body POSTed to path ("Connection: close"): (reader, writer)."""
    import asyncio
    from urllib.parse import urlsplit
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    payload = json.dumps(body).encode()
    writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n%s" % (path.encode(), u.netloc.encode(), len(payload), payload))
    return reader, writer


async def stream_raw(url: str, path: str, body: dict) -> tuple[dict, int]:
    """POST body (with "stream": true) over a bare asyncio connection and read the event stream whole,
    decoding it only once it has ended: (the usage chunk's usage, the number of `data:` events). A
    throughput bench's client on the server's own machine takes CPU from the server; this one wakes
    about once a stream (SO_RCVLOWAT: the kernel holds the events until the server closes the
    connection), as a client on another machine would cost the server's cores nothing (httpx and a JSON
    parse per event cost ~0.17 ms a token on this 2-core Xeon, a socket read per event 0.06 ms: beside
    the server's event loop's ~0.1 ms)."""
    raw, _ = await read_raw(url, path, body)
    return parse_raw(raw)


async def read_raw(url: str, path: str, body: dict) -> tuple[bytes, float]:
    """stream_raw's reading half: (the response's bytes, the perf_counter time its end was read). A bench
    timing many streams decodes them once all have ended (parse_raw), so that no stream's end waits for
    the client decoding another."""
    reader, writer = await _post(url, path, body)
    # the kernel keeps the events until the stream ends (or RCVLOWAT bytes wait); the server still writes
    # every event as it comes
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, RCVLOWAT)
    parts = []
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            parts.append(data)
    finally:
        writer.close()
    return b"".join(parts), time.perf_counter()


def parse_raw(raw: bytes) -> tuple[dict, int]:
    """stream_raw's decoding half: a streamed response's bytes -> (its usage chunk's usage, its number of
    `data:` events). Raises on an HTTP error or a stream without usage."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        raise RuntimeError(f"{status.decode()}: {rest[:300]!r}")
    if b"transfer-encoding: chunked" in head.lower():
        chunks, at = [], 0
        while True:
            end = rest.index(b"\r\n", at)
            size = int(rest[at:end].split(b";")[0], 16)
            if size == 0:
                break
            chunks.append(rest[end + 2:end + 2 + size])
            at = end + 2 + size + 2
        rest = b"".join(chunks)
    usage, n_events = None, 0
    for line in rest.decode().replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            n_events += 1
            if '"usage":{' in line:
                usage = json.loads(line[6:])["usage"]
    if usage is None:
        raise RuntimeError("no usage chunk in the stream")
    return usage, n_events
