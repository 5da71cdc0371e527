"""Text embeddings from a decoder model's final (output-normed) hidden states.

Each input runs in a fresh KV cache of its own length, so inputs never see each other or the
engine's session. Pooling over the n input positions (the tokenized text, BOS included when the
model adds one) of H (n, n_embd):
  last: H[n - 1]  (the only position that has attended to the whole text; the usual choice for
        causal models)
  mean: H.mean(0)
  max:  H.max(0)  (elementwise)
  cls:  H[0]      (the first token; for a causal model with BOS this is the same for every text)
normalize=True divides by the L2 norm, so a dot product is the cosine similarity.
pooling=None: the model's own: an encoder's (bert) `<arch>.pooling_type`, the one a decoder's file declares,
else last. An encoder (models/bert.py) attends both ways, so each input runs whole in one call.
"""
from __future__ import annotations

import numpy as np

from oxillama import _core
from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.kv_cache import ContiguousKVCache
from oxillama.runtime.recurrent_state import RecurrentStatePool

__all__ = ["POOLING_MODES", "default_pooling", "hidden_states", "pool", "embed", "embed_batch"]

POOLING_MODES = ("last", "mean", "max", "cls")
_DECLARED = {1: "mean", 2: "cls", 3: "last"}   # llama.cpp's llama_pooling_type values that pool


def default_pooling(engine) -> str:
    """The pooling the model's file declares (`<arch>.pooling_type`), else last."""
    declared = engine.metadata.get(f"{engine.config.arch}.pooling_type")
    if declared is None:
        return "mean" if getattr(engine.arch, "is_encoder", False) else "last"
    name = _DECLARED.get(int(declared))
    if name is None:
        raise InvalidArgumentError(f"this model declares pooling_type {int(declared)} (none or rank), which gives "
                                   f"no single vector per text; pass pooling= one of {', '.join(POOLING_MODES)}")
    return name


def _pooling(engine, pooling) -> str:
    if pooling is None:
        return default_pooling(engine)
    if pooling not in POOLING_MODES:
        raise InvalidArgumentError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
    return pooling


def hidden_states(engine, ids) -> np.ndarray:
    """(n, n_embd) float32 final normed hidden states of the token ids, in a fresh cache."""
    arr = engine.check_tokens(ids)
    n = len(arr)
    if n == 0:
        raise InvalidArgumentError("cannot embed an empty input (no tokens)")
    if n > engine.n_ctx:
        raise ContextOverflowError(f"input of {n} tokens exceeds n_ctx={engine.n_ctx}")
    kv0 = engine.kv
    cache = ContiguousKVCache.like(kv0, n_ctx=n)
    # an encoder's tokens see each other: the whole input in one call
    n_batch = n if engine.plan.non_causal else min(n, engine.n_batch)
    # a recurrent model: a one-slot state pool of its own (the session's state is left as it is)
    state = RecurrentStatePool(engine.plan, 1).buffers if engine.plan.state_floats else None
    ctx = _core.ForwardContext(engine.plan, cache.buffers, n_batch, engine.n_threads, None, state)
    n_embd = engine.plan.n_embd
    out = np.empty((n, n_embd), dtype=np.float32)
    for start in range(0, n, n_batch):
        chunk = np.ascontiguousarray(arr[start:start + n_batch])
        ctx.run(chunk, start, None, False, out[start:start + len(chunk)].reshape(-1))
    return out


def pool(hidden: np.ndarray, pooling: str = "last", normalize: bool = True) -> np.ndarray:
    """Pool (n, n_embd) hidden states into one (n_embd,) float32 vector (see the module docstring)."""
    if pooling not in POOLING_MODES:
        raise InvalidArgumentError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
    h = np.asarray(hidden, dtype=np.float32)
    if h.ndim != 2 or h.shape[0] == 0:
        raise InvalidArgumentError(f"hidden states must be (n >= 1, n_embd), got shape {h.shape}")
    if pooling == "last":
        v = h[-1].copy()
    elif pooling == "cls":
        v = h[0].copy()
    elif pooling == "mean":
        v = h.astype(np.float64).mean(0).astype(np.float32)
    else:
        v = h.max(0)
    if normalize:
        norm = float(np.linalg.norm(v.astype(np.float64)))
        if norm > 0.0:
            v = (v / norm).astype(np.float32)
    return v


def _ids(engine, text) -> list[int]:
    if isinstance(text, str):
        if not text:
            raise InvalidArgumentError("cannot embed an empty string")
        return engine.tokenize(text, add_special=True, parse_special=False)
    ids = [int(t) for t in engine.check_tokens(list(text))]
    if not ids:
        raise InvalidArgumentError("cannot embed an empty input (no tokens)")
    return ids


def embed(engine, text, pooling: str | None = None, normalize: bool = True) -> np.ndarray:
    """One (n_embd,) float32 embedding of a text (or a list of token ids)."""
    pooling = _pooling(engine, pooling)
    return pool(hidden_states(engine, _ids(engine, text)), pooling, normalize)


def embed_batch(engine, texts, pooling: str | None = None, normalize: bool = True) -> np.ndarray:
    """(len(texts), n_embd) float32: each text embedded independently (its own fresh cache)."""
    if isinstance(texts, str):
        raise InvalidArgumentError("embed_batch takes a list of texts; use embed for one")
    texts = list(texts)
    pooling = _pooling(engine, pooling)
    all_ids = [_ids(engine, t) for t in texts]   # validate every input before running any
    out = np.empty((len(texts), engine.plan.n_embd), dtype=np.float32)
    for i, ids in enumerate(all_ids):
        out[i] = pool(hidden_states(engine, ids), pooling, normalize)
    return out
