"""KV caches. The contiguous cache keeps, per layer, K and V for positions 0..n_ctx-1 in two
numpy arrays that the C forward pass writes into directly."""
from __future__ import annotations

import numpy as np

from oxillama import _core
from oxillama.errors import InvalidArgumentError

KV_DTYPES = {"f16": np.float16, "f32": np.float32}


class ContiguousKVCache:
    """K and V of shape (n_layer, n_ctx, kv_dim), f16 (default) or f32; positions [0, n_past) are valid."""

    def __init__(self, n_layer: int, n_ctx: int, kv_dim: int, kv_type: str = "f16"):
        if kv_type not in KV_DTYPES:
            raise InvalidArgumentError(f"kv_type must be one of {', '.join(KV_DTYPES)}, got {kv_type!r}")
        if n_ctx < 1:
            raise InvalidArgumentError(f"n_ctx must be >= 1, got {n_ctx}")
        self.kv_type = kv_type
        self.n_layer, self.n_ctx, self.kv_dim = n_layer, n_ctx, kv_dim
        dtype = KV_DTYPES[kv_type]
        self.k = np.zeros((n_layer, n_ctx, kv_dim), dtype=dtype)
        self.v = np.zeros((n_layer, n_ctx, kv_dim), dtype=dtype)
        self.buffers = _core.KVBuffers(self.k, self.v)
        self.n_past = 0

    def truncate(self, n: int) -> None:
        """Keep positions [0, n): later ones are overwritten by the next forward."""
        if not 0 <= n <= self.n_past:
            raise InvalidArgumentError(f"cannot truncate a cache of {self.n_past} positions to {n}")
        self.n_past = n

    def clear(self) -> None:
        self.n_past = 0

    def memory_bytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
