"""The contiguous KV cache behind the KVCache interface: write, read, truncate, errors, head-major storage.
(Many sequences share pages through runtime.batch.SequencePool: tests/runtime/test_batch.py.)"""
import numpy as np

from oxillama import _core
import pytest

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime import ContiguousKVCache

N_LAYER, KV_DIM, N_CTX = 3, 8, 100


def rows(n, seed, dtype=np.float16):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N_LAYER, n, KV_DIM)).astype(dtype),
            rng.standard_normal((N_LAYER, n, KV_DIM)).astype(dtype))


def make(kv_type="f16"):
    return ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, kv_type, n_head_kv=2)   # head-major storage


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_write_read_truncate(kv_type):
    dtype = np.float16 if kv_type == "f16" else np.float32
    c = make(kv_type)
    k, v = rows(37, 1, dtype)
    c.write(k, v, 0)
    assert c.n_past == 37
    rk, rv = c.read()
    np.testing.assert_array_equal(rk, k)
    np.testing.assert_array_equal(rv, v)
    # a sub-range
    rk, rv = c.read(5, 33)
    np.testing.assert_array_equal(rk, k[:, 5:33])
    np.testing.assert_array_equal(rv, v[:, 5:33])
    # overwrite from the middle: later rows replaced, n_past follows
    k2, v2 = rows(10, 2, dtype)
    c.write(k2, v2, 20)
    assert c.n_past == 30
    rk, _ = c.read()
    np.testing.assert_array_equal(rk[:, :20], k[:, :20])
    np.testing.assert_array_equal(rk[:, 20:], k2)
    c.truncate(7)
    assert c.n_past == 7
    np.testing.assert_array_equal(c.read()[1], v[:, :7])
    c.clear()
    assert c.n_past == 0 and c.read()[0].shape == (N_LAYER, 0, KV_DIM)


def test_bad_arguments_raise():
    c = make()
    k, v = rows(4, 3)
    c.write(k, v)
    with pytest.raises(InvalidArgumentError):
        c.truncate(5)
    with pytest.raises(InvalidArgumentError):
        c.read(2, 9)
    with pytest.raises(InvalidArgumentError, match="gap"):
        c.write(k, v, 6)
    with pytest.raises(InvalidArgumentError, match="dtype"):
        c.write(k.astype(np.float32), v.astype(np.float32))
    with pytest.raises(InvalidArgumentError, match="n_layer"):
        c.write(k[:2], v[:2])
    with pytest.raises(InvalidArgumentError, match="differ"):
        c.write(k, v[:, :3])
    assert c.n_past == 4


def test_contiguous_write_past_n_ctx_overflows():
    c = make()
    k, v = rows(N_CTX + 1, 4)
    with pytest.raises(ContextOverflowError):
        c.write(k, v)


def test_contiguous_cache_stores_each_kv_head_as_one_stream():
    """The forward reads a KV head's rows as one contiguous stream: rows written as (n_layer, n, kv_dim)
    land head-major, head g at [:, g], and read back unchanged. Storage is whole KV pages of the C forward."""
    c = ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, "f16", n_head_kv=2)
    rows_stored = -(-N_CTX // _core.KV_PAGE) * _core.KV_PAGE
    assert c.k.shape == (N_LAYER, 2, rows_stored, KV_DIM // 2) and c.n_ctx == N_CTX
    k, v = rows(5, 21)
    c.write(k, v, 0)
    np.testing.assert_array_equal(c.k[:, 1, :5], k[:, :, KV_DIM // 2:])
    np.testing.assert_array_equal(c.v[:, 0, :5], v[:, :, :KV_DIM // 2])
    got_k, got_v = c.read(1, 4)
    np.testing.assert_array_equal(got_k, k[:, 1:4])
    np.testing.assert_array_equal(got_v, v[:, 1:4])
    with pytest.raises(InvalidArgumentError, match="multiple of n_head_kv"):
        ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, n_head_kv=3)
