"""A full queue answers 429; SIGTERM drains running requests and exits 0."""
from __future__ import annotations

import json
import signal
import threading
import time

import pytest

openai = pytest.importorskip("openai")

from .sse_reader import sse_lines  # noqa: E402


def _running(server) -> float:
    with server.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith("oxillama:num_requests_running{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_queue_full_is_429(smollm2_path, server_factory):
    server = server_factory(smollm2_path, "--parallel", "1", "--max-queue", "1", "--n-ctx", "512")
    try:
        body = {"prompt": "Write a long story.", "max_tokens": 300, "ignore_eos": True, "stream": True}
        streams = []
        with server.client() as c:
            first = c.stream("POST", "/v1/completions", json=body)
            streams.append(first.__enter__())
            deadline = time.monotonic() + 30
            while _running(server) < 1:
                assert time.monotonic() < deadline, "the first request never started"
                time.sleep(0.05)
            second = c.stream("POST", "/v1/completions", json=body)     # waits in the queue
            streams.append(second.__enter__())
            r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
            assert r.status_code == 429, r.text
            assert r.json()["error"]["type"] == "rate_limit_error"
            with pytest.raises(openai.RateLimitError):
                server.openai().chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=2)
            for s in streams:
                s.close()
    finally:
        assert server.stop() == 0, server.log()


def test_sigterm_drains_a_running_stream(smollm2_path, server_factory):
    server = server_factory(smollm2_path, "--parallel", "2", "--n-ctx", "512")
    body = {"messages": [{"role": "user", "content": "Tell me about the moon."}], "max_tokens": 40,
            "ignore_eos": True, "stream": True}
    events = []
    with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = sse_lines(r)
        for line in lines:
            if line.startswith("data: "):
                events.append(line[6:])
                break
        stopper = threading.Thread(target=server.stop, args=(signal.SIGTERM,))
        stopper.start()
        for line in lines:
            if line.startswith("data: "):
                events.append(line[6:])
    stopper.join()
    assert server.proc.returncode == 0, server.log()
    assert events[-1] == "[DONE]"
    finals = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
    assert finals[-1] == "length"      # the request ran to its end: it was drained, not cut
    log = server.log()
    assert "shutting down: 1 running requests get up to" in log and log.rstrip().endswith("stopped"), log
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK' in log      # the access line, once the stream ended
