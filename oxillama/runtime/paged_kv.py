"""Paged KV storage for many sequences: a PagePool of fixed-size pages and, per sequence, a
PagedKVCache whose block table lists the pages holding its positions.

Position p of a sequence lives in page block_table[p // page_size], row p % page_size. Pages are
allocated when a sequence first needs them, handed back to the pool by truncate()+shrink_to_fit()
or release(), and may be shared by several sequences (fork(): a common prefix is stored once;
a shared page is copied before it is written, so forks never see each other's rows).

The C forward pass reads only the contiguous layout, so an engine switching to a sequence copies
it in once (`seq.gather_into(engine.kv)`) and copies the new positions back once
(`seq.scatter_from(engine.kv)`), never per token.
"""
from __future__ import annotations

import logging

import numpy as np

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.kv_cache import KVCache, kv_dtype

log = logging.getLogger("oxillama.kv")

PAGE_SIZE = 16


class PagePool:
    """Pages of K and V, each (n_layer, page_size, kv_dim), allocated on demand up to max_pages.

    Pages are reference counted: alloc() gives a page with count 1, retain() adds a holder,
    free() drops one and returns the page to the free list at zero. Freed pages keep their memory
    for reuse until shrink_to_fit() gives it back.
    """

    def __init__(self, n_layer: int, kv_dim: int, kv_type: str = "f16", *, page_size: int = PAGE_SIZE,
                 max_pages: int | None = None):
        self.dtype = np.dtype(kv_dtype(kv_type))
        if n_layer < 1 or kv_dim < 1:
            raise InvalidArgumentError(f"n_layer and kv_dim must be >= 1, got {n_layer}, {kv_dim}")
        if page_size < 1:
            raise InvalidArgumentError(f"page_size must be >= 1, got {page_size}")
        if max_pages is not None and max_pages < 1:
            raise InvalidArgumentError(f"max_pages must be >= 1 or None, got {max_pages}")
        self.n_layer, self.kv_dim, self.kv_type = n_layer, kv_dim, kv_type
        self.page_size, self.max_pages = page_size, max_pages
        self._k: list[np.ndarray | None] = []    # by page id; None: id free and its memory released
        self._v: list[np.ndarray | None] = []
        self._refs: list[int] = []
        self._free: list[int] = []               # ids with refcount 0 (memory kept or released)

    @classmethod
    def for_cache(cls, cache: KVCache, **kwargs) -> "PagePool":
        """A pool whose pages fit `cache` (same n_layer, kv_dim, kv_type)."""
        return cls(cache.n_layer, cache.kv_dim, cache.kv_type, **kwargs)

    @property
    def page_bytes(self) -> int:
        return 2 * self.n_layer * self.page_size * self.kv_dim * self.dtype.itemsize

    @property
    def n_pages(self) -> int:
        """Pages whose memory is allocated (in use or free for reuse)."""
        return sum(k is not None for k in self._k)

    @property
    def n_in_use(self) -> int:
        return sum(r > 0 for r in self._refs)

    @property
    def n_free(self) -> int:
        """Pages given back and waiting for reuse (their memory kept unless shrink_to_fit() ran)."""
        return len(self._free)

    def memory_bytes(self) -> int:
        return self.n_pages * self.page_bytes

    def alloc(self) -> int:
        """A page id with refcount 1 (contents undefined)."""
        if self._free:
            pid = self._free.pop()
            if self._k[pid] is None:
                self._k[pid], self._v[pid] = self._new_page()
        else:
            if self.max_pages is not None and len(self._k) >= self.max_pages:
                raise ContextOverflowError(f"KV page pool exhausted: all {self.max_pages} pages of "
                                           f"{self.page_size} tokens are in use")
            pid = len(self._k)
            k, v = self._new_page()
            self._k.append(k)
            self._v.append(v)
            self._refs.append(0)
        self._refs[pid] = 1
        return pid

    def _new_page(self) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.n_layer, self.page_size, self.kv_dim)
        return np.empty(shape, self.dtype), np.empty(shape, self.dtype)

    def retain(self, pid: int) -> None:
        self._check_live(pid)
        self._refs[pid] += 1

    def free(self, pid: int) -> None:
        self._check_live(pid)
        self._refs[pid] -= 1
        if self._refs[pid] == 0:
            self._free.append(pid)

    def refcount(self, pid: int) -> int:
        return self._refs[pid]

    def _check_live(self, pid: int) -> None:
        if not 0 <= pid < len(self._refs) or self._refs[pid] <= 0:
            raise InvalidArgumentError(f"page {pid} is not allocated")

    def page(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """The K and V arrays of a live page, (n_layer, page_size, kv_dim) each (views, not copies)."""
        self._check_live(pid)
        return self._k[pid], self._v[pid]

    def shrink_to_fit(self) -> int:
        """Release the memory of every free page; the number of bytes given back."""
        released = 0
        for pid in self._free:
            if self._k[pid] is not None:
                self._k[pid] = self._v[pid] = None
                released += self.page_bytes
        # trailing free ids can go entirely, so the id lists do not grow forever
        while self._refs and self._refs[-1] == 0 and self._k[-1] is None:
            self._k.pop()
            self._v.pop()
            self._refs.pop()
        self._free = [pid for pid in self._free if pid < len(self._refs)]
        if released:
            log.debug("page pool released %.1f MB", released / 1e6)
        return released

    def new_sequence(self) -> "PagedKVCache":
        return PagedKVCache(self)

    def __repr__(self):
        return (f"PagePool(n_layer={self.n_layer}, kv_dim={self.kv_dim}, kv_type={self.kv_type!r}, "
                f"page_size={self.page_size}, pages={self.n_pages}, in_use={self.n_in_use})")


class PagedKVCache(KVCache):
    """One sequence's positions [0, n_past) in pages of a PagePool, listed by `block_table`."""

    def __init__(self, pool: PagePool):
        self.pool = pool
        self.n_layer, self.kv_dim, self.kv_type = pool.n_layer, pool.kv_dim, pool.kv_type
        self.block_table: list[int] = []
        self.n_past = 0

    @property
    def page_size(self) -> int:
        return self.pool.page_size

    def memory_bytes(self) -> int:
        """Bytes of the pages this sequence holds (a page shared with forks is counted by each)."""
        return len(self.block_table) * self.pool.page_bytes

    def truncate(self, n: int) -> None:
        """Keep positions [0, n); pages past them stay reserved until shrink_to_fit()."""
        if not 0 <= n <= self.n_past:
            raise InvalidArgumentError(f"cannot truncate a cache of {self.n_past} positions to {n}")
        self.n_past = n

    def shrink_to_fit(self) -> None:
        """Return the pages past n_past to the pool."""
        keep = -(-self.n_past // self.page_size)
        for pid in self.block_table[keep:]:
            self.pool.free(pid)
        del self.block_table[keep:]

    def release(self) -> None:
        """Give every page back; the sequence is empty afterwards."""
        self.n_past = 0
        self.shrink_to_fit()

    def fork(self) -> "PagedKVCache":
        """A new sequence with the same positions, sharing this one's pages until either writes."""
        other = PagedKVCache(self.pool)
        self.shrink_to_fit()
        for pid in self.block_table:
            self.pool.retain(pid)
        other.block_table = list(self.block_table)
        other.n_past = self.n_past
        return other

    def read(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self._range(start, stop)
        shape = (self.n_layer, stop - start, self.kv_dim)
        k, v = np.empty(shape, self.pool.dtype), np.empty(shape, self.pool.dtype)
        for dst, src_lo, src_hi, pk, pv in self._spans(start, stop):
            k[:, dst:dst + src_hi - src_lo] = pk[:, src_lo:src_hi]
            v[:, dst:dst + src_hi - src_lo] = pv[:, src_lo:src_hi]
        return k, v

    def write(self, k: np.ndarray, v: np.ndarray, pos0: int = 0) -> None:
        n = self._check_rows(k, v, pos0)
        stop = pos0 + n
        self._reserve(stop)
        self.n_past = pos0   # the rows past pos0 are being replaced
        for pos in range(pos0 - pos0 % self.page_size, stop, self.page_size):
            self._own(pos // self.page_size)
        for dst, lo, hi, pk, pv in self._spans(pos0, stop):
            pk[:, lo:hi] = k[:, dst:dst + hi - lo]
            pv[:, lo:hi] = v[:, dst:dst + hi - lo]
        self.n_past = stop

    def _reserve(self, n_positions: int) -> None:
        """Allocate pages until the table covers n_positions (all or nothing on pool exhaustion)."""
        need = -(-n_positions // self.page_size) - len(self.block_table)
        got = []
        try:
            for _ in range(need):
                got.append(self.pool.alloc())
        except ContextOverflowError:
            for pid in got:
                self.pool.free(pid)
            raise
        self.block_table.extend(got)

    def _own(self, i: int) -> None:
        """Copy-on-write: make page i of the table private to this sequence before writing it."""
        pid = self.block_table[i]
        if self.pool.refcount(pid) > 1:
            new = self.pool.alloc()
            nk, nv = self.pool.page(new)
            ok, ov = self.pool.page(pid)
            nk[...] = ok
            nv[...] = ov
            self.pool.free(pid)
            self.block_table[i] = new

    def _spans(self, start: int, stop: int):
        """(offset in the [start, stop) rows, row lo, row hi, page K, page V) per page touched."""
        ps = self.page_size
        pos = start
        while pos < stop:
            i, lo = divmod(pos, ps)
            hi = min(ps, lo + stop - pos)
            pk, pv = self.pool.page(self.block_table[i])
            yield pos - start, lo, hi, pk, pv
            pos += hi - lo

    # ---- moving a sequence in and out of an engine's contiguous cache ----

    def gather_into(self, cache: KVCache) -> None:
        """Make `cache` hold exactly this sequence's positions (one copy, before decoding it)."""
        self._check_compatible(cache)
        cache.truncate(0)
        if self.n_past:
            cache.write(*self.read(0, self.n_past), 0)

    def scatter_from(self, cache: KVCache, start: int | None = None) -> None:
        """Copy cache positions [start, cache.n_past) into this sequence (start defaults to the
        positions this sequence already holds, so only what the engine added is copied)."""
        self._check_compatible(cache)
        start = min(self.n_past, cache.n_past) if start is None else start
        if not 0 <= start <= min(self.n_past, cache.n_past):
            raise InvalidArgumentError(f"scatter start {start} must be within both caches' positions")
        self.truncate(start)
        if cache.n_past > start:
            self.write(*cache.read(start, cache.n_past), start)

    def _check_compatible(self, cache: KVCache) -> None:
        if (cache.n_layer, cache.kv_dim, cache.kv_type) != (self.n_layer, self.kv_dim, self.kv_type):
            raise InvalidArgumentError(f"cache ({cache.n_layer} layers, kv_dim {cache.kv_dim}, {cache.kv_type}) does "
                                       f"not match the pool ({self.n_layer}, {self.kv_dim}, {self.kv_type})")

    def __repr__(self):
        return f"PagedKVCache(n_past={self.n_past}, pages={len(self.block_table)})"
