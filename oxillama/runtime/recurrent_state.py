"""The recurrent-state pool: per sequence, the fixed-size state of every recurrent layer, beside the KV pages.

A model with recurrent layers (Mamba-2 mixers, short convolutions, delta-rule attention ...) carries, per
sequence, a few float buffers per such layer whose size does not grow with the context (a conv state, an SSM
or delta-rule state). The plan says where each lives in one *slot* (`plan.state_layout`: (layer, name, shape,
offset) entries, `plan.state_floats` floats in all); the pool holds `n_slots` slots as one float32 array
(n_slots, slot_floats) that the C forward reads and writes in place (oxl_state_pool, csrc/forward.h), each
sequence of a step through its own slot.

    pool = RecurrentStatePool(model.plan, n_slots=8)
    slot = pool.alloc()           # a free slot (its contents are whatever the forward writes from position 0)
    pool.copy(slot, other)        # fork: other continues from slot's state
    saved = pool.read(slot)       # a checkpoint (a copy); pool.write(slot, saved) restores it
    pool.free(slot)

A forward at position 0 starts the sequence from the zero state (the C forward clears the slot), so a
slot needs no clearing between uses. Unlike K/V rows, a recurrent state cannot be truncated: going back to an
earlier position means restoring a checkpoint taken there (`StateCheckpoints`) or running the tokens again.
"""
from __future__ import annotations

import logging

import numpy as np

from oxillama import _core
from oxillama.errors import BatchError, InvalidArgumentError, SnapshotError

log = logging.getLogger("oxillama.state")

__all__ = ["RecurrentStatePool", "StateCheckpoints", "check_state"]


class RecurrentStatePool:
    """n_slots recurrent-state slots for a plan with recurrent layers (see the module docstring)."""

    def __init__(self, plan, n_slots: int):
        if isinstance(n_slots, bool) or not isinstance(n_slots, (int, np.integer)) or n_slots < 1:
            raise InvalidArgumentError(f"n_slots must be an int >= 1, got {n_slots!r}")
        if plan.state_floats <= 0:
            raise InvalidArgumentError("the model has no recurrent layers: it needs no state pool")
        self.layout = list(plan.state_layout)
        self.slot_floats = int(plan.state_floats)
        self.n_slots = int(n_slots)
        self.data = np.zeros((self.n_slots, self.slot_floats), dtype=np.float32)
        self.buffers = _core.StateBuffers(self.data)
        self._free = list(range(self.n_slots - 1, -1, -1))   # pop() takes the lowest first
        log.debug("recurrent state pool: %d slots of %.2f MB", self.n_slots, self.slot_bytes / 1e6)

    @property
    def slot_bytes(self) -> int:
        return self.slot_floats * 4

    def memory_bytes(self) -> int:
        return self.data.nbytes

    @property
    def n_free(self) -> int:
        return len(self._free)

    @property
    def n_used(self) -> int:
        return self.n_slots - len(self._free)

    def alloc(self) -> int:
        if not self._free:
            raise BatchError(f"all {self.n_slots} recurrent state slots are in use")
        return self._free.pop()

    def free(self, slot: int) -> None:
        self._check(slot)
        if slot in self._free:
            raise InvalidArgumentError(f"recurrent state slot {slot} is already free")
        self._free.append(slot)

    def _check(self, slot) -> int:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.n_slots:
            raise InvalidArgumentError(f"no recurrent state slot {slot!r} (the pool has {self.n_slots})")
        return int(slot)

    def copy(self, src: int, dst: int) -> None:
        """dst continues from src's state (a fork)."""
        self.data[self._check(dst)] = self.data[self._check(src)]

    def clear(self, slot: int) -> None:
        self.data[self._check(slot)] = 0.0

    def read(self, slot: int, out: np.ndarray | None = None) -> np.ndarray:
        """A copy of the slot's state, (slot_floats,) float32: into out when it is such an array (no new
        allocation: a large model's state is tens of MB, fresh pages cost more than the copy), else a new one."""
        row = self.data[self._check(slot)]
        if out is None or out.shape != row.shape or out.dtype != row.dtype:
            return row.copy()
        np.copyto(out, row)
        return out

    def write(self, slot: int, state: np.ndarray, check: bool = True) -> None:
        """Restore a state read() from a pool of the same model (checked by check_state; check=False for a
        checkpoint this pool's read() made, which skips a pass over tens of MB)."""
        self.data[self._check(slot)] = check_state(state, self.slot_floats, InvalidArgumentError) if check else state

    def views(self, slot: int) -> dict:
        """{(layer, name): array view of that buffer in the slot}, e.g. (3, "ssm") -> (n_head, d_state, head_dim)."""
        row = self.data[self._check(slot)]
        return {(il, name): row[off:off + int(np.prod(shape))].reshape(shape) for il, name, shape, off in self.layout}

    def __repr__(self):
        return (f"RecurrentStatePool(n_slots={self.n_slots}, slot_floats={self.slot_floats}, "
                f"used={self.n_used})")


def check_state(state, slot_floats: int, error=SnapshotError) -> np.ndarray:
    """state as a (slot_floats,) float32 array, or `error` if it is missing, of the wrong size or not finite."""
    if state is None:
        raise error(f"the recurrent state is missing (the model's recurrent layers need {slot_floats} floats)")
    arr = np.asarray(state)
    if arr.dtype != np.float32 or arr.ndim != 1 or arr.shape[0] != slot_floats:
        raise error(f"the recurrent state is {arr.dtype} {arr.shape}, the model's is float32 ({slot_floats},)")
    if not np.isfinite(arr).all():
        raise error("the recurrent state holds NaN or infinite values")
    return arr


class StateCheckpoints:
    """A sequence's recurrent state saved at a few positions, to resume from without running the tokens
    before them again: {n_tokens: (token ids, key, state)}; `key` names what else the state depends on (the
    LoRA adapters it was computed with). At most `capacity` kept, the oldest dropped first.

    One of them may be the *rollback* checkpoint (save(..., rollback=True)): where speculative decoding's
    round returns after a rejected draft. It is only needed until the next round's, so each one replaces the
    last (its array handed back by take_rollback() for the copy to reuse) instead of evicting the prompts'
    checkpoints that prefix reuse resumes from."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self._cp: dict[int, tuple[tuple[int, ...], object, np.ndarray]] = {}
        self._rollback_n: int | None = None

    def __len__(self) -> int:
        return len(self._cp)

    def clear(self) -> None:
        self._cp.clear()
        self._rollback_n = None

    def take_rollback(self) -> np.ndarray | None:
        """Drop the rollback checkpoint and return its array, for the next one to be copied into (None if
        there is none)."""
        n, self._rollback_n = self._rollback_n, None
        entry = self._cp.pop(n, None) if n is not None else None
        return entry[2] if entry is not None else None

    def save(self, tokens, state: np.ndarray, key=(), rollback: bool = False) -> None:
        n = len(tokens)
        if n == 0 or self.capacity < 1:
            return
        self._cp.pop(n, None)
        if n == self._rollback_n:
            self._rollback_n = None
        self._cp[n] = (tuple(int(t) for t in tokens), key, state)
        if rollback:
            self._rollback_n = n
        while len(self._cp) > self.capacity:
            oldest = next(iter(self._cp))
            if oldest == self._rollback_n and len(self._cp) > 1:   # the rollback point outlives older prompts'
                oldest = next(k for k in self._cp if k != self._rollback_n)
            if oldest == self._rollback_n:
                self._rollback_n = None
            del self._cp[oldest]

    def best(self, tokens, limit: int | None = None, key=()) -> tuple[int, np.ndarray | None]:
        """(n, state) of the longest checkpoint of `key` whose tokens are a prefix of `tokens`, n <= limit;
        (0, None) if none."""
        limit = len(tokens) if limit is None else limit
        best_n, best = 0, None
        for n, (toks, k, state) in self._cp.items():
            if best_n < n <= min(limit, len(tokens)) and k == key and tuple(int(t) for t in tokens[:n]) == toks:
                best_n, best = n, state
        return best_n, best
