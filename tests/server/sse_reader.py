"""Reading an event stream in the tests: its lines cut where SSE cuts them (CR LF, LF or CR) and nowhere
else. httpx's iter_lines also cuts at U+2028, U+2029, U+0085 and the like, which a token's text may hold
inside a JSON string (then a `data:` line arrives in two halves, neither of them JSON)."""
from __future__ import annotations

import re

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_lines(response):
    """The lines of an httpx streaming response's event stream, as they come."""
    buf = ""
    for text in response.iter_text():
        buf += text
        cut = len(buf) - 1 if buf.endswith("\r") else len(buf)     # a CR may be the first half of a CR LF
        *lines, rest = _LINE_BREAK.split(buf[:cut])
        buf = rest + buf[cut:]
        yield from lines
    if buf:
        yield from _LINE_BREAK.split(buf)[:1]


def sse_data(response) -> list[str]:
    """The `data:` payloads of a whole event stream, in order."""
    return [line[len("data: "):] for line in sse_lines(response) if line.startswith("data: ")]
