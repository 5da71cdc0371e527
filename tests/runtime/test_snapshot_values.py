"""Snapshots are validated by value, and bounded in what they may ask for (issue 22)."""
import os

import msgpack
import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import SnapshotError
from oxillama.runtime import snapshot as snap

TINY = os.path.join(os.path.dirname(__file__), "..", "models", "data", "llama.gguf")


@pytest.fixture(scope="module")
def engine():
    with InferenceEngine.from_gguf(TINY, n_ctx=64) as e:
        yield e


@pytest.fixture(scope="module")
def blob(engine):
    engine.reset()
    engine.forward([1, 2, 3, 4])       # a session with logits and no pending token
    return engine.snapshot()


def crafted(blob: bytes, **changes) -> bytes:
    d = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    d.update(changes)
    return snap.frame(msgpack.packb(d, use_bin_type=True))


def test_extreme_but_finite_logits_continue(engine, blob):
    """Saved logits all 3.4e38: generate(None) raised a bare IndexError (inf - inf in the softmax)."""
    d = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    n_vocab = d["n_vocab"]
    for value in (3.4e38, -3.4e38):
        engine.load_snapshot(crafted(blob, logits=np.full(n_vocab, value, "<f4").tobytes()))
        out = engine.generate(None, max_tokens=3, seed=1)
        assert 1 <= len(out.tokens) <= 3 and all(0 <= t < n_vocab for t in out.tokens)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_are_refused(engine, blob, bad):
    d = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    logits = np.zeros(d["n_vocab"], "<f4")
    logits[5] = bad
    with pytest.raises(SnapshotError, match="logits"):
        engine.load_snapshot(crafted(blob, logits=logits.tobytes()))


@pytest.mark.parametrize("name", ["k", "v"])
def test_non_finite_kv_is_refused(engine, blob, name):
    d = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    raw = bytearray(d[name])
    raw[0:2] = np.array([np.nan], dtype="<f2").tobytes() if d["kv_type"] == "f16" else raw[0:2]
    if d["kv_type"] != "f16":
        raw[0:4] = np.array([np.nan], dtype="<f4").tobytes()
    with pytest.raises(SnapshotError, match=f"{name} cache"):
        engine.load_snapshot(crafted(blob, **{name: bytes(raw)}))


def test_huge_n_ctx_is_refused_before_allocating(blob):
    """n_ctx = 2**31-1 passed validation, then resume asked for 22.5 TiB of KV cache."""
    with pytest.raises(SnapshotError, match="KV cache of n_ctx=2147483647"):
        InferenceEngine.resume(crafted(blob, n_ctx=2**31 - 1), TINY)
