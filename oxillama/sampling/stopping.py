"""Stopping criteria: when generation ends.

Token-level criteria use llama-cpp-python's `stopping_criteria` shape, a callable
`(tokens, logits) -> bool` called after each generated token (tokens: the whole history so far).
Stop strings work on text, which crosses token boundaries: `StopStrings` is fed each token's text
and releases only text that cannot be the start of a stop string, so a streamed answer never shows
half of a stop string.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from oxillama.errors import SamplerError

__all__ = ["StoppingCriteria", "MaxNewTokens", "StopTokens", "StoppingCriteriaList", "StopStrings"]


class StoppingCriteria:
    """Base class: `criteria(tokens, logits) -> True` ends generation."""

    def __call__(self, tokens: np.ndarray, logits: np.ndarray | None) -> bool:
        raise NotImplementedError


class MaxNewTokens(StoppingCriteria):
    """Stop once `max_new_tokens` tokens follow the prompt of `prompt_len` tokens."""

    def __init__(self, max_new_tokens: int, prompt_len: int):
        if max_new_tokens < 0 or prompt_len < 0:
            raise SamplerError(f"max_new_tokens and prompt_len must be >= 0, got {max_new_tokens}, {prompt_len}")
        self.max_new_tokens = int(max_new_tokens)
        self.prompt_len = int(prompt_len)

    def __call__(self, tokens, logits=None) -> bool:
        return len(tokens) - self.prompt_len >= self.max_new_tokens


class StopTokens(StoppingCriteria):
    """Stop when the last token is one of `token_ids` (end-of-generation tokens such as EOS/EOT)."""

    def __init__(self, token_ids: Iterable[int]):
        self.token_ids = frozenset(int(t) for t in token_ids)

    def __call__(self, tokens, logits=None) -> bool:
        return len(tokens) > 0 and int(tokens[-1]) in self.token_ids


class StoppingCriteriaList(list):
    """Stops when any member does. Members are StoppingCriteria or plain callables."""

    def __init__(self, items: Iterable[Callable] = ()):
        items = list(items)
        for it in items:
            if not callable(it):
                raise SamplerError(f"stopping criteria must be callable, got {type(it).__name__}")
        super().__init__(items)

    def __call__(self, tokens, logits=None) -> bool:
        toks = np.asarray(tokens, dtype=np.intc)
        return any(bool(c(toks, logits)) for c in self)


class StopStrings:
    """Incremental stop-string matcher over streamed text.

    `feed(piece) -> (text, stopped)`: `text` is what may be shown now. When a stop string
    appears, `text` ends right before its first occurrence (the stop string itself is not
    returned) and stopped is True. Otherwise the longest tail that is a prefix of some stop
    string is held back until later text confirms or rules it out. `flush()` returns what is
    held back when generation ends for another reason.
    """

    def __init__(self, stops: Sequence[str]):
        if isinstance(stops, str):
            stops = [stops]
        stops = [s for s in stops if s]
        for s in stops:
            if not isinstance(s, str):
                raise SamplerError(f"stop strings must be str, got {type(s).__name__}")
        self.stops = tuple(stops)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def feed(self, piece: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        buf = self._held + piece
        best = None
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is not None:
            self.stopped = True
            self.matched = best[1]
            self._held = ""
            return buf[:best[0]], True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:k]):
                    hold = k
                    break
        self._held = buf[len(buf) - hold:] if hold else ""
        return buf[:len(buf) - hold], False

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out
