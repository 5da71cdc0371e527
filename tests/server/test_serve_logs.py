"""What `oxillama serve` tells its operator: where it listens and what it serves, one access line per
request (text or JSON lines), and a clean stop on Ctrl-C in a terminal."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

import oxillama

httpx = pytest.importorskip("httpx")

STOP_TIMEOUT_S = 60


def test_json_log_lines_have_the_banner_and_the_access_fields(server_factory, tiny_models):
    server = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "2", "--log-format", "json")
    try:
        with server.client() as c:
            assert c.get("/v1/models?x=1").status_code == 200
            assert c.post("/tokenize", json={"content": 3}).status_code == 400
    finally:
        assert server.stop() == 0
    records = [json.loads(line) for line in server.log().splitlines() if line.strip()]   # every line is JSON
    messages = [r["message"] for r in records]
    assert any(m == f"listening on http://127.0.0.1:{server.port} (Ctrl-C to stop)" for m in messages), messages
    loaded = next(m for m in messages if m.startswith("model "))
    assert "llama.gguf" in loaded and "n_ctx" in loaded and "2 parallel sequences" in loaded and "threads" in loaded
    access = [r for r in records if r["logger"] == "oxillama.server.access"]
    models = next(r for r in access if r["path"] == "/v1/models?x=1")
    assert models["method"] == "GET" and models["status"] == 200 and models["duration_ms"] >= 0
    assert models["client"].startswith("127.0.0.1:")
    assert any(r["path"] == "/tokenize" and r["status"] == 400 for r in access)
    # (an access line is written once its response has ended, which may come after the signal)
    assert messages[-1] == "stopped" and "shutting down" in messages[-3:]


def test_quiet_logs_no_access_lines(server_factory, tiny_models):
    server = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "1", "-q")
    try:
        with server.client() as c:
            assert c.get("/v1/models").status_code == 200
    finally:
        assert server.stop() == 0
    assert "/v1/models" not in server.log() and "listening" not in server.log()


def test_ctrl_c_on_an_idle_server_in_a_terminal_stops_cleanly(tiny_models):
    pexpect = pytest.importorskip("pexpect")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(Path(oxillama.__file__).resolve().parents[1]))
    child = pexpect.spawn(sys.executable, ["-m", "oxillama", "serve", "-m", str(tiny_models / "llama.gguf"),
                                           "--port", str(port), "--parallel", "1"],
                          env=env, encoding="utf-8", timeout=STOP_TIMEOUT_S, cwd=str(tiny_models))
    try:
        child.expect(f"listening on http://127.0.0.1:{port}")
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(0.5)                     # idle
        child.sendcontrol("c")
        child.expect(pexpect.EOF)
        out = child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, out
    assert "Traceback" not in out and "CancelledError" not in out, out
    assert "shutting down" in out and out.rstrip().endswith("stopped"), out
