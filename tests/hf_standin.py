"""A stand-in for the Hugging Face Hub on 127.0.0.1, enough for huggingface_hub's list_repo_files and
hf_hub_download (HF_ENDPOINT points at it): the tree API, the resolve URLs (HEAD and GET, with Range),
and the Hub's 404 error codes. It records each request's Authorization header, so a test can see
HF_TOKEN sent. Never the internet."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class StandInHub:
    """repos: {"org/name": {"file name": bytes}}; .endpoint is the base URL to set as HF_ENDPOINT."""

    def __init__(self, repos: dict[str, dict[str, bytes]], token: str | None = None):
        self.repos = repos
        self.token = token              # when set, requests without "Bearer <token>" get 401
        self.requests: list[tuple[str, str, str | None]] = []    # (method, path, authorization)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "StandInHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self) -> list[str]:
        return [path for method, path, _ in self.requests if method == "GET" and "/resolve/" in path]

    # ---- the routes ----

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        auth = h.headers.get("Authorization")
        self.requests.append((h.command, path, auth))
        if self.token is not None and auth != f"Bearer {self.token}":
            return self._error(h, 401, "GatedRepo", "Access to this repository is restricted")
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
        if m:
            files = self.repos.get(m.group(1))
            if files is None:
                return self._error(h, 404, "RepoNotFound", "Repository not found")
            tree = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in sorted(files.items())]
            return self._send(h, 200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, body)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            files = self.repos.get(m.group(1))
            if files is None:
                return self._error(h, 404, "RepoNotFound", "Repository not found")
            data = files.get(m.group(3))
            if data is None:
                return self._error(h, 404, "EntryNotFound", "Entry not found")
            etag = hashlib.sha256(data).hexdigest()
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"', "X-Linked-Etag": f'"{etag}"',
                       "X-Linked-Size": str(len(data)), "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            status = 200
            rng = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
            if rng and body:
                start = int(rng.group(1))
                end = int(rng.group(2)) if rng.group(2) else len(data) - 1
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                data, status = data[start:end + 1], 206
            return self._send(h, status, data, headers, body)
        self._error(h, 404, None, "Not found")

    @staticmethod
    def _send(h, status: int, data: bytes, headers: dict, body: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(self, h, status: int, code: str | None, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, status, data, headers, h.command != "HEAD")
