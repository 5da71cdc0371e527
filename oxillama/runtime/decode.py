"""The per-token step, one road for every caller: `Decoder.advance(logits, history)` samples the next
token (grammar masking only when the sampled token is rejected), records its logprob entry, feeds the
grammar, and checks the ends in one order: end-of-generation token, stop string, stopping criteria,
grammar finished, max_tokens. It returns (token, text piece, finished?); `completion()` builds the
Completion. InferenceEngine.generate and the Scheduler both step through it (vLLM's `check_stop` over one
request object); `TextOutput` (detokenizer + stop strings) is also what speculative decoding and beam
search turn their tokens into text with.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from oxillama.runtime.completion import Completion, Timings, Usage, logprob_entries
from oxillama.runtime.request import Prepared, Request
from oxillama.sampling import StopStrings, token_logprobs, top_logprobs

__all__ = ["Decoder", "TextOutput", "text_pieces"]


class TextOutput:
    """A token stream's text: UTF-8 pieces from the detokenizer, cut at the first stop string (text that
    may start one is held back, so a stream never shows half of it)."""

    def __init__(self, tokenizer, stops: StopStrings):
        self._detok = tokenizer.detokenizer()
        self.stops = stops

    def add(self, token: int) -> tuple[str, bool]:
        """(text that may be shown now, whether a stop string was met)."""
        return self.stops.feed(self._detok.add(token))

    def flush(self) -> str:
        """What is held back, when generation ends for another reason than a stop string."""
        text, stopped = self.stops.feed(self._detok.flush())
        return text + ("" if stopped else self.stops.flush())


def text_pieces(tokenizer, tokens: Iterable[int], stop, callback: Callable[[str], None] | None = None
                ) -> Iterator[str]:
    """The text pieces of a token stream (speculative decoding, beam search), ending at the first stop
    string; a generator of tokens is closed there, so it can put its session in order at once."""
    out = TextOutput(tokenizer, StopStrings(stop))
    for tok in tokens:
        text, stopped = out.add(tok)
        if text:
            if callback is not None:
                callback(text)
            yield text
        if stopped:
            if hasattr(tokens, "close"):
                tokens.close()
            return
    text = out.flush()
    if text:
        if callback is not None:
            callback(text)
        yield text


class Decoder:
    """One sequence's generation state: its sampler, grammar matcher, text output, the generated tokens
    (with their logprob entries when asked) and the emitted text.

    tokens / token_logprobs are appended to in order, so a stream can read them as it runs (entry k is
    final once a piece at mark > k was produced)."""

    def __init__(self, request: Request, prepared: Prepared, tokenizer, max_tokens: int):
        self.request = request
        self.sampler, self.matcher = prepared.sampler, prepared.matcher
        self.text_out = TextOutput(tokenizer, prepared.stops)
        self.eog = frozenset() if request.ignore_eos else tokenizer.eog_ids
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.token_logprobs: list[dict[int, float]] | None = [] if request.n_logprobs is not None else None
        self.pieces: list[str] = []
        self.finish_reason: str | None = None
        self._masked: np.ndarray | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def sample(self, logits: np.ndarray, history: np.ndarray) -> int:
        """The next token; under a grammar the sampled token is checked first and the whole vocabulary
        masked only when it is rejected."""
        token = int(self.sampler.sample(logits, history))
        m = self.matcher
        if m is None or m.is_token_allowed(token):
            return token
        if self._masked is None:
            self._masked = np.empty_like(logits)
        m.apply_to_logits(logits, out=self._masked)
        return int(self.sampler.sample(self._masked, history))

    def advance(self, logits: np.ndarray, history: np.ndarray) -> tuple[int, str, bool]:
        """Sample the token after history (the sequence's tokens so far, logits the last one's) and check
        whether generation ends there: (token, text piece that may be shown now, finished)."""
        token = self.sample(logits, history)
        self.tokens.append(token)
        if self.token_logprobs is not None:
            ids, lps = top_logprobs(logits, self.request.n_logprobs)
            entry = {int(i): float(v) for i, v in zip(ids, lps)}
            if token not in entry:
                entry[token] = float(token_logprobs(logits, [token])[0])
            self.token_logprobs.append(entry)
        m = self.matcher
        if m is not None:
            m.accept_token(token)
        if token in self.eog:
            return token, self._end("stop"), True
        text, stopped = self.text_out.add(token)
        if stopped:
            self.finish_reason = "stop"
            return token, self._keep(text), True
        criteria = self.request.criteria
        if criteria and criteria(history.tolist() + [token], logits):
            return token, self._keep(text) + self._end("stop"), True
        if m is not None and m.is_finished:
            return token, self._keep(text) + self._end("stop"), True
        if len(self.tokens) >= self.max_tokens:
            return token, self._keep(text) + self._end("length"), True
        return token, self._keep(text), False

    def end(self, reason: str) -> str:
        """End here for a reason of the caller's ("length" before any token, "cancelled": nothing flushed);
        returns the text held back, if any is to be shown."""
        if self.finished:
            return ""
        if reason == "cancelled":
            self.finish_reason = reason
            return ""
        return self._end(reason)

    def _end(self, reason: str) -> str:
        self.finish_reason = reason
        return self._keep(self.text_out.flush())

    def _keep(self, text: str) -> str:
        if text:
            self.pieces.append(text)
        return text

    def completion(self, usage: Usage, timings: Timings | None, token_text: Callable[[int], str]) -> Completion:
        """The Completion of what was generated (the text emitted, the tokens, why it ended)."""
        lps = self.token_logprobs
        return Completion("".join(self.pieces), tokens=self.tokens, finish_reason=self.finish_reason or "length",
                          logprobs=lps, usage=usage, timings=timings,
                          token_logprobs=None if lps is None else logprob_entries(self.tokens, lps, token_text))
