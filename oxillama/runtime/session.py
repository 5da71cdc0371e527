"""Session: one sequence's state over a Model, what changes as a conversation goes on.

A session holds the KV cache (and, for a model with recurrent layers, its recurrent state with
checkpoints of it) and the forward context bound to them, the tokens whose K/V are cached (and the last
sampled token, not yet run), the last position's logits, and the sampler (with its RNG state) and
grammar matcher the conversation decodes with. `run` appends tokens to it: one call into C per
chunk of n_batch tokens, GIL released, nothing vocabulary- or cache-sized allocated. `kv_snapshot` /
`kv_restore` copy the cache out and back. An InferenceEngine is a Model plus one Session; the policy
above it (prefix reuse, LoRA choice, generate) is the engine's.
"""
from __future__ import annotations

import numpy as np

from oxillama import _core
from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.kv_cache import ContiguousKVCache
from oxillama.runtime.model import Model
from oxillama.runtime.recurrent_state import RecurrentStatePool, StateCheckpoints, check_state
from oxillama.runtime.snapshot import KVState

__all__ = ["Session"]

CHECKPOINT_BUDGET = 256 << 20   # bytes of recurrent-state checkpoints a session keeps at most


class Session:
    """One sequence over `model`: a contiguous KV cache of n_ctx positions (kv_type), run n_batch
    tokens per forward on n_threads threads (see the module docstring)."""

    def __init__(self, model: Model, *, n_ctx: int, n_batch: int, n_threads: int, kv_type: str):
        c = model.config
        self.model = model
        self.n_batch = n_batch
        # K/V for the attention layers only (recurrent layers keep a fixed-size state in self.recurrent)
        self.kv = ContiguousKVCache(model.plan.n_kv_layer, n_ctx, c.kv_dim, kv_type, n_head_kv=c.n_head_kv)
        # recurrent layers: the state in slot 0 of a one-slot pool, and checkpoints of it (a recurrent state
        # cannot be truncated: going back resumes from a checkpoint and runs the tokens after it)
        self.recurrent = RecurrentStatePool(model.plan, 1) if model.plan.state_floats else None
        self.checkpoints = StateCheckpoints(_checkpoint_capacity(self.recurrent))
        self.ctx = _core.ForwardContext(model.plan, self.kv.buffers, n_batch, n_threads, None,
                                        self.recurrent.buffers if self.recurrent else None)
        self.logits = np.zeros(c.n_vocab, dtype=np.float32)   # last position's logits, reused
        self.hist = np.zeros(n_ctx + 1, dtype=np.int32)   # the cached tokens, for the sampler's penalties
        self.cached: list[int] = []          # tokens whose K/V are in the cache
        self.pending: int | None = None      # last sampled token, not yet run through the model
        self.has_logits = False
        self.sampler = None
        self.matcher = None                  # grammar state of the conversation, if constrained
        self.lora_key: tuple = ()            # the adapters the cached positions were computed with
        self._tok_buf = np.zeros(n_batch, dtype=np.int32)
        self._one = np.zeros(1, dtype=np.int32)

    @property
    def n_ctx(self) -> int:
        return self.kv.n_ctx

    @property
    def n_past(self) -> int:
        return len(self.cached)

    @property
    def tokens(self) -> list[int]:
        """The cached tokens, then the pending one if any."""
        return self.cached + ([self.pending] if self.pending is not None else [])

    def history(self) -> np.ndarray:
        """The cached tokens as an int32 view (no copy), what the sampler's penalties read."""
        return self.hist[:len(self.cached)]

    def close(self) -> None:
        self.ctx = None

    def reset(self) -> None:
        """Empty cache, no tokens, no sampler or grammar state."""
        self.cached.clear()
        self.pending = None
        self.has_logits = False
        self.sampler = None
        self.matcher = None
        self.kv.clear()

    def truncate(self, n: int) -> None:
        """Keep the first n tokens (cache and history); n may count the pending token. A recurrent state is
        not cut back here: see InferenceEngine.truncate, which resumes it from a checkpoint."""
        if not 0 <= n <= len(self.tokens):
            raise InvalidArgumentError(f"cannot truncate a session of {len(self.tokens)} tokens to {n}")
        if n <= len(self.cached):
            del self.cached[n:]
            self.kv.truncate(n)
            self.pending = None
            self.has_logits = False
        # n == len(tokens) with a pending token: nothing to drop

    def checkpoint(self, rollback: bool = False) -> None:
        """Recurrent models: remember the state at the current position (a no-op for others). rollback: the
        point a speculative round returns to, replacing the previous round's (whose array the copy reuses)."""
        if self.recurrent is not None and self.cached:
            buf = self.checkpoints.take_rollback() if rollback else None
            self.checkpoints.save(self.cached, self.recurrent.read(0, out=buf), key=self.lora_key, rollback=rollback)

    def extend_cached(self, ids: np.ndarray, start: int, stop: int) -> None:
        """Record ids[start:stop] as cached (their K/V were written by another road, the prefix cache)."""
        self.cached.extend(int(t) for t in ids[start:stop])
        self.hist[start:stop] = ids[start:stop]

    def run(self, tokens: np.ndarray, all_logits: bool = False, loras=None, lora_key: tuple = ()) -> np.ndarray | None:
        """Append tokens to the cache in chunks of n_batch; logits of the last (or every) position.
        loras: the forward's bound adapters (None: none), lora_key their identity."""
        n = len(tokens)
        if self.n_past + n > self.n_ctx:
            raise ContextOverflowError(f"{self.n_past} cached + {n} new tokens exceed n_ctx={self.n_ctx}")
        out = np.empty((n, len(self.logits)), dtype=np.float32) if all_logits else None
        self.lora_key = lora_key
        for start in range(0, n, self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            m = len(chunk)
            buf = self._tok_buf[:m]
            buf[:] = chunk
            last = start + m == n
            if all_logits:
                self.ctx.run(buf, self.n_past, out[start:start + m].reshape(-1), True, None, loras)
            elif last:
                self.ctx.run(buf, self.n_past, self.logits, False, None, loras)
            else:
                self.ctx.run(buf, self.n_past, None, False, None, loras)
            self.hist[len(self.cached):len(self.cached) + m] = chunk
            self.cached.extend(int(t) for t in chunk)
            self.kv.n_past = len(self.cached)
        if all_logits and n:
            self.logits[:] = out[-1]
        self.has_logits = n > 0 or self.has_logits
        return out

    def take_pending(self) -> np.ndarray:
        """The pending token (the last sampled one) as a 1-token array to run, no longer pending."""
        self._one[0] = self.pending
        self.pending = None
        return self._one

    def kv_snapshot(self) -> KVState:
        """A copy of the cache: tokens, K/V of positions [0, n_past), the pending token, and the last
        logits when no pending token will produce new ones."""
        k, v = self.kv.read(0, self.n_past)
        logits = self.logits.copy() if self.has_logits and self.pending is None else None
        state = self.recurrent.read(0) if self.recurrent is not None else None
        return KVState(np.array(self.cached, dtype=np.int32), k, v, self.pending, logits, state)

    def kv_restore(self, state: KVState) -> None:
        """Replace the cache with a kv_snapshot() (of a session on the same model). The sampler is
        left as it is."""
        if not isinstance(state, KVState):
            raise InvalidArgumentError(f"kv_restore takes a KVState from kv_snapshot(), got {type(state).__name__}")
        model = self.model
        tokens = model.check_tokens(state.tokens)
        n = len(tokens)
        for name, a in (("k", state.k), ("v", state.v)):
            if not isinstance(a, np.ndarray) or a.shape != (self.kv.n_layer, n, self.kv.kv_dim):
                raise InvalidArgumentError(f"KV state {name} has shape {getattr(a, 'shape', None)}, expected "
                                           f"{(self.kv.n_layer, n, self.kv.kv_dim)} for {n} tokens")
        pending = state.pending
        if pending is not None:
            pending = int(model.check_tokens([pending])[0])
        if n + (pending is not None) > self.n_ctx:
            raise ContextOverflowError(f"KV state of {n} tokens (+ pending) exceeds n_ctx={self.n_ctx}")
        logits = state.logits
        if logits is not None and (not isinstance(logits, np.ndarray) or logits.shape != (model.n_vocab,)):
            raise InvalidArgumentError(f"KV state logits must be an array of shape ({model.n_vocab},)")
        if self.recurrent is not None:
            rec = check_state(state.state, self.recurrent.slot_floats, InvalidArgumentError) if n else None
        self.kv.truncate(0)
        self.kv.write(state.k, state.v, 0)
        if self.recurrent is not None and n:
            self.recurrent.write(0, rec)
        self.cached = [int(t) for t in tokens]
        self.hist[:n] = tokens
        self.pending = pending
        self.has_logits = logits is not None
        if logits is not None:
            self.logits[:] = logits


def _checkpoint_capacity(pool) -> int:
    """Recurrent-state checkpoints a session keeps: up to 8, within CHECKPOINT_BUDGET bytes (a large model's
    state is tens of MB), at least 1."""
    if pool is None:
        return 0
    return max(1, min(8, CHECKPOINT_BUDGET // pool.slot_bytes))
