"""Log-probabilities of a logits row: the top N, or of given tokens (for `logprobs=N`)."""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling
from oxillama.sampling.base import check_logits

__all__ = ["top_logprobs", "token_logprobs", "log_softmax_normalizer"]


def log_softmax_normalizer(logits) -> float:
    """log(sum(exp(logits))): log p_i = logits_i - this."""
    row = check_logits(logits, None)
    m = _csampling.vmax(row)
    s_w, _ = _csampling.exp_sum(row, m, 1.0, np.empty_like(row))
    return m + math.log(s_w)


def top_logprobs(logits, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(token_ids int32, logprobs float32) of the n most likely tokens of the row, most likely
    first (ties: lower id first), log-probabilities of the full softmax. No sort of the row."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise SamplerError(f"logprobs count must be an int >= 0, got {n!r}")
    row = check_logits(logits, None)
    n = min(int(n), len(row))
    log_z = log_softmax_normalizer(row)
    ids = np.empty(n, dtype=np.int32)
    vals = np.empty(n, dtype=np.float32)
    m = _csampling.top_k(row, n, ids, vals) if n else 0
    return ids[:m], (vals[:m].astype(np.float64) - log_z).astype(np.float32)


def token_logprobs(logits, token_ids) -> np.ndarray:
    """float32 log-probabilities of the given token ids under the row's softmax."""
    row = check_logits(logits, None)
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= len(row)):
        raise SamplerError(f"token ids must be in [0, {len(row)})")
    return (row[ids].astype(np.float64) - log_softmax_normalizer(row)).astype(np.float32)
