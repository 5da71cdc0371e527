"""Headless Chromium driven over the DevTools protocol (a WebSocket, JSON commands): enough to open a
page, type into it, click, and read the DOM. Uses the system's chromium (Debian's `chromium` package,
which .ci/run installs) and the `websockets` package."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
START_TIMEOUT_S = 60.0


def find_browser() -> str | None:
    return os.environ.get("OXILLAMA_TEST_BROWSER") or next(filter(None, map(shutil.which, BROWSERS)), None)


class Browser:
    """One headless browser with one page; close() ends it."""

    def __init__(self, executable: str):
        from websockets.sync.client import connect
        # Chromium's helper processes can still write the profile just after the browser exits
        self._profile = tempfile.TemporaryDirectory(prefix="oxillama-chromium-", ignore_cleanup_errors=True)
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port = self._devtools_port()
            # keep reading the browser's log, so a full pipe never blocks it
            threading.Thread(target=self.proc.stderr.read, daemon=True).start()
            import httpx
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page = next(t for t in targets if t.get("type") == "page")
            self._ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=20)
        except BaseException:
            self.close()
            raise
        self._next_id = 0
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _devtools_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("the browser did not start:\n" + "".join(seen[-20:]))

    def call(self, method: str, **params) -> dict:
        """Send one command and wait for its answer (events in between are dropped)."""
        self._next_id += 1
        ident = self._next_id
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def wait_for(self, expression: str, timeout: float = 60.0):
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout} s: {expression}")
            time.sleep(0.1)

    def type_text(self, selector: str, text: str) -> None:
        """Focus an element and type into it as a keyboard would (Input.insertText)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                      nativeVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}))

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element."""
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def close(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for _ in range(20):     # give the helpers' last writes a moment, then remove what is left
            try:
                shutil.rmtree(self._profile.name)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        self._profile.cleanup()
