"""KV caches behind one interface: contiguous, paged (pool, block tables, copy-on-write forks)."""
import numpy as np

from oxillama import _core
import pytest

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime import ContiguousKVCache, PagedKVCache, PagePool

N_LAYER, KV_DIM, N_CTX = 3, 8, 100


def rows(n, seed, dtype=np.float16):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N_LAYER, n, KV_DIM)).astype(dtype),
            rng.standard_normal((N_LAYER, n, KV_DIM)).astype(dtype))


def make(kind, kv_type="f16", **kw):
    if kind == "contiguous":
        return ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, kv_type, n_head_kv=2)   # head-major storage
    return PagePool(N_LAYER, KV_DIM, kv_type, **kw).new_sequence()


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_write_read_truncate_same_for_every_cache(kind, kv_type):
    dtype = np.float16 if kv_type == "f16" else np.float32
    c = make(kind, kv_type)
    k, v = rows(37, 1, dtype)
    c.write(k, v, 0)
    assert c.n_past == 37
    rk, rv = c.read()
    np.testing.assert_array_equal(rk, k)
    np.testing.assert_array_equal(rv, v)
    # a sub-range crossing page borders
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


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_bad_arguments_raise(kind):
    c = make(kind)
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
    c = make("contiguous")
    k, v = rows(N_CTX + 1, 4)
    with pytest.raises(ContextOverflowError):
        c.write(k, v)


def test_pages_are_allocated_on_demand_and_given_back():
    pool = PagePool(N_LAYER, KV_DIM, page_size=16)
    page_bytes = 2 * N_LAYER * 16 * KV_DIM * 2
    assert pool.page_bytes == page_bytes and pool.memory_bytes() == 0
    seq = pool.new_sequence()
    k, v = rows(33, 5)
    seq.write(k[:, :1], v[:, :1])
    assert seq.block_table and len(seq.block_table) == 1
    seq.write(k[:, 1:], v[:, 1:], 1)          # 33 positions: 3 pages
    assert len(seq.block_table) == 3 and seq.memory_bytes() == 3 * page_bytes
    assert pool.n_in_use == 3 and pool.memory_bytes() == 3 * page_bytes
    seq.truncate(10)                           # pages stay until shrink_to_fit
    assert len(seq.block_table) == 3
    seq.shrink_to_fit()
    assert len(seq.block_table) == 1 and pool.n_in_use == 1 and pool.n_free == 2
    np.testing.assert_array_equal(seq.read()[0], k[:, :10])
    # a new sequence reuses the freed pages, no new memory
    other = pool.new_sequence()
    other.write(*rows(32, 6))
    assert pool.n_pages == 3 and pool.n_free == 0
    other.release()
    assert pool.n_free == 2 and pool.memory_bytes() == 3 * page_bytes
    assert pool.shrink_to_fit() == 2 * page_bytes
    assert pool.memory_bytes() == page_bytes
    np.testing.assert_array_equal(seq.read()[1], v[:, :10])   # survivors untouched


def test_pool_exhaustion_is_clean():
    pool = PagePool(N_LAYER, KV_DIM, page_size=4, max_pages=3)
    a = pool.new_sequence()
    a.write(*rows(8, 7))
    b = pool.new_sequence()
    with pytest.raises(ContextOverflowError, match="exhausted"):
        b.write(*rows(8, 8))               # needs 2 pages, 1 left: nothing taken
    assert b.block_table == [] and pool.n_in_use == 2
    b.write(*rows(4, 9))
    a.release()
    b.write(*rows(12, 10))                # a's pages came back
    assert b.n_past == 12


def test_many_sequences_share_one_pool_without_mixing():
    pool = PagePool(N_LAYER, KV_DIM, page_size=16)
    seqs, data = [], []
    for i in range(6):
        s = pool.new_sequence()
        n = 5 + 13 * i
        k, v = rows(n, 100 + i)
        # grow in uneven steps, as decoding does
        for lo in range(0, n, 7):
            s.write(k[:, lo:lo + 7], v[:, lo:lo + 7], lo)
        seqs.append(s)
        data.append((k, v))
    for s, (k, v) in zip(seqs, data):
        rk, rv = s.read()
        np.testing.assert_array_equal(rk, k)
        np.testing.assert_array_equal(rv, v)
    assert pool.n_in_use == sum(len(s.block_table) for s in seqs)


def test_fork_shares_pages_and_copies_on_write():
    pool = PagePool(N_LAYER, KV_DIM, page_size=16)
    parent = pool.new_sequence()
    k, v = rows(40, 11)
    parent.write(k, v)
    child = parent.fork()
    assert child.block_table == parent.block_table and pool.n_in_use == 3
    # the child continues inside the shared last page: it gets its own copy of that page only
    k2, v2 = rows(5, 12)
    child.write(k2, v2, 40)
    assert child.block_table[:2] == parent.block_table[:2]
    assert child.block_table[2] != parent.block_table[2]
    np.testing.assert_array_equal(parent.read()[0], k)
    np.testing.assert_array_equal(child.read()[0], np.concatenate([k, k2], axis=1))
    # the parent rewrites a shared early position: the child keeps the original
    k3, v3 = rows(1, 13)
    parent.write(k3, v3, 3)
    np.testing.assert_array_equal(child.read(0, 4)[0], k[:, :4])
    parent.release()
    child.release()
    assert pool.n_in_use == 0


def test_gather_into_engine_cache_and_scatter_back():
    pool = PagePool(N_LAYER, KV_DIM)
    contiguous = make("contiguous")
    seq = pool.new_sequence()
    k, v = rows(20, 14)
    seq.write(k, v)
    seq.gather_into(contiguous)
    assert contiguous.n_past == 20
    np.testing.assert_array_equal(contiguous.read(0, 20)[0], k)
    # the engine decodes 3 more positions; only those are copied back
    k2, v2 = rows(3, 15)
    contiguous.write(k2, v2, 20)
    seq.scatter_from(contiguous)
    assert seq.n_past == 23
    np.testing.assert_array_equal(seq.read(20, 23)[1], v2)
    with pytest.raises(InvalidArgumentError, match="does not match"):
        seq.gather_into(ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, "f32"))


def test_random_operations_match_a_plain_reference():
    """Writes, truncations, forks, shrinks and releases on many sequences of one small pool keep every
    sequence equal to a plain array model of it, and the pool's page count consistent."""
    rng = np.random.default_rng(7)
    pool = PagePool(N_LAYER, KV_DIM, "f32", page_size=4, max_pages=64)
    seqs = [pool.new_sequence()]
    refs = [(np.zeros((N_LAYER, 0, KV_DIM), np.float32),) * 2]
    for step in range(400):
        i = int(rng.integers(len(seqs)))
        s, (rk, rv) = seqs[i], refs[i]
        op = rng.choice(["write", "write", "truncate", "fork", "shrink", "release"])
        if op == "write":
            pos0 = int(rng.integers(0, s.n_past + 1))
            k, v = rows(int(rng.integers(1, 9)), step, np.float32)
            try:
                s.write(k, v, pos0)
            except ContextOverflowError:
                assert (s.read()[0] == rk).all()        # a refused write changes nothing
                continue
            refs[i] = (np.concatenate([rk[:, :pos0], k], 1), np.concatenate([rv[:, :pos0], v], 1))
        elif op == "truncate":
            n = int(rng.integers(0, s.n_past + 1))
            s.truncate(n)
            refs[i] = (rk[:, :n], rv[:, :n])
        elif op == "fork" and len(seqs) < 8:
            seqs.append(s.fork())
            refs.append((rk.copy(), rv.copy()))
        elif op == "shrink":
            s.shrink_to_fit()
        elif op == "release":
            s.release()
            refs[i] = (rk[:, :0], rv[:, :0])
        for s2, (k2, v2) in zip(seqs, refs):
            got_k, got_v = s2.read()
            np.testing.assert_array_equal(got_k, k2)
            np.testing.assert_array_equal(got_v, v2)
        held = {pid for s2 in seqs for pid in s2.block_table}
        assert pool.n_in_use == len(held)
        assert all(pool.refcount(p) == sum(s2.block_table.count(p) for s2 in seqs) for p in held)


def test_two_conversations_take_turns_on_one_engine_through_a_page_pool(smollm2):
    """A scheduler's pattern: each conversation's K/V lives in pages between its turns and is copied
    into the engine's contiguous cache for its turn; the result equals an uninterrupted run."""
    from oxillama.runtime import KVState
    e = smollm2
    prompts = ["The three primary colours are", "A good breakfast contains"]
    reference = []
    for p in prompts:
        e.reset()
        e.generate(p, max_tokens=6, temperature=0)
        reference.append(e.tokens)
    pool = PagePool.for_cache(e.kv)
    stored = {}
    for turn in range(2):
        for c, p in enumerate(prompts):
            if turn == 0:
                e.reset()
                e.generate(p, max_tokens=3, temperature=0)
            else:
                seq, tokens, pending = stored[c]
                e.kv_restore(KVState(np.array(tokens, np.int32), *seq.read(), pending=pending))
                e.generate(None, max_tokens=3, temperature=0)
            seq = stored[c][0] if c in stored else pool.new_sequence()
            seq.scatter_from(e.kv, start=0 if c not in stored else None)
            stored[c] = (seq, e.tokens[:e.n_past], e.tokens[-1])
    for c in range(2):
        seq, tokens, pending = stored[c]
        assert tokens + [pending] == reference[c]
    assert pool.n_in_use == sum(len(s.block_table) for s, _, _ in stored.values())


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
