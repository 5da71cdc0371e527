"""KV caches behind one interface.

Every cache holds, for each of n_layer layers, K and V rows of kv_dim values for positions
[0, n_past) of one sequence, in f16 (default) or f32. They all answer the same calls:

    n_past, memory_bytes(), truncate(n), clear(),
    read(start, stop) -> (k, v)      copies, each (n_layer, stop - start, kv_dim)
    write(k, v, pos0)                put rows at positions pos0.., then n_past = pos0 + n

so state moves between any two of them with `dst.write(*src.read(0, src.n_past), 0)`.

- ContiguousKVCache: head-major (n_layer, n_head_kv, n_ctx, head_dim) arrays the C forward pass writes
  into directly; the only layout the forward reads (each KV head's rows are one contiguous stream for
  attention). read() and write() still speak rows of kv_dim = n_head_kv * head_dim.
Many sequences do not use this interface: runtime.batch.SequencePool keeps their K/V in one pool of
KV pages that the C forward reads through each sequence's block table (kv_storage / kv_zeros here make
those pages), and a PrefixKvCache stores prefixes as rows read from any cache.
"""
from __future__ import annotations

import mmap

import numpy as np

from oxillama import _core, _system
from oxillama.errors import ContextOverflowError, InsufficientMemoryError, InvalidArgumentError
from oxillama.quant import dequantize, quantize

# the dtype of the rows read() returns and write() takes; a q8_0 cache stores Q8_0 blocks and speaks float32
KV_DTYPES = {"f16": np.float16, "f32": np.float32, "q8_0": np.float32}
Q8_0_BLOCK, Q8_0_BYTES = 32, 34   # values and bytes of one Q8_0 block (d: f16, 32 x int8)


def kv_dtype(kv_type: str) -> type:
    if kv_type not in KV_DTYPES:
        raise InvalidArgumentError(f"kv_type must be one of {', '.join(KV_DTYPES)}, got {kv_type!r}")
    return KV_DTYPES[kv_type]


# share of the available memory a suggested n_ctx may take: the model's own buffers and the rest of the
# process need some too
_KV_MEMORY_SHARE = 0.8
_N_CTX_STEP = 256


def kv_memory_bytes(n_layer: int, n_ctx: int, kv_dim: int, kv_type: str = "f16", v_is_k: bool = False) -> int:
    """Bytes of K and V for n_ctx positions over n_layer layers (v_is_k: K only, latent attention's cache)."""
    copies = 1 if v_is_k else 2
    if kv_type == "q8_0":
        return copies * n_layer * n_ctx * (kv_dim // Q8_0_BLOCK) * Q8_0_BYTES
    return copies * n_layer * n_ctx * kv_dim * np.dtype(kv_dtype(kv_type)).itemsize


def check_kv_memory(n_layer: int, n_ctx: int, kv_dim: int, kv_type: str = "f16", v_is_k: bool = False) -> None:
    """Raise InsufficientMemoryError, saying how much is needed and what n_ctx would fit, when a
    KV cache of n_ctx positions cannot fit in the memory available (oxillama._system.available_memory)."""
    avail = _system.available_memory()
    if avail is not None and kv_memory_bytes(n_layer, n_ctx, kv_dim, kv_type, v_is_k) > avail:
        raise _too_big(n_layer, n_ctx, kv_dim, kv_type, avail, v_is_k)


def _too_big(n_layer: int, n_ctx: int, kv_dim: int, kv_type: str, avail: int | None,
             v_is_k: bool = False) -> InsufficientMemoryError:
    need = kv_memory_bytes(n_layer, n_ctx, kv_dim, kv_type, v_is_k)
    per_token = kv_memory_bytes(n_layer, 1, kv_dim, kv_type, v_is_k)
    msg = (f"a KV cache of n_ctx={n_ctx} positions needs {_gib(need)} ({n_layer} layers x "
           f"{'the latent' if v_is_k else 'K and V'} x {kv_dim} values x {kv_type}, {per_token / 1024:.0f} KiB per "
           f"position)")
    if avail is None:
        return InsufficientMemoryError(msg + "; the allocation failed: use a smaller n_ctx (-c)")
    fit = int(avail * _KV_MEMORY_SHARE) // per_token // _N_CTX_STEP * _N_CTX_STEP
    hint = f"n_ctx (-c) {fit} would fit" if fit >= _N_CTX_STEP else "no useful n_ctx fits"
    return InsufficientMemoryError(f"{msg}, but {_gib(avail)} of memory is available; {hint}")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def kv_zeros(shape: tuple, dtype) -> np.ndarray:
    """A zeroed KV array whose untouched pages cost no memory, in small pages: the cache is written head by
    head and page by page, so with transparent huge pages (which NumPy asks for on large arrays) each
    first write would fault in 2 MiB (measured: a server's RSS 547 MB instead of 208 MB after 8 short
    requests on SmolLM2 at n_ctx 4096, and more CPU time)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes == 0 or not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.zeros(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def kv_storage(kv_type: str, head_dim: int) -> tuple[np.dtype, int]:
    """(storage dtype, storage units per KV head row) of a cache type: the C forward's row of head_dim values."""
    kv_dtype(kv_type)
    if kv_type == "q8_0":
        if head_dim % Q8_0_BLOCK:
            raise InvalidArgumentError(f"a q8_0 KV cache needs head_dim a multiple of {Q8_0_BLOCK}, the model has "
                                       f"{head_dim}")
        return np.dtype(np.uint8), head_dim // Q8_0_BLOCK * Q8_0_BYTES
    return np.dtype(KV_DTYPES[kv_type]), head_dim


# llama-cpp-python's type_k / type_v: names or GGML type ids
_KV_TYPE_IDS = {0: "f32", 1: "f16", 8: "q8_0"}
_KV_TYPES_LATER = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "bf16": 30}


def kv_type_from(kv_type: str, type_k=None, type_v=None) -> str:
    """The cache type from kv_type or llama-cpp-python's type_k / type_v (which must agree)."""
    names = []
    for key, value in (("type_k", type_k), ("type_v", type_v)):
        if value is None:
            continue
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = _KV_TYPE_IDS.get(int(value), next((n for n, i in _KV_TYPES_LATER.items() if i == value), value))
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{key} must be a type name or GGML type id, got {value!r}")
        value = value.lower()
        if value in _KV_TYPES_LATER:
            raise InvalidArgumentError(f"{key}={value!r}: quantized KV caches are not supported yet; use "
                                       f"{' or '.join(repr(k) for k in KV_DTYPES)}")
        kv_dtype(value)
        names.append(value)
    if len(set(names)) > 1:
        raise InvalidArgumentError(f"type_k={names[0]!r} and type_v={names[1]!r} differ; the KV cache has one type")
    return names[0] if names else kv_type


class KVCache:
    """The interface every KV cache implements (see the module docstring)."""

    n_layer: int
    kv_dim: int
    kv_type: str
    n_past: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(KV_DTYPES[self.kv_type])

    v_is_k: bool = False   # latent attention (deepseek2): V is K's storage, each position stored once

    @property
    def bytes_per_token(self) -> int:
        """K and V bytes of one position over all layers."""
        return kv_memory_bytes(self.n_layer, 1, self.kv_dim, self.kv_type, self.v_is_k)

    def memory_bytes(self) -> int:
        raise NotImplementedError

    def truncate(self, n: int) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        self.truncate(0)

    def read(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def write(self, k: np.ndarray, v: np.ndarray, pos0: int = 0) -> None:
        raise NotImplementedError

    # shared argument checks

    def _range(self, start: int, stop: int | None) -> tuple[int, int]:
        stop = self.n_past if stop is None else stop
        if not 0 <= start <= stop <= self.n_past:
            raise InvalidArgumentError(f"positions [{start}, {stop}) are not within the cached [0, {self.n_past})")
        return start, stop

    def _check_rows(self, k: np.ndarray, v: np.ndarray, pos0: int) -> int:
        """Validate K/V rows for write(); their number of positions."""
        for name, a in (("k", k), ("v", v)):
            if not isinstance(a, np.ndarray) or a.ndim != 3 or a.shape[0] != self.n_layer or a.shape[2] != self.kv_dim:
                shape = getattr(a, "shape", type(a).__name__)
                raise InvalidArgumentError(f"{name} must be an array (n_layer={self.n_layer}, n, "
                                           f"kv_dim={self.kv_dim}), got {shape}")
            if a.dtype != self.dtype:
                raise InvalidArgumentError(f"{name} has dtype {a.dtype}, this cache holds {self.dtype}")
        if k.shape != v.shape:
            raise InvalidArgumentError(f"k {k.shape} and v {v.shape} differ in shape")
        if not 0 <= pos0 <= self.n_past:
            raise InvalidArgumentError(f"write at position {pos0} would leave a gap after the cached {self.n_past}")
        return k.shape[1]


class ContiguousKVCache(KVCache):
    """K and V stored head-major, (n_layer, n_head_kv, n_ctx rounded up to whole KV pages, head_dim) each, f16
    (default) or f32; positions [0, n_past) are valid. kv_dim = n_head_kv * head_dim.
    v_is_k: one array for both (a model whose every KV layer is latent attention reads its values from its K
    rows, ForwardPlan.kv_v_is_k): half the memory; read() gives the same rows as k and v, write() stores k."""

    def __init__(self, n_layer: int, n_ctx: int, kv_dim: int, kv_type: str = "f16", *, n_head_kv: int = 1,
                 v_is_k: bool = False):
        kv_dtype(kv_type)
        if n_ctx < 1:
            raise InvalidArgumentError(f"n_ctx must be >= 1, got {n_ctx}")
        if n_layer < 1 or kv_dim < 1 or n_head_kv < 1 or kv_dim % n_head_kv:
            raise InvalidArgumentError(f"need n_layer >= 1 and kv_dim a multiple of n_head_kv >= 1, got n_layer="
                                       f"{n_layer}, kv_dim={kv_dim}, n_head_kv={n_head_kv}")
        self.kv_type = kv_type
        self.n_layer, self.n_ctx, self.kv_dim = n_layer, n_ctx, kv_dim
        self.n_head_kv, self.head_dim = n_head_kv, kv_dim // n_head_kv
        dtype, width = kv_storage(kv_type, self.head_dim)
        # storage in whole pages of the C forward's paged layout, which a single sequence walks in order
        rows = -(-n_ctx // _core.KV_PAGE) * _core.KV_PAGE
        shape = (n_layer, n_head_kv, rows, width)
        self.v_is_k = bool(v_is_k)
        check_kv_memory(n_layer, n_ctx, kv_dim, kv_type, self.v_is_k)
        try:
            self.k = kv_zeros(shape, dtype)
            self.v = self.k if self.v_is_k else kv_zeros(shape, dtype)
        except (MemoryError, OSError):
            raise _too_big(n_layer, n_ctx, kv_dim, kv_type, None, self.v_is_k) from None
        self.buffers = _core.KVBuffers(self.k, self.v)
        self.n_past = 0

    @classmethod
    def like(cls, other: "ContiguousKVCache", n_ctx: int | None = None, n_layer: int | None = None):
        """An empty cache with other's layout and type (and its n_ctx / n_layer unless given)."""
        return cls(other.n_layer if n_layer is None else n_layer, other.n_ctx if n_ctx is None else n_ctx,
                   other.kv_dim, other.kv_type, n_head_kv=other.n_head_kv, v_is_k=other.v_is_k)

    def truncate(self, n: int) -> None:
        """Keep positions [0, n): later ones are overwritten by the next forward."""
        if not 0 <= n <= self.n_past:
            raise InvalidArgumentError(f"cannot truncate a cache of {self.n_past} positions to {n}")
        self.n_past = n

    def clear(self) -> None:
        self.n_past = 0

    def memory_bytes(self) -> int:
        return self.k.nbytes + (0 if self.v_is_k else self.v.nbytes)

    def _rows(self, a: np.ndarray, start: int, stop: int) -> np.ndarray:
        """(n_layer, stop - start, kv_dim) copy of positions [start, stop) of a head-major array"""
        rows = np.ascontiguousarray(a[:, :, start:stop].transpose(0, 2, 1, 3))
        if self.kv_type == "q8_0":
            return dequantize(rows.reshape(-1), "Q8_0", self.n_layer * (stop - start) * self.kv_dim).reshape(
                self.n_layer, stop - start, self.kv_dim)
        return rows.reshape(self.n_layer, stop - start, self.kv_dim)

    def _stored(self, rows: np.ndarray, n: int) -> np.ndarray:
        """(n_layer, n_head_kv, n, width) storage of rows (n_layer, n, kv_dim)"""
        if self.kv_type == "q8_0":
            rows = quantize(np.ascontiguousarray(rows), "Q8_0", reference=False)
        return rows.reshape(self.n_layer, n, self.n_head_kv, -1).transpose(0, 2, 1, 3)

    def read(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self._range(start, stop)
        k = self._rows(self.k, start, stop)
        return k, (k if self.v_is_k else self._rows(self.v, start, stop))

    def write(self, k: np.ndarray, v: np.ndarray, pos0: int = 0) -> None:
        n = self._check_rows(k, v, pos0)
        if pos0 + n > self.n_ctx:
            raise ContextOverflowError(f"{n} positions at {pos0} do not fit n_ctx={self.n_ctx}")
        self.k[:, :, pos0:pos0 + n] = self._stored(k, n)
        if not self.v_is_k:
            self.v[:, :, pos0:pos0 + n] = self._stored(v, n)
        self.n_past = pos0 + n

    def __repr__(self):
        return (f"ContiguousKVCache(n_layer={self.n_layer}, n_ctx={self.n_ctx}, kv_dim={self.kv_dim}, "
                f"kv_type={self.kv_type!r}, n_head_kv={self.n_head_kv}, v_is_k={self.v_is_k}, n_past={self.n_past})")
