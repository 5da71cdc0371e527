"""The real server in a subprocess (`python -m oxillama serve ...`) on a free loopback port, one per test
module; tests talk to it with the official `openai` client and with httpx."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
httpx = pytest.importorskip("httpx")

import oxillama  # noqa: E402

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
TINY_MODELS = Path(__file__).resolve().parents[1] / "models" / "data"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m oxillama serve` running the same oxillama package as the tests."""

    def __init__(self, model: str, *args: str, api_key: str | None = None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [sys.executable, "-m", "oxillama", "serve", "-m", model, "--port", str(self.port), *args]
        if api_key:
            cmd += ["--api-key", api_key]
        env = dict(os.environ)
        package_root = str(Path(oxillama.__file__).resolve().parents[1])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=tempfile.gettempdir())

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not healthy after {STARTUP_TIMEOUT_S} s:\n{self.log()}")

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers(), timeout=120.0, **kw)

    def openai(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "none", max_retries=0,
                             timeout=120.0, **kw)

    def async_openai(self, **kw):
        import openai
        return openai.AsyncOpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "none", max_retries=0,
                                  timeout=120.0, **kw)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server and wait for it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(model: str, *args: str, api_key: str | None = None) -> ServerProcess:
    server = ServerProcess(model, *args, api_key=api_key)
    try:
        server.wait_ready()
    except BaseException:
        server.stop(signal.SIGKILL)
        raise
    return server


@pytest.fixture(scope="session")
def server_factory():
    """start_server(model, *args, api_key=None) -> a healthy ServerProcess; stop() it when done."""
    return start_server


@pytest.fixture(scope="session")
def tiny_models() -> Path:
    return TINY_MODELS


@pytest.fixture(scope="module")
def smollm2_server(smollm2_path):
    """SmolLM2-135M behind the server, 8 parallel sequences, n_ctx 512."""
    server = start_server(smollm2_path, "--parallel", "8", "--n-ctx", "512", "--alias", "smol")
    yield server
    server.stop()
