"""oxillama.server.sse without a socket: the frames' bytes, the text chunks made from a template equal to
the pydantic bodies, and the response's disconnect and ping handling over a fake ASGI connection (the drain on SIGTERM:
test_lifecycle)."""
from __future__ import annotations

import asyncio
import json

import pytest

from oxillama.server import sse
from oxillama.server.protocol.chat import ChatCompletionChunk, ChatCompletionStreamChoice
from oxillama.server.protocol.completions import CompletionChoice, CompletionResponse

# texts whose JSON needs care: quotes, backslashes, control characters, line separators, non-ASCII, astral
TEXTS = ["", " plain", 'say "hi"', "back\\slash", "tab\there\nnew\rline", "\x00\x1f\x7f", "a\u2028b\u2029c\x85d",
         "é中文", "😀 \U0010fffd", "</script>", "\ue000"]


def test_frame_bytes():
    assert sse.frame("[DONE]") == b"data: [DONE]\r\n\r\n" == sse.DONE
    assert sse.frame('{"a":1}', event="message_start") == b'event: message_start\r\ndata: {"a":1}\r\n\r\n'
    assert sse.frame("one\ntwo\r\nthree") == b"data: one\r\ndata: two\r\ndata: three\r\n\r\n"
    assert sse.frame("x", event="bad\nname") == b"event: badname\r\ndata: x\r\n\r\n"
    # U+2028 and friends are not SSE line breaks: they stay inside the data line
    assert sse.frame("a\u2028b\x85c") == "data: a\u2028b\x85c\r\n\r\n".encode()


@pytest.mark.parametrize("text", TEXTS)
def test_text_frames_equal_the_pydantic_completion_chunk(text):
    def body(t):
        return CompletionResponse(id="cmpl-1", created=7, model="mödel \"x\"",
                                  choices=[CompletionChoice(index=2, text=t)]).model_dump_json()
    frames = sse.TextFrames(body(sse.TextFrames.MARK))
    assert frames(text) == sse.frame(body(text))
    assert json.loads(frames(text)[len(b"data: "):].decode())["choices"][0]["text"] == text


@pytest.mark.parametrize("text", TEXTS)
def test_text_frames_equal_the_pydantic_chat_chunk(text):
    def body(t):
        choice = {"index": 0, "delta": {"content": t}, "logprobs": None, "finish_reason": None}
        return ChatCompletionChunk(id="chatcmpl-1", created=7, model="m",
                                   choices=[ChatCompletionStreamChoice.model_validate(choice)]).model_dump_json()
    assert sse.TextFrames(body(sse.TextFrames.MARK))(text) == sse.frame(body(text))


def test_text_frames_need_the_marker_once():
    with pytest.raises(ValueError, match="marker"):
        sse.TextFrames('{"text":"no marker"}')


class FakeConnection:
    """An ASGI connection: what the response sent, and a client that goes away when told to."""

    def __init__(self):
        self.sent: list[dict] = []
        self.gone = asyncio.Event()

    async def receive(self):
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


SCOPE = {"type": "http", "method": "POST"}


def run(coro):
    return asyncio.run(coro)


def test_event_stream_sends_the_frames_and_ends():
    async def frames():
        yield sse.frame("1")
        yield sse.DONE

    async def main():
        conn = FakeConnection()
        await sse.EventStream(frames())(SCOPE, conn.receive, conn.send)
        return conn
    conn = run(main())
    start = conn.sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/event-stream")
    assert conn.body() == b"data: 1\r\n\r\ndata: [DONE]\r\n\r\n"
    assert conn.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_disconnect_closes_the_frames_iterator():
    closed = []

    async def frames():
        try:
            yield sse.frame("first")
            await asyncio.sleep(3600)          # a request that would go on for an hour
            yield sse.frame("never")
        finally:
            closed.append(True)                # where the routes cancel their requests

    async def main():
        conn = FakeConnection()
        task = asyncio.ensure_future(sse.EventStream(frames())(SCOPE, conn.receive, conn.send))
        while len(conn.sent) < 2:
            await asyncio.sleep(0.01)
        conn.gone.set()
        await asyncio.wait_for(task, 5)
        return conn
    conn = run(main())
    assert closed == [True] and conn.body() == b"data: first\r\n\r\n"


def test_pings_keep_a_silent_stream_alive():
    async def frames():
        yield sse.frame("1")
        await asyncio.sleep(0.35)
        yield sse.frame("2")

    async def main():
        conn = FakeConnection()
        await sse.EventStream(frames(), ping_interval=0.1)(SCOPE, conn.receive, conn.send)
        return conn
    body = run(main()).body()
    assert body.startswith(b"data: 1\r\n\r\n") and body.endswith(b"data: 2\r\n\r\n")
    assert 1 <= body.count(b": ping - ") <= 4, body


CHAT_CHOICES = [{"index": 0, "delta": {"content": t}, "logprobs": None, "finish_reason": None} for t in TEXTS] + [
    {"index": 1, "delta": {"reasoning_content": "hmm \u2028"}, "logprobs": None, "finish_reason": None},
    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
    {"index": 0, "delta": {"content": "x", "reasoning_content": None}, "logprobs": None, "finish_reason": None},
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                           "function": {"name": "f", "arguments": "{}"}}]},
     "logprobs": None, "finish_reason": None},
    {"index": 0, "delta": {"content": "y"}, "logprobs": {"content": [], "refusal": None}, "finish_reason": None},
    {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"},
]


def test_chat_chunk_frames_equal_the_pydantic_chunks():
    """Every streamed chat choice, plain text (through a template) or not, is sent as the pydantic chunk."""
    from oxillama.server.routes._generation import ChunkFrames
    from oxillama.server.routes.chat import text_choice, text_of_choice

    def chunk(choices, usage=None):
        return ChatCompletionChunk(id="chatcmpl-1", created=7, model="m", usage=usage,
                                   choices=[ChatCompletionStreamChoice.model_validate(c) for c in choices])
    frames = ChunkFrames(chunk, text_of_choice, text_choice)
    assert sum(text_of_choice(c) is not None for c in CHAT_CHOICES) == len(TEXTS) + 1
    for c in CHAT_CHOICES + CHAT_CHOICES:      # the second time through the templates made the first time
        assert frames.choice(c) == frames.chunk([c])


def test_completion_chunk_frames_equal_the_pydantic_chunks():
    from oxillama.openai.shapes import completion_choice
    from oxillama.server.routes._generation import ChunkFrames
    from oxillama.server.routes.completions import text_choice, text_of_choice

    def chunk(choices, usage=None):
        return CompletionResponse(id="cmpl-1", created=7, model="m", usage=usage,
                                  choices=[CompletionChoice.model_validate(c) for c in choices])
    choices = [completion_choice(t, i % 3) for i, t in enumerate(TEXTS)] + [
        completion_choice("", 0, "length"), completion_choice("a", 1, None, {"text_offset": [0], "tokens": ["a"],
                                                                             "token_logprobs": [-1.0],
                                                                             "top_logprobs": [{"a": -1.0}]})]
    frames = ChunkFrames(chunk, text_of_choice, text_choice)
    for c in choices + choices:
        assert frames.choice(c) == frames.chunk([c])
