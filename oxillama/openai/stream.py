"""Stream assembly: one streamed choice's text pieces -> the choice dicts of its chunks, with the logprobs
of the tokens behind each piece, for the text-completions and the chat shapes. The server wraps them in
its pydantic chunk bodies, `oxillama.Llama` in plain chunk dicts; both send what these return.

A piece comes with its mark, the tokens generated when it was produced (RequestHandle.astream_marked;
None: all so far): a token whose text is held back (an unfinished UTF-8 character, a possible stop string,
a tool call being parsed) sends its logprobs with the piece that finally carries it, or with the last
chunk. `source` is what StreamedLogprobs reads (.tokens and .token_logprobs, or a function giving it).
"""
from __future__ import annotations

from oxillama.openai.chat import ChatPlan
from oxillama.openai.shapes import (StreamedLogprobs, chat_finish_reason, chat_logprobs, completion_choice,
                                    completion_logprobs_from)

__all__ = ["CompletionChoiceStream", "ChatChoiceStream"]


class CompletionChoiceStream:
    """The choices of one streamed text completion: the echoed prompt (if any), a choice per piece, then
    one with the finish reason."""

    def __init__(self, index: int, source, tokenizer, n_logprobs: int | None, echo: str = ""):
        self.index, self.echo = index, echo
        self._lps = None if n_logprobs is None else StreamedLogprobs(
            source, completion_logprobs_from(tokenizer, n_logprobs, len(echo)))

    def opening(self) -> list[dict]:
        return [completion_choice(self.echo, self.index)] if self.echo else []

    def piece(self, text: str, mark: int | None = None) -> list[dict]:
        return [completion_choice(text, self.index, None, self._take(mark))]

    def finish(self, finish_reason: str, mark: int | None = None) -> list[dict]:
        return [completion_choice("", self.index, finish_reason, self._take(mark))]

    def _take(self, mark):
        return None if self._lps is None else self._lps.take(mark)


class ChatChoiceStream:
    """The choices of one streamed chat completion: the role, content or tool-call deltas as the text
    comes (ChatPlan.streamer), then an empty delta with the finish reason ("tool_calls" when calls were
    made)."""

    def __init__(self, index: int, plan: ChatPlan, source, tokenizer, n_top: int | None, deltas=None):
        self.index = index
        self._deltas = plan.streamer() if deltas is None else deltas    # (the server's splits thinking off)
        self._lps = None if n_top is None else StreamedLogprobs(
            source, lambda tokens, entries: chat_logprobs(tokenizer, tokens, entries, n_top))

    def opening(self, content: str | None = None) -> list[dict]:
        delta = {"role": "assistant"} if content is None else {"role": "assistant", "content": content}
        return [self._choice(delta)]

    def piece(self, text: str, mark: int | None = None) -> list[dict]:
        return [self._choice(delta, self._take(mark)) for delta in self._deltas.feed(text)]

    def finish(self, finish_reason: str, mark: int | None = None) -> list[dict]:
        out = [self._choice(delta, self._take(mark)) for delta in self._deltas.finish()]
        reason = chat_finish_reason(finish_reason, range(self._deltas.n_calls))
        out.append(self._choice({}, self._take(mark), reason))
        return out

    def _choice(self, delta: dict, logprobs=None, finish_reason: str | None = None) -> dict:
        return {"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}

    def _take(self, mark):
        return None if self._lps is None else self._lps.take(mark)
