"""Many sequences over one model: a pool of KV pages that the C forward reads through each sequence's block
table, and one forward per step for all of them.

    pool = SequencePool(engine, n_seq_max=8)
    a, b = pool.add(), pool.add()
    la, lb = pool.step([(a, prompt_a, False), (b, prompt_b, False)])   # last-token logits of each
    c = pool.fork(a)                                                    # shares a's pages, copy-on-write

Pages hold OXL_KV_PAGE (`_core.KV_PAGE`) positions of every layer and KV head. A sequence takes pages as it
grows; pages are reference counted, so a fork shares its parent's prefix and copies a shared page only
when it writes into it. A pool smaller than n_ctx * n_seq_max works: step() refuses a step the free pages
cannot hold (KVPoolExhaustedError, nothing changed) and the caller frees or preempts a sequence.

A model with recurrent layers (Mamba-2, ...) also gives each sequence one slot of a recurrent-state pool
(runtime/recurrent_state.py) for as long as it lives: a sequence holds KV pages for its attention layers and a
state slot for its recurrent ones. A fork copies the parent's state; since a state cannot be truncated, a
recurrent sequence forks or truncates only at its end or at 0 (`resumable` says where).

The logits of a position depend only on the tokens up to it, bit for bit: alone or beside other sequences,
prefilled in one chunk or many, decoded one token at a time, with 1 or 2 threads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from oxillama import _core
from oxillama.lora import bound, check_loras
from oxillama.errors import BatchError, ContextOverflowError, InvalidArgumentError, KVPoolExhaustedError
from oxillama.runtime.kv_cache import check_kv_memory, kv_storage, kv_zeros
from oxillama.runtime.recurrent_state import RecurrentStatePool

log = logging.getLogger("oxillama.batch")


@dataclass
class _Sequence:
    pages: np.ndarray                      # block table (int32, capacity pages_per_seq); valid: n_blocks
    n_blocks: int = 0
    tokens: list[int] = field(default_factory=list)
    loras: list = field(default_factory=list)     # [(LoraAdapter, scale)] applied to its rows
    slot: int = 0                          # its recurrent-state slot (models with recurrent layers)


class SequencePool:
    """Up to n_seq_max sequences sharing one KV pool of n_pages pages over the engine's model (its plan,
    tokenizer, threads and KV type; the engine's own session is untouched)."""

    def __init__(self, engine, n_seq_max: int = 8, *, n_ctx: int | None = None, n_pages: int | None = None,
                 n_batch: int | None = None):
        for name, value in (("n_seq_max", n_seq_max), ("n_ctx", n_ctx), ("n_pages", n_pages), ("n_batch", n_batch)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        c = engine.config
        self.engine = engine
        self.page_size = _core.KV_PAGE
        self.n_seq_max = int(n_seq_max)
        self.n_ctx = int(engine.n_ctx if n_ctx is None else n_ctx)
        self.pages_per_seq = -(-self.n_ctx // self.page_size)
        self.n_pages = int(self.pages_per_seq * self.n_seq_max if n_pages is None else n_pages)
        self.n_batch = int(max(engine.n_batch, self.n_seq_max) if n_batch is None else n_batch)
        self.n_vocab = c.n_vocab
        dtype, width = kv_storage(engine.kv.kv_type, c.kv_dim // c.n_head_kv)
        n_kv_layer = engine.plan.n_kv_layer   # the attention layers (recurrent ones hold a state slot instead)
        shape = (n_kv_layer, c.n_head_kv, self.n_pages * self.page_size, width)
        self.v_is_k = engine.plan.kv_v_is_k   # latent attention: V is K's pages
        check_kv_memory(n_kv_layer, self.n_pages * self.page_size, c.kv_dim, engine.kv.kv_type, self.v_is_k)
        self.k = kv_zeros(shape, dtype)      # untouched pages cost no memory until written
        self.v = self.k if self.v_is_k else kv_zeros(shape, dtype)
        self.buffers = _core.KVBuffers(self.k, self.v)
        self.recurrent = RecurrentStatePool(engine.plan, self.n_seq_max) if engine.plan.state_floats else None
        self._ctx = _core.ForwardContext(engine.plan, self.buffers, self.n_batch, engine.n_threads, self.n_ctx,
                                         self.recurrent.buffers if self.recurrent else None)
        self._refs = np.zeros(self.n_pages, dtype=np.int32)
        self._free = list(range(self.n_pages - 1, -1, -1))   # pop() takes the lowest id first
        self._seqs: dict[int, _Sequence] = {}
        self._next_id = 0
        log.info("sequence pool: %d sequences, %d pages of %d positions (%.1f MB of K/V)", self.n_seq_max,
                 self.n_pages, self.page_size, self.memory_bytes() / 1e6)

    # ---- sequences ----

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def n_seq(self) -> int:
        """Live sequences."""
        return len(self._seqs)

    def memory_bytes(self) -> int:
        return self.k.nbytes + (0 if self.v_is_k else self.v.nbytes) + (self.recurrent.memory_bytes() if self.recurrent
                                                                        else 0)

    @property
    def free_state_slots(self) -> int | None:
        """Recurrent-state slots free (None: the model has no recurrent layers)."""
        return self.recurrent.n_free if self.recurrent is not None else None

    def add(self) -> int:
        """A new empty sequence's id."""
        if len(self._seqs) >= self.n_seq_max:
            raise BatchError(f"all {self.n_seq_max} sequence slots are in use (n_seq_max={self.n_seq_max})")
        sid = self._next_id
        self._next_id += 1
        s = _Sequence(np.zeros(self.pages_per_seq, dtype=np.int32))
        if self.recurrent is not None:
            s.slot = self.recurrent.alloc()
        self._seqs[sid] = s
        return sid

    def adopt(self, cache, tokens, state=None) -> int:
        """A new sequence holding a copy of the first len(tokens) positions of a ContiguousKVCache (an engine's
        session, say) whose tokens they are: no forward runs. state: a recurrent model's state after exactly
        those tokens (an engine's `recurrent.read(0)`)."""
        n = len(tokens)
        if not 0 < n <= min(cache.n_past, self.n_ctx):
            raise InvalidArgumentError(f"cannot adopt {n} positions of a cache holding {cache.n_past}")
        if self.recurrent is not None and state is None:
            raise InvalidArgumentError("adopting a sequence of a recurrent model needs its state after the tokens")
        if (cache.k.dtype, cache.k.shape[:2], cache.k.shape[3]) != (self.k.dtype, self.k.shape[:2], self.k.shape[3]):
            raise InvalidArgumentError("the cache's layout or type differs from the pool's")
        nb = -(-n // self.page_size)
        if nb > len(self._free):
            raise KVPoolExhaustedError(f"adopting {n} positions needs {nb} KV pages, {len(self._free)} are free")
        sid = self.add()
        s = self._seqs[sid]
        if self.recurrent is not None:
            self.recurrent.write(s.slot, state)
        P = self.page_size
        for b in range(nb):
            pid = self._take()
            self.k[:, :, pid * P:(pid + 1) * P] = cache.k[:, :, b * P:(b + 1) * P]
            self.v[:, :, pid * P:(pid + 1) * P] = cache.v[:, :, b * P:(b + 1) * P]
            s.pages[b] = pid
        s.n_blocks = nb
        s.tokens = [int(t) for t in tokens]
        return sid

    def _seq(self, seq_id) -> _Sequence:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise InvalidArgumentError(f"no live sequence with id {seq_id!r}") from None

    def remove(self, seq_id: int) -> None:
        """Free the sequence's slot and its pages."""
        s = self._seq(seq_id)
        self._release(s, 0)
        if self.recurrent is not None:
            self.recurrent.free(s.slot)
        del self._seqs[seq_id]

    def state(self, seq_id: int) -> np.ndarray:
        """A copy of a recurrent model's state of seq_id (after its cached positions)."""
        return self.recurrent.read(self._seq(seq_id).slot)

    def set_state(self, seq_id: int, state: np.ndarray) -> None:
        """Restore a recurrent model's state of seq_id (the caller makes its cached positions those the state
        was taken after)."""
        self.recurrent.write(self._seq(seq_id).slot, state)

    def resumable(self, seq_id: int, n: int) -> int:
        """The most positions <= n of seq_id that fork() and truncate() can keep: n for a KV-only model; for
        a recurrent one, all of them (n >= its length) or none (its state is known only at its end)."""
        s = self._seq(seq_id)
        if self.recurrent is None:
            return n
        return len(s.tokens) if n >= len(s.tokens) else 0

    def fork(self, seq_id: int, n: int | None = None) -> int:
        """A new sequence holding the first n (default all) cached positions of seq_id, sharing its pages."""
        parent = self._seq(seq_id)
        n = len(parent.tokens) if n is None else n
        if not 0 <= n <= len(parent.tokens):
            raise InvalidArgumentError(f"fork of {n} positions: sequence {seq_id} has {len(parent.tokens)}")
        if self.resumable(seq_id, n) != n:
            raise InvalidArgumentError(f"fork of {n} positions of sequence {seq_id}: a recurrent state is known only "
                                       f"at the sequence's end ({len(parent.tokens)}) or 0")
        child_id = self.add()
        child = self._seqs[child_id]
        if self.recurrent is not None and n:
            self.recurrent.copy(parent.slot, child.slot)
        nb = -(-n // self.page_size)
        child.pages[:nb] = parent.pages[:nb]
        child.n_blocks = nb
        self._refs[parent.pages[:nb]] += 1
        child.tokens = parent.tokens[:n]
        child.loras = list(parent.loras)   # its cached positions were computed with them
        return child_id

    def rows(self, seq_id: int, tokens) -> "SequenceRows":
        """The sequence's K/V as rows (the KVCache read/write/truncate interface), for a PrefixKvCache to
        copy out of and back into; tokens: the ids of the positions rows may be written at."""
        self._seq(seq_id)
        return SequenceRows(self, seq_id, tokens)

    def _slots(self, s: _Sequence, start: int, stop: int) -> np.ndarray:
        """Pool row of each of s's positions [start, stop)."""
        pos = np.arange(start, stop)
        return s.pages[pos // self.page_size].astype(np.int64) * self.page_size + pos % self.page_size

    def set_loras(self, seq_id: int, loras) -> None:
        """The LoRA adapters ([(LoraAdapter, scale)] or adapters) applied to the sequence's next tokens;
        sequences with different adapters (or none) run in the same step."""
        s = self._seq(seq_id)
        loras = check_loras(loras)
        for adapter, _ in loras:
            adapter.bind(self.engine)
        s.loras = loras

    def n_past(self, seq_id: int) -> int:
        return len(self._seq(seq_id).tokens)

    def tokens(self, seq_id: int) -> list[int]:
        return list(self._seq(seq_id).tokens)

    def truncate(self, seq_id: int, n: int) -> None:
        """Keep the first n cached positions (pages past them go back to the pool)."""
        s = self._seq(seq_id)
        if not 0 <= n <= len(s.tokens):
            raise InvalidArgumentError(f"cannot truncate sequence {seq_id} of {len(s.tokens)} positions to {n}")
        if self.resumable(seq_id, n) != n:
            raise InvalidArgumentError(f"cannot truncate sequence {seq_id} to {n}: a recurrent state cannot go back "
                                       f"(only to 0)")
        self._release(s, -(-n // self.page_size))
        del s.tokens[n:]

    def _release(self, s: _Sequence, keep_blocks: int) -> None:
        for pid in s.pages[keep_blocks:s.n_blocks]:
            self._refs[pid] -= 1
            if self._refs[pid] == 0:
                self._free.append(int(pid))
        s.n_blocks = min(s.n_blocks, keep_blocks)

    def _page_work(self, s: _Sequence, n_new: int) -> tuple[int, list[int]]:
        """(new pages to take, blocks whose shared page must be copied) for appending n_new positions."""
        n0 = len(s.tokens)
        first, last = n0 // self.page_size, -(-(n0 + n_new) // self.page_size)
        shared = [b for b in range(first, min(last, s.n_blocks)) if self._refs[s.pages[b]] > 1]
        return max(0, last - s.n_blocks), shared

    def pages_needed(self, seq_id: int, n_new: int) -> int:
        """Pages step() would take from the pool to append n_new tokens to seq_id."""
        fresh, shared = self._page_work(self._seq(seq_id), n_new)
        return fresh + len(shared)

    def _take(self) -> int:
        pid = self._free.pop()
        self._refs[pid] = 1
        return pid

    def _prepare(self, s: _Sequence, n_new: int) -> None:
        """Pages for the next n_new positions: shared ones copied (copy-on-write), new ones taken."""
        fresh, shared = self._page_work(s, n_new)
        P = self.page_size
        for b in shared:
            old, new = int(s.pages[b]), self._take()
            self.k[:, :, new * P:(new + 1) * P] = self.k[:, :, old * P:(old + 1) * P]
            self.v[:, :, new * P:(new + 1) * P] = self.v[:, :, old * P:(old + 1) * P]
            self._refs[old] -= 1
            s.pages[b] = new
        for _ in range(fresh):
            s.pages[s.n_blocks] = self._take()
            s.n_blocks += 1

    # ---- the step ----

    def step(self, items: Sequence[tuple[int, Sequence[int], bool]]) -> list[np.ndarray]:
        """Append each item's tokens to its sequence, all in one forward (or as few as n_batch allows); per
        item the logits of its last token (n_vocab,), or of every token (n, n_vocab) when its flag is set.
        The arrays are the caller's (views of one block per step)."""
        batch = []
        seen = set()
        pages = 0
        for item in items:
            try:
                seq_id, toks, all_logits = item
            except (TypeError, ValueError):
                raise InvalidArgumentError("step() takes (seq_id, tokens, all_logits) items") from None
            s = self._seq(seq_id)
            if seq_id in seen:
                raise InvalidArgumentError(f"sequence {seq_id} appears twice in one step")
            seen.add(seq_id)
            arr = np.asarray(toks)
            if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
                raise InvalidArgumentError(f"sequence {seq_id}: tokens must be a non-empty 1-D sequence of ints")
            arr = self.engine.check_tokens(arr)     # ids within the vocabulary
            if len(s.tokens) + arr.size > self.n_ctx:
                raise ContextOverflowError(f"sequence {seq_id}: {len(s.tokens)} cached + {arr.size} new tokens "
                                           f"exceed n_ctx={self.n_ctx}")
            pages += self.pages_needed(seq_id, arr.size)
            batch.append((s, arr.astype(np.int32, copy=False), bool(all_logits)))
        if not batch:
            return []
        if pages > len(self._free):
            raise KVPoolExhaustedError(f"the step needs {pages} KV pages, {len(self._free)} are free")
        n_out = sum(a.size if al else 1 for _, a, al in batch)
        # the caller's: one block per step (glibc serves a same-sized block again from its heap, so no page
        # is faulted in per step)
        out = np.empty((n_out, self.n_vocab), dtype=np.float32)
        for s, arr, _ in batch:
            self._prepare(s, arr.size)
        self._run(batch, out)
        results, row = [], 0
        for s, arr, all_logits in batch:
            s.tokens.extend(arr.tolist())
            k = arr.size if all_logits else 1
            results.append(out[row:row + k] if all_logits else out[row])
            row += k
        self.engine.n_tokens_run += sum(a.size for _, a, _ in batch)
        return results

    def _run(self, batch, out: np.ndarray) -> None:
        """Forwards of at most n_batch tokens each (one, when the step fits): a sequence longer than that is
        cut into chunks, of which only the last gives logits unless all are wanted (the logits do not depend
        on the cut)."""
        pieces, row = [], 0   # (chunk, pos0, sequence, all_logits, first row in out or None: not wanted)
        for s, arr, all_logits in batch:
            for start in range(0, arr.size, self.n_batch):
                chunk = arr[start:start + self.n_batch]
                wanted = all_logits or start + chunk.size == arr.size
                pieces.append((chunk, len(s.tokens) + start, s, all_logits, row if wanted else None))
                row += chunk.size if all_logits else int(wanted)
        call, size = [], 0
        for piece in pieces:
            if size + piece[0].size > self.n_batch:
                self._forward(call, out)
                call, size = [], 0
            call.append(piece)
            size += piece[0].size
        self._forward(call, out)

    def _forward(self, call, out: np.ndarray) -> None:
        """One C forward of the pieces; their logits rows (the last row of a piece without all_logits) go to
        out, directly when every piece is wanted (then their rows are consecutive there)."""
        n_rows = sum(chunk.size if all_logits else 1 for chunk, _, _, all_logits, _ in call)
        direct = all(at is not None for *_, at in call)
        dest = out[call[0][4]:call[0][4] + n_rows] if direct else np.empty((n_rows, self.n_vocab), np.float32)
        self._ctx.run_batch([c[0] for c in call], [c[1] for c in call], [c[2].pages for c in call],
                            [c[3] for c in call], dest.reshape(-1),
                            [bound(self.engine, c[2].loras) if c[2].loras else None for c in call],
                            [c[2].slot for c in call] if self.recurrent is not None else None)
        if not direct:
            r = 0
            for chunk, _, _, all_logits, at in call:
                k = chunk.size if all_logits else 1
                if at is not None:
                    out[at:at + k] = dest[r:r + k]
                r += k

    def __repr__(self):
        return (f"SequencePool(n_seq_max={self.n_seq_max}, n_ctx={self.n_ctx}, n_pages={self.n_pages}, "
                f"free_pages={self.free_pages}, live={len(self._seqs)})")


def _slot_runs(slots: np.ndarray) -> list[tuple[int, int, int]]:
    """(first position, first pool row, length) of each run of consecutive pool rows in slots (a page's
    rows are consecutive): a block copy per run, where indexing by every row copied value by value (a
    1.7B model's 700 finished positions: ~120 ms against ~30)."""
    if slots.size == 0:
        return []
    cut = np.flatnonzero(np.diff(slots) != 1) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [slots.size]))
    return [(int(i), int(slots[i]), int(j - i)) for i, j in zip(starts, ends)]


class SequenceRows:
    """One pool sequence seen as a KVCache of rows (n_layer, n, kv_dim) for PrefixKvCache.

    The rows are the pool's stored bytes (f16/f32 values, or q8_0 blocks as uint8, kv_dim then being
    the bytes of a position's K in one layer), so a copy out and back is exact: a restored position
    gives the same logits, bit for bit, as the forward that computed it."""

    def __init__(self, pool: SequencePool, seq_id: int, tokens):
        self.pool, self.seq_id = pool, seq_id
        self.tokens = [int(t) for t in tokens]
        self.n_layer, n_head_kv, _, width = pool.k.shape
        self.kv_dim = n_head_kv * width
        self.dtype = pool.k.dtype

    @property
    def n_past(self) -> int:
        return self.pool.n_past(self.seq_id)

    def truncate(self, n: int) -> None:
        self.pool.truncate(self.seq_id, n)

    def read(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        s = self.pool._seq(self.seq_id)
        stop = len(s.tokens) if stop is None else stop
        if not 0 <= start <= stop <= len(s.tokens):
            raise InvalidArgumentError(f"positions [{start}, {stop}) are not within the cached [0, {len(s.tokens)})")
        runs = _slot_runs(self.pool._slots(s, start, stop))
        n = stop - start

        def rows(a):        # (n_layer, n_head_kv, rows, width) -> (n_layer, n, n_head_kv, width)
            out = np.empty((a.shape[0], n, a.shape[1], a.shape[3]), a.dtype)
            for i, slot, m in runs:
                out[:, i:i + m] = a[:, :, slot:slot + m].transpose(0, 2, 1, 3)
            return out.reshape(self.n_layer, n, self.kv_dim)
        k = rows(self.pool.k)
        return k, (k if self.pool.v_is_k else rows(self.pool.v))

    def write(self, k: np.ndarray, v: np.ndarray, pos0: int = 0) -> None:
        """Set positions [pos0, pos0 + n) to the rows (later ones are dropped); their tokens are
        self.tokens[pos0:pos0 + n]. Takes pages from the pool (KVPoolExhaustedError: nothing changed)."""
        pool, s = self.pool, self.pool._seq(self.seq_id)
        n = k.shape[1] if k.ndim == 3 else -1
        for name, a in (("k", k), ("v", v)):
            if a.shape != (self.n_layer, n, self.kv_dim) or a.dtype != self.dtype:
                raise InvalidArgumentError(f"{name} rows must be ({self.n_layer}, n, {self.kv_dim}) {self.dtype}, "
                                           f"got {a.shape} {a.dtype}")
        if not 0 <= pos0 <= len(s.tokens) or pos0 + n > min(len(self.tokens), pool.n_ctx):
            raise InvalidArgumentError(f"rows for positions [{pos0}, {pos0 + n}) do not follow the sequence's "
                                       f"{len(s.tokens)} positions within its {len(self.tokens)} tokens")
        if pos0 < len(s.tokens):
            pool.truncate(self.seq_id, pos0)
        if pool.pages_needed(self.seq_id, n) > pool.free_pages:
            raise KVPoolExhaustedError(f"writing {n} positions needs {pool.pages_needed(self.seq_id, n)} KV pages, "
                                       f"{pool.free_pages} are free")
        pool._prepare(s, n)
        runs = _slot_runs(pool._slots(s, pos0, pos0 + n))
        _, n_head_kv, _, width = pool.k.shape
        for dest, src in ((pool.k, k), (None if pool.v_is_k else pool.v, v)):
            if dest is None:
                continue
            src = src.reshape(self.n_layer, n, n_head_kv, width)
            for i, slot, m in runs:
                dest[:, :, slot:slot + m] = src[:, i:i + m].transpose(0, 2, 1, 3)
        s.tokens.extend(self.tokens[pos0:pos0 + n])
