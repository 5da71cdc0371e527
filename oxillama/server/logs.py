"""What `oxillama serve` says while it runs: one access line per request (uvicorn's access-log style)
on the "oxillama.server.access" logger, and the JSON log format (`--log-format json`: one object per
line, with the access fields as keys) for log collectors."""
from __future__ import annotations

import json
import logging
import time
from http import HTTPStatus

access_log = logging.getLogger("oxillama.server.access")

# the fields an access record carries (as `extra=`), which the JSON format writes as keys
ACCESS_FIELDS = ("client", "method", "path", "http_version", "status", "duration_ms")


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message", ...access fields, "exc_info"?} on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                       + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key in ACCESS_FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def use_json_format() -> None:
    """Every handler of the root logger writes JSON lines (the CLI set them up with basicConfig)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter())


class AccessLog:
    """Logs each HTTP request once its response has ended (a stream: when its last event is sent), as
    uvicorn's access log does: `127.0.0.1:50312 - "POST /v1/chat/completions HTTP/1.1" 200 OK 812.4 ms`.
    Plain ASGI, so streams pass untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500        # if the app fails before it starts a response

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, send_and_note)
        finally:
            client = scope.get("client")
            client = f"{client[0]}:{client[1]}" if client else "-"
            path = scope.get("path", "")
            if scope.get("query_string"):
                path += "?" + scope["query_string"].decode("latin-1")
            version = scope.get("http_version", "1.1")
            ms = (time.perf_counter() - start) * 1e3
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = ""
            access_log.info('%s - "%s %s HTTP/%s" %d %s %.1f ms', client, scope.get("method", ""), path, version,
                            status, phrase, ms,
                            extra={"client": client, "method": scope.get("method", ""), "path": path,
                                   "http_version": version, "status": status, "duration_ms": round(ms, 1)})
