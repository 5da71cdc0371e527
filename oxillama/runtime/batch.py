"""Many sequences over one model and one shared KV pool.

    pool = SequencePool(engine, n_seq_max=8)
    a, b = pool.add(), pool.add()
    la, lb = pool.step([(a, prompt_a, False), (b, prompt_b, False)])   # one step for both
    c = pool.fork(a)                     # shares a's cached positions

Positions are stored in pages of `page_size` tokens taken from one pool of `n_pages` as sequences
grow; a fork shares its source's pages (reference counted) and a shared, partly filled page is
copied before it is written. step() checks every item and the free pages first, so a step that
raises has changed nothing.

This implementation runs the C forward once per sequence (each sequence keeps a contiguous KV
cache the forward reads, and the page accounting is kept alongside it); the batched C forward over
a paged pool replaces it behind the same interface.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from oxillama import _core
from oxillama.errors import BatchError, ContextOverflowError, InvalidArgumentError, KVPoolExhaustedError
from oxillama.runtime.kv_cache import ContiguousKVCache

log = logging.getLogger("oxillama.batch")

PAGE_SIZE = 16


class _Slot:
    """One sequence: its contiguous cache, forward context, tokens and block table (page ids)."""

    def __init__(self, kv: ContiguousKVCache, ctx):
        self.kv, self.ctx = kv, ctx
        self.tokens: list[int] = []
        self.pages: list[int] = []


class SequencePool:
    """Up to n_seq_max sequences of up to n_ctx positions each, over one engine's model."""

    # logits of a position depend on how the forward was shaped (1 token vs many, see csrc/matmul.c):
    # the scheduler then mirrors generate()'s shapes to give the same text
    position_invariant = False

    def __init__(self, engine, n_seq_max: int = 8, *, n_ctx: int | None = None, n_pages: int | None = None):
        if isinstance(n_seq_max, bool) or not isinstance(n_seq_max, int) or n_seq_max < 1:
            raise InvalidArgumentError(f"n_seq_max must be an int >= 1, got {n_seq_max!r}")
        n_ctx = engine.n_ctx if n_ctx is None else n_ctx
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
            raise InvalidArgumentError(f"n_ctx must be an int >= 1, got {n_ctx!r}")
        self.page_size = PAGE_SIZE
        if n_pages is None:
            n_pages = -(-n_ctx // self.page_size) * n_seq_max
        if isinstance(n_pages, bool) or not isinstance(n_pages, int) or n_pages < 1:
            raise InvalidArgumentError(f"n_pages must be an int >= 1, got {n_pages!r}")
        self.engine = engine
        self.n_seq_max, self.n_ctx, self.n_pages = n_seq_max, n_ctx, n_pages
        self.n_vocab = engine.n_vocab
        self._n_batch = min(engine.n_batch, n_ctx)
        self._slots: dict[int, _Slot] = {}
        self._spare: list[_Slot] = []            # caches of removed sequences, reused by add()
        self._next_id = 0
        self._refs = [0] * n_pages
        self._free = list(range(n_pages - 1, -1, -1))
        self._tok_buf = np.zeros(self._n_batch, dtype=np.int32)

    # ---- sequences ----

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def n_seq(self) -> int:
        """Live sequences."""
        return len(self._slots)

    def add(self) -> int:
        """A new empty sequence id."""
        if len(self._slots) >= self.n_seq_max:
            raise BatchError(f"all {self.n_seq_max} sequence slots are in use (n_seq_max={self.n_seq_max})")
        if self._spare:
            slot = self._spare.pop()
        else:
            c = self.engine.config
            kv = ContiguousKVCache(c.n_layer, self.n_ctx, c.kv_dim, self.engine.kv.kv_type, n_head_kv=c.n_head_kv)
            slot = _Slot(kv, _core.ForwardContext(self.engine.plan, kv.buffers, self._n_batch,
                                                  self.engine.n_threads))
        slot.kv.clear()
        sid = self._next_id
        self._next_id += 1
        self._slots[sid] = slot
        return sid

    def remove(self, seq_id: int) -> None:
        """Free the sequence's slot and pages."""
        slot = self._slot(seq_id)
        self._release(slot.pages)
        slot.pages, slot.tokens = [], []
        del self._slots[seq_id]
        self._spare.append(slot)

    def fork(self, seq_id: int, n: int | None = None) -> int:
        """A new sequence holding the first n (default all) cached positions of seq_id, sharing their pages."""
        src = self._slot(seq_id)
        n_past = len(src.tokens)
        n = n_past if n is None else n
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= n_past:
            raise InvalidArgumentError(f"fork takes 0..{n_past} positions of sequence {seq_id}, got {n!r}")
        sid = self.add()
        dst = self._slots[sid]
        if n:
            dst.kv.write(*src.kv.read(0, n), 0)
        dst.tokens = src.tokens[:n]
        dst.pages = src.pages[:self._n_pages_for(n)]
        for p in dst.pages:
            self._refs[p] += 1
        return sid

    def n_past(self, seq_id: int) -> int:
        return len(self._slot(seq_id).tokens)

    def tokens(self, seq_id: int) -> list[int]:
        return list(self._slot(seq_id).tokens)

    def truncate(self, seq_id: int, n: int) -> None:
        """Keep the first n cached positions."""
        slot = self._slot(seq_id)
        n_past = len(slot.tokens)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= n_past:
            raise InvalidArgumentError(f"cannot truncate sequence {seq_id} of {n_past} positions to {n!r}")
        keep = self._n_pages_for(n)
        self._release(slot.pages[keep:])
        del slot.pages[keep:]
        del slot.tokens[n:]
        slot.kv.truncate(n)

    def pages_needed(self, seq_id: int, n_new: int) -> int:
        """Pages step() would take to append n_new tokens to seq_id (a shared last page is copied first)."""
        slot = self._slot(seq_id)
        if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
            raise InvalidArgumentError(f"n_new must be an int >= 0, got {n_new!r}")
        n_past = len(slot.tokens)
        need = self._n_pages_for(n_past + n_new) - len(slot.pages)
        if n_new and n_past % self.page_size and self._refs[slot.pages[-1]] > 1:
            need += 1
        return need

    # ---- the step ----

    def step(self, items: Sequence[tuple[int, Sequence[int], bool]]) -> list[np.ndarray]:
        """Append each item's tokens to its sequence in one step; per item the logits of its last
        token (n_vocab,), or of every token (n_tokens, n_vocab) when its all_logits is true."""
        checked = []
        seen = set()
        for item in items:
            try:
                seq_id, tokens, all_logits = item
            except (TypeError, ValueError):
                raise InvalidArgumentError("a step item is (seq_id, tokens, all_logits), got "
                                           f"{item!r}") from None
            slot = self._slot(seq_id)
            if seq_id in seen:
                raise InvalidArgumentError(f"sequence {seq_id} appears twice in one step")
            seen.add(seq_id)
            arr = self.engine._check_tokens(tokens)
            if arr.size == 0:
                raise InvalidArgumentError(f"step item for sequence {seq_id} has no tokens")
            if len(slot.tokens) + arr.size > self.n_ctx:
                raise ContextOverflowError(f"sequence {seq_id}: {len(slot.tokens)} cached + {arr.size} new tokens "
                                           f"exceed n_ctx={self.n_ctx}")
            checked.append((seq_id, slot, arr, bool(all_logits)))
        need = sum(self.pages_needed(seq_id, arr.size) for seq_id, _, arr, _ in checked)
        if need > len(self._free):
            raise KVPoolExhaustedError(f"the step needs {need} KV pages, {len(self._free)} of {self.n_pages} "
                                       "are free")
        out = []
        for _, slot, arr, all_logits in checked:
            self._take_pages(slot, arr.size)
            out.append(self._run(slot, arr, all_logits))
        return out

    def _run(self, slot: _Slot, tokens: np.ndarray, all_logits: bool) -> np.ndarray:
        """Run tokens after the slot's cached ones, in chunks of n_batch, as InferenceEngine._run does."""
        n = tokens.size
        logits = np.empty((n, self.n_vocab) if all_logits else self.n_vocab, dtype=np.float32)
        for start in range(0, n, self._n_batch):
            chunk = tokens[start:start + self._n_batch]
            m = chunk.size
            buf = self._tok_buf[:m]
            buf[:] = chunk
            if all_logits:
                slot.ctx.run(buf, len(slot.tokens), logits[start:start + m].reshape(-1), True)
            else:
                slot.ctx.run(buf, len(slot.tokens), logits if start + m == n else None, False)
            slot.tokens.extend(chunk.tolist())
            slot.kv.n_past = len(slot.tokens)
        return logits

    # ---- pages ----

    def _n_pages_for(self, n: int) -> int:
        return -(-n // self.page_size)

    def _take_pages(self, slot: _Slot, n_new: int) -> None:
        n_past = len(slot.tokens)
        if n_past % self.page_size and self._refs[slot.pages[-1]] > 1:    # copy on write
            self._release([slot.pages.pop()])
            slot.pages.append(self._alloc())
        while len(slot.pages) < self._n_pages_for(n_past + n_new):
            slot.pages.append(self._alloc())

    def _alloc(self) -> int:
        p = self._free.pop()
        self._refs[p] = 1
        return p

    def _release(self, pages) -> None:
        for p in pages:
            self._refs[p] -= 1
            if self._refs[p] == 0:
                self._free.append(p)

    def _slot(self, seq_id) -> _Slot:
        slot = self._slots.get(seq_id) if isinstance(seq_id, int) and not isinstance(seq_id, bool) else None
        if slot is None:
            raise InvalidArgumentError(f"no live sequence {seq_id!r} in this pool")
        return slot

    def __repr__(self):
        return (f"SequencePool(n_seq_max={self.n_seq_max}, n_ctx={self.n_ctx}, n_seq={self.n_seq}, "
                f"free_pages={self.free_pages}/{self.n_pages})")
