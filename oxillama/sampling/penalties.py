"""Stages that edit a few logits: logit bias, banned tokens, user processors, repetition,
frequency and presence penalties, DRY. Each costs O(history window), not O(n_vocab)."""
from __future__ import annotations

import logging
import math
import re
from typing import Callable, Sequence

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling.base import Stage, StepContext, check_logits
from oxillama.sampling.candidates import Candidates

__all__ = ["LogitBias", "BanTokens", "LogitsProcessorStage", "RepetitionPenalty", "FrequencyPresencePenalty",
           "DRY", "dry_breakers_from_vocab"]

log = logging.getLogger("oxillama.sampling")


def _check_ids(ids: np.ndarray, n_vocab: int, what: str) -> None:
    if len(ids) and (ids.min() < 0 or ids.max() >= n_vocab):
        bad = int(ids.max()) if ids.max() >= n_vocab else int(ids.min())
        raise SamplerError(f"{what} names token id {bad}, outside the vocabulary of {n_vocab}")


class LogitBias(Stage):
    """logit[t] += bias[t]; a bias of -inf bans t. Applied first (llama.cpp, llama-cpp-python)."""

    name = "logit_bias"

    def __init__(self, bias: dict[int, float]):
        self.bias = dict(bias)
        self._ids = np.array(sorted(self.bias), dtype=np.int64)
        self._vals = np.array([self.bias[t] for t in sorted(self.bias)], dtype=np.float32)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if len(self._ids):
            _check_ids(self._ids, ctx.n_vocab, "logit_bias")
            cand.add_to(self._ids, self._vals)


class BanTokens(Stage):
    """Tokens that are never sampled (their logits become -inf)."""

    name = "banned_tokens"

    def __init__(self, token_ids: Sequence[int]):
        self.token_ids = tuple(int(t) for t in token_ids)
        self._ids = np.unique(np.array(self.token_ids, dtype=np.int64))

    @property
    def banned(self) -> np.ndarray:
        """The banned ids, sorted, each once."""
        return self._ids

    def banned_ids(self, n_vocab: int) -> np.ndarray:
        """The banned ids, checked against the vocabulary."""
        _check_ids(self._ids, n_vocab, "banned_tokens")
        return self._ids

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if not len(self._ids):
            return
        pos, _ = cand.positions_of(self.banned_ids(ctx.n_vocab))
        if len(pos):
            cand.remove_positions(pos)


class LogitsProcessorStage(Stage):
    """A user function `(tokens, logits) -> logits` (llama-cpp-python's `logits_processor` shape):
    tokens is the int32 history, logits a float32 row of n_vocab values: the sampler's own
    working row, never the caller's, so the function may edit it in place and return it (no
    copy is made then). Tokens it sets to -inf leave the candidates."""

    name = "logits_processor"

    def __init__(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]):
        if not callable(fn):
            raise SamplerError(f"logits_processor must be callable, got {type(fn).__name__}")
        self.fn = fn

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if cand.full:
            row = cand.logits
        else:
            row = np.full(ctx.n_vocab, -np.inf, dtype=np.float32)
            row[cand.ids] = cand.logits
        out = self.fn(ctx.tokens.astype(np.intc, copy=False), row)
        if out is None:
            raise SamplerError(f"logits_processor {self.fn!r} returned None; it must return the logits")
        out = check_logits(np.asarray(out), ctx.n_vocab)
        if cand.full:
            if out is not cand.logits:
                np.copyto(cand.logits, out)
            cand.is_sorted = False
            cand.changed()
        else:
            new = out[cand.ids]
            keep = np.flatnonzero(new > -np.inf)
            if not len(keep):
                raise SamplerError("the logits_processor removed every candidate token")
            cand.logits = new.astype(np.float32)
            cand.is_sorted = False
            cand.changed()
            if len(keep) < len(new):
                cand.keep(keep)


class RepetitionPenalty(Stage):
    """llama.cpp's repeat penalty: for each distinct token in the last `last_n` tokens of the
    history, logit /= penalty if logit > 0 else logit *= penalty (CTRL's penalty, with the fix
    for negative logits). last_n: -1 all history, 0 off."""

    name = "repetition_penalty"

    def __init__(self, penalty: float, last_n: int = 64):
        if not penalty > 0:
            raise SamplerError(f"repeat_penalty must be > 0, got {penalty}")
        self.penalty = float(penalty)
        self.last_n = int(last_n)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.penalty == 1.0 or self.last_n == 0:
            return
        seen = np.unique(ctx.window(self.last_n))
        pos, _ = cand.positions_of(seen)
        if not len(pos):
            return
        x = cand.logits[pos]
        cand.logits[pos] = np.where(x <= 0, x * self.penalty, x / self.penalty)
        cand.is_sorted = False
        cand.changed()


class FrequencyPresencePenalty(Stage):
    """logit -= count * frequency + (count > 0) * presence, count = occurrences of the token in
    the last `last_n` tokens of the history (llama.cpp's window; -1 all history, 0 off)."""

    name = "frequency_presence_penalty"

    def __init__(self, frequency: float = 0.0, presence: float = 0.0, last_n: int = 64):
        self.frequency = float(frequency)
        self.presence = float(presence)
        self.last_n = int(last_n)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if (self.frequency == 0.0 and self.presence == 0.0) or self.last_n == 0:
            return
        seen, counts = np.unique(ctx.window(self.last_n), return_counts=True)
        if len(seen):
            cand.add_to(seen, -(counts * self.frequency + self.presence))


class DRY(Stage):
    """DRY, "don't repeat yourself" (koboldcpp PR 982 by pi6am, as in llama.cpp).

    Let h be the last `last_n` tokens of the history (-1: all). For every earlier position j,
    n_j = length of the longest common suffix of h[:j+1] and h (the whole window), capped at the
    distance to the last sequence breaker. If n_j >= allowed_length, emitting h[j+1] next would
    extend that repeat, so h[j+1] gets
        logit -= multiplier * base ** (max_j n_j - allowed_length)
    (the max over all j followed by the same token; the exponent is capped so the power stays
    finite). Sequence breakers are token-id sequences (see dry_breakers_from_vocab); a
    single-token breaker is never penalised itself.
    """

    name = "dry"

    def __init__(self, multiplier: float, base: float = 1.75, allowed_length: int = 2, last_n: int = -1,
                 breakers: Sequence[Sequence[int]] = ()):
        if multiplier < 0 or base < 1 or allowed_length < 0:
            raise SamplerError(f"DRY needs multiplier >= 0, base >= 1, allowed_length >= 0; "
                               f"got {multiplier}, {base}, {allowed_length}")
        self.multiplier = float(multiplier)
        self.base = float(base)
        self.allowed_length = int(allowed_length)
        self.last_n = int(last_n)
        # head token -> tails (the rest of the breaker, in order)
        self.breakers: dict[int, list[tuple[int, ...]]] = {}
        for seq in breakers:
            seq = tuple(int(t) for t in seq)
            if not seq:
                continue
            tails = self.breakers.setdefault(seq[0], [])
            if seq[1:] not in tails:
                tails.append(seq[1:])
        # lookup tables by token id (a real vocabulary yields tens of thousands of breaker heads,
        # too many for a per-token np.isin)
        size = max(self.breakers, default=-1) + 1
        self._is_head = np.zeros(size, dtype=bool)
        self._is_single = np.zeros(size, dtype=bool)
        for head, tails in self.breakers.items():
            self._is_head[head] = True
            self._is_single[head] = () in tails

    @staticmethod
    def _lookup(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        inside = ids < len(table)
        out = np.zeros(len(ids), dtype=bool)
        out[inside] = table[ids[inside]]
        return out

    def _rep_limit(self, h: np.ndarray) -> int:
        """How far back a repeat may reach: up to (not including) the last sequence breaker."""
        n = len(h)
        if not self.breakers:
            return n
        # positions holding a breaker head, nearest the end first
        for p in np.flatnonzero(self._lookup(self._is_head, h))[::-1]:
            i = n - 1 - int(p)  # distance from the end
            longest = -1
            for tail in self.breakers[int(h[p])]:
                if len(tail) > longest and len(tail) <= i and tuple(h[p + 1:p + 1 + len(tail)]) == tail:
                    longest = len(tail)
            if longest >= 0:
                return i - longest
        return n

    def penalties(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(token_ids, penalty) that the next step subtracts, from the given window."""
        h = np.asarray(tokens, dtype=np.int64)
        n = len(h)
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float64))
        if n <= self.allowed_length:
            return empty
        rep_limit = self._rep_limit(h)
        if rep_limit < self.allowed_length:
            return empty
        # repeat lengths n_j for j < n-1, grown one token at a time over the still-matching j
        # (vectorised; the loop runs max n_j times, bounded by rep_limit)
        lengths = np.zeros(n - 1, dtype=np.int64)
        alive = np.arange(n - 1)
        length = 0
        while len(alive) and length < rep_limit:
            # compare h[j - length] with h[n - 1 - length]; j - length must stay inside the window
            ok = alive >= length
            alive = alive[ok]
            alive = alive[h[alive - length] == h[n - 1 - length]]
            length += 1
            lengths[alive] = length
        hits = np.flatnonzero(lengths >= self.allowed_length)
        if not len(hits):
            return empty
        next_tok = h[hits + 1]
        rep = lengths[hits]
        # the max repeat length per following token
        order = np.lexsort((-rep, next_tok))
        next_tok, rep = next_tok[order], rep[order]
        first = np.concatenate(([True], next_tok[1:] != next_tok[:-1]))
        toks, rep = next_tok[first], rep[first]
        if self.breakers:
            keep = ~self._lookup(self._is_single, toks)
            toks, rep = toks[keep], rep[keep]
        exp = (rep - self.allowed_length).astype(np.float64)
        if self.base > 1.000001:
            # cap so multiplier * base**exp stays below float max (llama.cpp's FLOAT_MAX_LOG)
            exp = np.minimum(exp, math.floor(88.7228391 / math.log(self.base)))
        return toks, self.multiplier * np.power(self.base, exp)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.multiplier == 0.0 or self.last_n == 0:
            return
        toks, pen = self.penalties(ctx.window(self.last_n))
        if len(toks):
            cand.add_to(toks, -pen)


def dry_breakers_from_vocab(breakers: Sequence[str], token_texts: Sequence[str],
                            tokenize: Callable[[str], list[int]] | None = None,
                            max_tail_tokens: int = 20, max_chars: int = 40) -> list[tuple[int, ...]]:
    """Turn DRY breaker strings into token-id sequences, as llama.cpp does: every token whose
    text contains the breaker is a one-token breaker; a token whose text ends with a proper prefix
    of the breaker starts a breaker whose tail is the tokenization of the rest (needs `tokenize`;
    without it only the first kind is found). Tails are cut at max_tail_tokens, breakers at
    max_chars characters (llama.cpp's limits).

    token_texts[i] is token i's decoded text. The search runs as a few regex scans over the
    joined vocabulary (no Python loop over 262k tokens); still, build it once per model."""
    texts = token_texts if isinstance(token_texts, list) else list(token_texts)
    sep = "\x00"
    try:
        joined = sep.join(texts) + sep
    except TypeError:
        raise SamplerError("token_texts must be strings (token i's decoded text)") from None
    if joined.count(sep) != len(texts):
        raise SamplerError("token texts contain NUL, which dry_breakers_from_vocab uses as a separator")
    # starts[i] = offset of token i's text in joined
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))

    def tokens_at(offsets: list[int]) -> np.ndarray:
        return np.searchsorted(starts, np.asarray(offsets, dtype=np.int64), side="right") - 1

    out: list[tuple[int, ...]] = []
    seen = set()

    def add(key):
        if key not in seen:
            seen.add(key)
            out.append(key)

    for b in breakers:
        if not b:
            continue
        b = b[:max_chars]
        whole = set(np.unique(tokens_at([m.start() for m in re.finditer(re.escape(b), joined)])).tolist())
        for tid in sorted(whole):
            add((tid,))
        if tokenize is None:
            continue
        for k in range(len(b) - 1, 0, -1):
            # texts ending with b[:k] (the match runs into the separator after the text)
            hits = tokens_at([m.start() for m in re.finditer(re.escape(b[:k] + sep), joined)])
            hits = [int(t) for t in np.unique(hits) if int(t) not in whole]
            if hits:
                tail = tuple(int(t) for t in tokenize(b[k:]))[:max_tail_tokens]
                for tid in hits:
                    add((tid,) + tail)
    return out
