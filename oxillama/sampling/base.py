"""What every sampling stage is: a small object with `apply(candidates, ctx)`; selectors pick.

A stage can also be used alone on a logits row, in the llama-cpp-python `logits_processor` shape:
`TopP(0.9)(tokens, logits)` returns a new row where removed tokens are -inf.
"""
from __future__ import annotations

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling
from oxillama.sampling.candidates import Candidates, Workspace
from oxillama.sampling.rng import SamplerRNG

__all__ = ["Stage", "Selector", "StepContext", "as_history", "check_logits"]


class StepContext:
    """What a stage may read besides the candidates: the token history, the RNG, n_vocab.

    The history is converted to an int array on first use only: a chain without penalties never
    pays for turning a long Python list into an array."""

    __slots__ = ("_tokens", "_raw_tokens", "rng", "n_vocab")

    def __init__(self, tokens, rng: SamplerRNG | None, n_vocab: int):
        self._raw_tokens = tokens
        self._tokens = None
        self.rng = rng
        self.n_vocab = n_vocab

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = as_history(self._raw_tokens)
        return self._tokens

    def window(self, last_n: int) -> np.ndarray:
        """The last `last_n` tokens of the history (-1: all), checked to be valid token ids."""
        toks = self.tokens if last_n < 0 else self.tokens[len(self.tokens) - min(last_n, len(self.tokens)):]
        if len(toks):
            lo, hi = int(toks.min()), int(toks.max())
            if lo < 0 or hi >= self.n_vocab:
                bad = lo if lo < 0 else hi
                raise SamplerError(f"token history holds id {bad}, outside the vocabulary of {self.n_vocab}")
        return toks


def as_history(tokens) -> np.ndarray:
    """The token history as a 1-D int64 array (no copy when it already is one)."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise SamplerError(f"tokens must be 1-D, got shape {tokens.shape}")
        if tokens.dtype.kind not in "iu":
            if tokens.size == 0:
                return np.zeros(0, dtype=np.int64)
            raise SamplerError(f"tokens must be integers, got dtype {tokens.dtype}")
        return tokens
    try:
        arr = np.asarray(tokens if tokens is not None else (), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise SamplerError("tokens must be a sequence of token ids") from None
    if arr.ndim != 1:
        raise SamplerError(f"tokens must be 1-D, got shape {arr.shape}")
    return arr


def check_logits(logits, n_vocab: int | None, scan: bool = True) -> np.ndarray:
    """A 1-D float32 view of logits (converted only if it is not float32 already), checked for
    length and, if scan, for NaN and +inf. -inf is allowed: it marks a token that must never be
    sampled. (Sampler.sample scans while copying instead: see copy_checked.)"""
    if not isinstance(logits, np.ndarray):
        try:
            logits = np.asarray(logits, dtype=np.float32)
        except (TypeError, ValueError):
            raise SamplerError(f"logits must be a float array, got {type(logits).__name__}") from None
    if logits.ndim != 1:
        raise SamplerError(f"logits must be a 1-D row of n_vocab values, got shape {logits.shape}")
    if logits.dtype != np.float32:
        if logits.dtype.kind not in "fiu":
            raise SamplerError(f"logits must be floating point, got dtype {logits.dtype}")
        logits = logits.astype(np.float32)
    if n_vocab is not None and logits.shape[0] != n_vocab:
        raise SamplerError(f"logits have {logits.shape[0]} entries, the vocabulary has {n_vocab}")
    if logits.shape[0] == 0:
        raise SamplerError("logits are empty")
    if not logits.flags.c_contiguous:
        logits = np.ascontiguousarray(logits)
    if not scan:
        return logits
    # one SIMD pass: the sum is finite unless some entry is NaN or infinite (or it overflows)
    total = float(np.add.reduce(logits, dtype=np.float32))
    if not np.isfinite(total):
        if np.isnan(logits).any():
            raise SamplerError(f"logits contain NaN (first at index {int(np.flatnonzero(np.isnan(logits))[0])})")
        if np.isposinf(logits).any():
            raise SamplerError(f"logits contain +inf (first at index {int(np.flatnonzero(np.isposinf(logits))[0])})")
        if np.isneginf(logits).all():
            raise SamplerError("every logit is -inf: nothing to sample")
    return logits


def copy_checked(logits: np.ndarray, dst: np.ndarray) -> float:
    """Copy a checked float32 row into dst, scanning it on the way (one C pass); returns its max.
    NaN, +inf or an all -inf row raise SamplerError."""
    m, has_nan, has_posinf = _csampling.copy_check(logits, dst)
    _refuse(logits, m, has_nan, has_posinf)
    return m


def scan_checked(logits: np.ndarray) -> tuple[float, int]:
    """(max, first position of the max) of a checked float32 row, in one C pass that writes nothing.
    NaN, +inf or an all -inf row raise SamplerError."""
    m, has_nan, has_posinf, at = _csampling.check(logits)
    _refuse(logits, m, has_nan, has_posinf)
    return m, at


def _refuse(logits: np.ndarray, m: float, has_nan: bool, has_posinf: bool) -> None:
    if has_nan:
        raise SamplerError(f"logits contain NaN (first at index {int(np.flatnonzero(np.isnan(logits))[0])})")
    if has_posinf:
        raise SamplerError(f"logits contain +inf (first at index {int(np.flatnonzero(np.isposinf(logits))[0])})")
    if m == -np.inf:
        raise SamplerError("every logit is -inf: nothing to sample")


class Stage:
    """One step of the chain: edits or narrows the candidates in place."""

    name = "stage"

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        raise NotImplementedError

    def get_state(self):
        """State carried between steps (None for stateless stages)."""
        return None

    def set_state(self, state) -> None:
        if state is not None:
            raise SamplerError(f"stage {self.name} has no state to restore")

    def __call__(self, tokens, logits, rng: SamplerRNG | None = None) -> np.ndarray:
        """Apply this stage alone to a logits row: returns a new float32 row of the same length,
        -inf where a token was removed. `tokens` is the history penalties look at."""
        row = check_logits(logits, None)
        ws = Workspace(len(row))
        np.copyto(ws.logits, row)
        cand = Candidates(ws)
        self.apply(cand, StepContext(tokens, rng or SamplerRNG(0), len(row)))
        return candidates_to_row(cand)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class Selector(Stage):
    """The last step: picks one token id from the candidates."""

    def select(self, cand: Candidates, ctx: StepContext) -> int:
        raise NotImplementedError

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        tok = self.select(cand, ctx)
        cand.keep(np.flatnonzero(cand.token_ids() == tok)[:1], is_sorted=True)


def candidates_to_row(cand: Candidates) -> np.ndarray:
    """The candidates as a full logits row (-inf for tokens not in play)."""
    if cand.full:
        return cand.logits.copy()
    out = np.full(cand.ws.n_vocab, -np.inf, dtype=np.float32)
    out[cand.ids] = cand.logits
    return out
