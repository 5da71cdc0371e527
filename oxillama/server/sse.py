"""Server-sent events: each event's bytes made once, streamed by sse-starlette.

`frame(data, event)` is `event: NAME` (when named), one `data: ` line per line of the data, and a blank
line, each line ended by CR LF: the bytes sse-starlette's ServerSentEvent writes. The streamed chunks of a
text completion or a chat completion differ from one token to the next only in the text, so `TextFrames`
dumps the chunk body once with a marker where the text goes and makes each token's event from the two
halves around the text's JSON string (the same escaping as pydantic's, checked by the tests); logprobs,
tool calls, finish reasons and usage keep the pydantic bodies.

`EventStream` is sse-starlette's EventSourceResponse over those bytes (it passes bytes through as they
are): it watches for the client going away (the iterator is then closed, so its `finally` cancels the
requests), pings every PING_INTERVAL seconds, and on SIGINT/SIGTERM gives a running stream the drain
timeout before it is cut.
"""
from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse

PING_INTERVAL = 15.0            # seconds between keep-alive comments (sse-starlette's default)

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


class EventStream(EventSourceResponse):
    """A text/event-stream response over an async iterator of frames (bytes, see `frame`); a running stream
    gets `drain_timeout` seconds once the server starts shutting down."""

    def __init__(self, frames: AsyncIterator[bytes], drain_timeout: float = 0.0,
                 ping_interval: float = PING_INTERVAL):
        super().__init__(frames, ping=ping_interval, sep="\n", shutdown_grace_period=drain_timeout)

    async def _send_with_timeout(self, send, message) -> None:
        # sse-starlette opens a cancel scope around every send for its optional send timeout; without one (ours)
        # the scope only costs time, once per token
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)
