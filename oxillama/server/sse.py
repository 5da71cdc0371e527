"""Server-sent events: each event's bytes made once, and the response that streams them.

The bytes are those sse-starlette wrote for this server before: `frame(data, event)` is `event: NAME` (when
named), one `data: ` line per line of the data, and a blank line, each line ended by CR LF (its events'
own separator; its pings, `: ping - <time>`, ended by LF alone, and so do these). The streamed chunks of
a text completion or a chat completion differ from one token to the next only in the text, so
`TextFrames` dumps the chunk body once with a marker where the text goes and makes each token's event
from the two halves around the text's JSON string (the same escaping as pydantic's, checked by the
tests); logprobs, tool calls, finish reasons and usage keep the pydantic bodies.

`EventStream` is the response: it sends each frame as the body iterator yields it, watches for the client
going away (the iterator is then cancelled, so its `finally` cancels the requests), writes an SSE comment
every PING_INTERVAL seconds while nothing else was sent (proxies close silent connections), and is cut
`drain_timeout` seconds after the server starts draining (`Streams.drain`). Per event it costs one
`send`: the frame is already bytes, and nothing is locked or timed per event (sse-starlette's response
took a lock and a cancel scope for each).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from starlette.responses import Response

log = logging.getLogger("oxillama.server")

PING_INTERVAL = 15.0            # seconds without an event before a comment is sent (sse-starlette's default)

HEADERS = [(b"cache-control", b"no-store"), (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no"),
           (b"content-type", b"text/event-stream; charset=utf-8")]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")     # where SSE cuts lines: a data line holds none of them
json_string = json.JSONEncoder(ensure_ascii=False).encode     # a str -> its JSON string, escaped as pydantic does

EOL = "\r\n"
DONE = b"data: [DONE]\r\n\r\n"


def frame(data: str, event: str | None = None) -> bytes:
    """One event: `event: NAME` (if named), a `data: ` line per line of data, a blank line."""
    head = "" if event is None else "event: " + _LINE_BREAK.sub("", event) + EOL
    if "\n" in data or "\r" in data:
        data = EOL.join("data: " + line for line in _LINE_BREAK.split(data))
    else:
        data = "data: " + data
    return (head + data + EOL + EOL).encode()


class TextFrames:
    """The events of one kind of chunk that differs only in one string: `body_json` is the chunk's JSON
    with MARK as that string's value; `frames(text)` is the event with text there instead."""

    MARK = "\ue000oxillama-text\ue000"      # private-use characters: JSON leaves them as they are

    def __init__(self, body_json: str):
        head, found, tail = body_json.partition(json_string(self.MARK))
        if not found or self.MARK in tail:
            raise ValueError("the chunk body must hold the marker string exactly once")
        self._head = b"data: " + head.encode()
        self._tail = (tail + EOL + EOL).encode()

    def __call__(self, text: str) -> bytes:
        return self._head + json_string(text).encode() + self._tail


class Streams:
    """The event streams a server has running, so that a drain can cut those still running after its
    timeout (uvicorn waits for open connections, and a stream's connection stays open until it ends)."""

    def __init__(self):
        self._running: set[asyncio.Task] = set()
        self.draining = False

    def add(self, task: asyncio.Task) -> None:
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def __len__(self) -> int:
        return len(self._running)

    def drain(self, timeout: float) -> None:
        """Called on the event loop when the server starts draining: streams still running `timeout`
        seconds later are cancelled (their requests with them)."""
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(timeout, self._cut)

    def _cut(self) -> None:
        if self._running:
            log.info("drain timeout: cutting %d running streams", len(self._running))
        for task in list(self._running):
            task.cancel()


class EventStream(Response):
    """A text/event-stream response over an async iterator of frames (bytes, see `frame`). A starlette
    Response for FastAPI's sake (a route returns it as it is); its own __call__ streams."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], streams: Streams | None = None,
                 ping_interval: float = PING_INTERVAL):
        self.status_code = 200
        self.background = None       # (FastAPI may put its background tasks here: run once the stream ends)
        self.frames = frames
        self.streams = streams
        self.ping_interval = ping_interval
        self._sent = 0              # frames sent (the ping looks whether it moved)
        self._open = True           # False once the final (empty) body is sent or the response is over

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        pump = asyncio.ensure_future(self._pump(send))
        helpers = [asyncio.ensure_future(_until_disconnect(receive))]
        if self.ping_interval > 0:
            helpers.append(asyncio.ensure_future(self._ping(send)))
        if self.streams is not None:
            self.streams.add(pump)
        try:
            await asyncio.wait([pump, helpers[0]], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._open = False
            for task in helpers:
                task.cancel()
            if not pump.done():          # the client went away (or this task was cancelled): stop generating
                pump.cancel()
                await asyncio.wait([pump])
        if not pump.cancelled() and pump.exception() is not None:
            raise pump.exception()
        if self.background is not None:
            await self.background()

    async def _pump(self, send) -> None:
        frames = self.frames
        try:
            async for data in frames:
                await send({"type": "http.response.body", "body": data, "more_body": True})
                self._sent += 1
            self._open = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if self._open and self.streams is not None and self.streams.draining:
                self._open = False       # cut by the drain: the response still ends as HTTP wants
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            raise
        finally:
            await _aclose(frames)

    async def _ping(self, send) -> None:
        seen = -1
        while True:
            await asyncio.sleep(self.ping_interval)
            if self._sent == seen and self._open:    # nothing since the last look: say something
                comment = f": ping - {datetime.now(timezone.utc)}\n\n".encode()
                await send({"type": "http.response.body", "body": comment, "more_body": True})
            seen = self._sent


async def _until_disconnect(receive) -> None:
    """Returns when the client has gone away (the request body is read: what comes next is that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _aclose(frames) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError):     # (already closed, or running: its own task closes it)
            await aclose()
