"""Candidates: the tokens still in play during one sampling step, and their logits.

A step starts with the whole vocabulary in id order, held in the sampler's preallocated work
buffer (`ids is None`). Sparse stages (bias, penalties, DRY) edit that buffer in place. The
first truncating stage narrows it to a small set (`ids` an int32 array, `logits` a small float32
array), found by the C passes in `_csampling` without sorting the vocabulary; later stages then
cost microseconds. Probabilities are always those of the softmax over the current set.
"""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling

__all__ = ["Candidates", "Workspace"]

# top-p first tries this many top tokens (a language model's mass usually sits there), then the
# exact O(n) radix select
_TOP_P_FIRST_K = 256
# keep_top(exclude=): up to this many excluded ids are compared one by one (the end-of-generation bans)
_FEW_EXCLUDED = 8


class Workspace:
    """Buffers of n_vocab entries reused by every step: no vocabulary-sized allocation per token."""

    def __init__(self, n_vocab: int):
        if n_vocab < 1:
            raise SamplerError(f"n_vocab must be >= 1, got {n_vocab}")
        self.n_vocab = n_vocab
        self.logits = np.empty(n_vocab, dtype=np.float32)   # the step's (penalised) logits
        self.weights = np.empty(n_vocab, dtype=np.float32)  # exp(logit - max), scratch
        self.ids = np.empty(n_vocab, dtype=np.int32)        # top-k / filter output, scratch
        self.vals = np.empty(n_vocab, dtype=np.float32)


class Candidates:
    """The working set of one step. See the module docstring.

    ids: int32 token ids, or None while the whole vocabulary is in play (then logits is the
      workspace's n_vocab buffer, index = token id).
    logits: float32 logits of those tokens.
    is_sorted: logits are in descending order (ties: lower id first).
    """

    __slots__ = ("ids", "logits", "is_sorted", "ws", "_log_z", "_max", "_weights_ok")

    def __init__(self, ws: Workspace, ids=None, logits=None, is_sorted=False, max_logit: float | None = None):
        self.ws = ws
        self.ids = ids
        self.logits = ws.logits if logits is None else logits
        self.is_sorted = is_sorted
        self._log_z = None
        self._max = max_logit  # when the caller already knows it (Sampler.sample's copy pass)
        self._weights_ok = False  # ws.weights holds exp(logits - max) of the current full set

    # --- basic facts -----------------------------------------------------------------------
    @property
    def full(self) -> bool:
        return self.ids is None

    def __len__(self) -> int:
        return len(self.logits)

    def token_ids(self) -> np.ndarray:
        """Token id of each entry (for the full vocabulary, an arange: use sparingly)."""
        return np.arange(len(self.logits), dtype=np.int32) if self.ids is None else self.ids

    def changed(self) -> None:
        """Call after editing logits in place: drops the cached max and normaliser."""
        self._log_z = None
        self._max = None
        self._weights_ok = False

    def max(self) -> float:
        if self._max is None:
            if self.is_sorted:
                self._max = float(self.logits[0])
            elif self.full:
                self._max = _csampling.vmax(self.logits)
            else:
                self._max = float(self.logits.max())
            if self._max == -np.inf:
                raise SamplerError("every token is banned or masked (-inf): nothing to sample")
        return self._max

    def log_z(self) -> float:
        """log(sum(exp(logits))) over the set: log p_i = logit_i - log_z."""
        if self._log_z is None:
            self._log_z, _ = self._softmax_stats(entropy=False)
        return self._log_z

    def entropy(self) -> float:
        """Shannon entropy (nats) of the softmax over the set."""
        self._log_z, h = self._softmax_stats(entropy=True)
        return h

    def _softmax_stats(self, entropy: bool):
        m = self.max()
        if self.full:
            s_w, s_wx = _csampling.exp_sum(self.logits, m, 1.0, self.ws.weights)
            self._weights_ok = True
        else:
            z = self.logits.astype(np.float64) - m
            w = np.exp(z)
            s_w = float(w.sum())
            s_wx = float(np.dot(w[w > 0], z[w > 0])) if entropy else 0.0
        log_z = m + math.log(s_w)
        h = math.log(s_w) - s_wx / s_w if entropy else 0.0
        return log_z, max(h, 0.0)

    def probs(self) -> np.ndarray:
        """float64 probabilities of the entries (narrowed sets only: a vocabulary-sized array
        would be an allocation per token)."""
        if self.full:
            raise SamplerError("internal: probs() on the full vocabulary; narrow first")
        return np.exp(self.logits.astype(np.float64) - self.log_z())

    # --- narrowing -------------------------------------------------------------------------
    def keep(self, positions: np.ndarray, is_sorted: bool = False) -> None:
        """Keep only the entries at `positions` (in that order)."""
        positions = np.asarray(positions)
        if self.full:
            self.ids = positions.astype(np.int32, copy=True)
        else:
            self.ids = self.ids[positions]
        self.logits = self.logits[positions]
        self.is_sorted = is_sorted
        self.changed()

    def keep_top(self, k: int, exclude: np.ndarray | None = None) -> None:
        """Keep the k largest logits (all if k >= len), sorted descending, ties by lower id. exclude (full
        set only: sorted token ids): those are left out first, as if banned, without writing the row."""
        n = len(self.logits)
        if exclude is not None and len(exclude):
            if not self.full:
                raise SamplerError("internal: keep_top(exclude=) on a narrowed set")
            # the top k + len(exclude) hold the top k of the others, in the same order (value, then id)
            m = _csampling.top_k(self.logits, min(k + len(exclude), n), self.ws.ids, self.ws.vals)
            ids, vals = self.ws.ids[:m], self.ws.vals[:m]
            if len(exclude) <= _FEW_EXCLUDED:     # (np.isin costs ~20 us a call, more than the top-k itself)
                kept = ids != exclude[0]
                for t in exclude[1:]:
                    kept &= ids != t
            else:
                kept = ~np.isin(ids, exclude, assume_unique=True)
            self.ids, self.logits = ids[kept][:k], vals[kept][:k]
            if not len(self.ids):
                raise SamplerError("every token is banned or masked (-inf): nothing to sample")
            self.is_sorted = True
            self.changed()
            return
        if self.full and k > n // 16:
            # most of the vocabulary: one sort beats a heap this large
            self.sort()
            k = min(k, n)
            if k < n:
                self.ids, self.logits = self.ids[:k], self.logits[:k]
            return
        if self.full:
            k = min(k, n)
            m = _csampling.top_k(self.logits, k, self.ws.ids, self.ws.vals)
            if m == 0:
                raise SamplerError("every token is banned or masked (-inf): nothing to sample")
            self.ids = self.ws.ids[:m].copy()
            self.logits = self.ws.vals[:m].copy()
            self.is_sorted = True
            self.changed()
            return
        self.sort()
        if k < n:
            self.ids = self.ids[:k]
            self.logits = self.logits[:k]
            self.changed()

    def peek_top(self, k: int) -> np.ndarray:
        """The k largest logits (descending) without narrowing the set."""
        if self.full:
            m = _csampling.top_k(self.logits, min(k, len(self.logits)), self.ws.ids, self.ws.vals)
            return self.ws.vals[:m].copy()
        if self.is_sorted:
            return self.logits[:k].copy()
        return -np.sort(-self.logits)[:k]

    def sort(self) -> None:
        """Sort descending by logit (ties: lower id first). On the full vocabulary this sorts
        262k entries; stages call it only once the set is narrow, or when they must."""
        if self.is_sorted:
            return
        if self.full:
            order = np.argsort(-self.logits, kind="stable").astype(np.int32)
            order = order[: int(np.count_nonzero(self.logits > -np.inf))]  # masked tokens leave
            if not len(order):
                raise SamplerError("every token is banned or masked (-inf): nothing to sample")
            self.ids = order
            self.logits = self.logits[order]
            self.is_sorted = True
            self.changed()
            return
        order = np.lexsort((self.ids, -self.logits))
        self.ids = self.ids[order]
        self.logits = self.logits[order]
        self.is_sorted = True

    def keep_logit_ge(self, threshold: float, min_keep: int) -> None:
        """Keep entries with logit >= threshold, or the top min_keep if fewer pass."""
        if self.full:
            m = _csampling.filter_ge(self.logits, threshold, self.ws.ids)
            if m >= min_keep and m > 0:
                if m == len(self.logits):
                    return
                pos = self.ws.ids[:m]
                self.ids = pos.copy()
                self.logits = self.logits[pos]
                self.is_sorted = False
                self.changed()
            else:
                self.keep_top(min_keep)
            return
        mask = self.logits >= threshold
        count = int(mask.sum())
        if count >= max(min_keep, 1):
            if count < len(self.logits):
                self.keep(np.flatnonzero(mask), is_sorted=self.is_sorted)
        else:
            self.keep_top(min_keep)

    def keep_top_p(self, p: float, min_keep: int) -> None:
        """Keep the smallest set of most likely entries whose probability mass reaches p (the
        entry that crosses p is kept; ties at the cut go to the lower id), at least min_keep.

        On the full vocabulary: the top 256 from the C heap usually hold the mass of a
        language model's distribution; if they do not, an O(n) radix select on the weights
        (_csampling.top_p_cut) finds the exact cut. Neither sorts the vocabulary."""
        if self.full:
            log_z = self.log_z()
            n = len(self.logits)
            k = min(_TOP_P_FIRST_K, n)
            m = _csampling.top_k(self.logits, k, self.ws.ids, self.ws.vals)
            cum = np.cumsum(np.exp(self.ws.vals[:m].astype(np.float64) - log_z))
            if m < k or cum[-1] >= p:
                cut = min(int(np.searchsorted(cum, p, side="left")) + 1, m)
                cut = min(max(cut, min_keep), m)
                self.ids = self.ws.ids[:cut].copy()
                self.logits = self.ws.vals[:cut].copy()
                self.is_sorted = True
                self.changed()
                return
            if min_keep > n // 2:
                self.keep_top(min_keep)
                return
            if not self._weights_ok:
                _csampling.exp_sum(self.logits, self.max(), 1.0, self.ws.weights)
            m = _csampling.top_p_cut(self.ws.weights, p, self.ws.ids)
            if m < min_keep:
                self.keep_top(min_keep)
                return
            pos = self.ws.ids[:m]
            self.ids = pos.copy()
            self.logits = self.logits[pos]
            self.is_sorted = False
            self.changed()
            return
        self.sort()
        cum = np.cumsum(self.probs())
        # first index whose running mass reaches p; float rounding may leave the total a hair
        # under p, then everything is kept
        cut = int(np.searchsorted(cum, p, side="left")) + 1
        cut = min(max(cut, min_keep), len(self.logits))
        if cut < len(self.logits):
            self.keep(np.arange(cut), is_sorted=True)

    def remove_positions(self, positions: np.ndarray) -> None:
        """Drop entries at `positions`."""
        if self.full:
            self.logits[positions] = -np.inf
            self.changed()
            return
        keep = np.ones(len(self.logits), dtype=bool)
        keep[positions] = False
        self.keep(np.flatnonzero(keep), is_sorted=self.is_sorted)

    # --- sparse edits ----------------------------------------------------------------------
    def positions_of(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, which): positions in the set of those token_ids[which] that are in play."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        if self.full:
            return token_ids, np.arange(len(token_ids))
        order = np.argsort(self.ids, kind="stable")
        sorted_ids = self.ids[order]
        at = np.searchsorted(sorted_ids, token_ids)
        at_c = np.minimum(at, len(sorted_ids) - 1)
        hit = (at < len(sorted_ids)) & (sorted_ids[at_c] == token_ids)
        return order[at_c[hit]], np.flatnonzero(hit)

    def add_to(self, token_ids: np.ndarray, deltas: np.ndarray) -> None:
        """logit[token] += delta for each (token, delta); tokens not in play are skipped."""
        pos, which = self.positions_of(token_ids)
        if len(pos):
            self.logits[pos] += np.asarray(deltas, dtype=np.float32)[which]
            self.is_sorted = False
            self.changed()
