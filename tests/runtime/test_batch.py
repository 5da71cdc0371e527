"""SequencePool: many sequences over one model and one KV pool, checked against the engine's own forward."""
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import (BatchError, ContextOverflowError, InvalidArgumentError, KVPoolExhaustedError,
                             OxillamaError)
from oxillama.runtime.batch import SequencePool

DATA = Path(__file__).parents[1] / "models" / "data"
N_CTX = 96


@pytest.fixture(scope="module", params=["llama", "gemma3", "qwen3.f16"])
def tiny(request):
    with InferenceEngine.from_gguf(DATA / f"{request.param}.gguf", n_ctx=N_CTX, n_threads=1) as engine:
        yield engine


def _ids(engine, n, seed):
    return np.random.default_rng(seed).integers(0, engine.n_vocab, n).tolist()


def _solo(engine, *chunks, all_logits=False):
    """Logits of each chunk run after the previous ones by the engine's own session."""
    engine.reset()
    return [engine.forward(c, all_logits=all_logits) for c in chunks]


def test_step_equals_solo_forward_whatever_the_companions(tiny):
    a, b, c = _ids(tiny, 23, 1), _ids(tiny, 5, 2), _ids(tiny, 40, 3)
    pool = SequencePool(tiny, n_seq_max=3)
    sa, sb, sc = pool.add(), pool.add(), pool.add()
    la, lb, lc = pool.step([(sa, a, False), (sb, b, True), (sc, c, False)])
    assert la.shape == (tiny.n_vocab,) and lb.shape == (len(b), tiny.n_vocab) and la.dtype == np.float32
    np.testing.assert_array_equal(la, _solo(tiny, a)[0])
    np.testing.assert_array_equal(lb, _solo(tiny, b, all_logits=True)[0])
    np.testing.assert_array_equal(lc, _solo(tiny, c)[0])
    # decode: one token each, in another order, b alone in a later step
    dc, da = pool.step([(sc, [7], False), (sa, [11], False)])
    (db,) = pool.step([(sb, [13, 14], False)])
    np.testing.assert_array_equal(da, _solo(tiny, a, [11])[1])
    np.testing.assert_array_equal(dc, _solo(tiny, c, [7])[1])
    np.testing.assert_array_equal(db, _solo(tiny, b, [13, 14])[1])
    assert pool.tokens(sa) == a + [11] and pool.n_past(sb) == len(b) + 2


def test_results_are_the_callers(tiny):
    pool = SequencePool(tiny, n_seq_max=2)
    s = pool.add()
    first = pool.step([(s, _ids(tiny, 4, 5), False)])[0]
    kept = first.copy()
    pool.step([(s, [3], False)])
    np.testing.assert_array_equal(first, kept)


def test_prefill_in_chunks_equals_one_prefill(tiny):
    ids = _ids(tiny, 30, 7)
    pool = SequencePool(tiny, n_seq_max=2)
    one, chunked = pool.add(), pool.add()
    whole = pool.step([(one, ids, True)])[0]
    parts = [pool.step([(chunked, ids[i:j], True)])[0] for i, j in ((0, 9), (9, 20), (20, 30))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_fork_shares_the_prefix_and_diverges_independently(tiny):
    prefix, x, y = _ids(tiny, 32, 8), _ids(tiny, 6, 9), _ids(tiny, 3, 10)
    pool = SequencePool(tiny, n_seq_max=3)
    a = pool.add()
    pool.step([(a, prefix + x, False)])
    free = pool.free_pages
    f = pool.fork(a, 32)                     # two full pages, shared
    assert pool.free_pages == free and pool.n_past(f) == 32 and pool.tokens(f) == prefix
    assert pool.pages_needed(f, 1) == 1
    lf, la = pool.step([(f, y, False), (a, [5], False)])
    np.testing.assert_array_equal(lf, _solo(tiny, prefix, y)[1])
    np.testing.assert_array_equal(la, _solo(tiny, prefix + x, [5])[1])
    whole = pool.fork(a)                     # default: everything cached
    assert pool.tokens(whole) == prefix + x + [5]
    assert pool.tokens(f) == prefix + y      # the fork never sees a's rows


def test_truncate_then_continue_equals_fresh(tiny):
    ids = _ids(tiny, 40, 11)
    pool = SequencePool(tiny, n_seq_max=1)
    s = pool.add()
    pool.step([(s, ids, False)])
    free = pool.free_pages
    pool.truncate(s, 10)
    pages = lambda n: -(-n // pool.page_size)  # noqa: E731
    assert pool.n_past(s) == 10 and pool.tokens(s) == ids[:10] and pool.free_pages == free + pages(40) - pages(10)
    out = pool.step([(s, [1, 2, 3], False)])[0]
    np.testing.assert_array_equal(out, _solo(tiny, ids[:10], [1, 2, 3])[1])


def test_pages_are_taken_as_sequences_grow(tiny):
    pool = SequencePool(tiny, n_seq_max=2)
    assert pool.page_size >= 1 and pool.n_pages >= 2 * -(-N_CTX // pool.page_size) and pool.n_ctx == N_CTX
    s = pool.add()
    assert pool.pages_needed(s, 0) == 0 and pool.pages_needed(s, pool.page_size + 1) == 2
    before = pool.free_pages
    pool.step([(s, _ids(tiny, pool.page_size + 1, 12), False)])
    assert pool.free_pages == before - 2 and pool.pages_needed(s, 1) == 0
    pool.remove(s)
    assert pool.free_pages == before


def test_exhausted_pool_raises_and_changes_nothing(tiny):
    page = SequencePool(tiny, n_seq_max=1).page_size
    pool = SequencePool(tiny, n_seq_max=2, n_pages=3, n_ctx=4 * page)
    a, b = pool.add(), pool.add()
    ids = _ids(tiny, 3 * pool.page_size, 13)
    pool.step([(a, ids, False)])
    assert pool.free_pages == 0
    with pytest.raises(KVPoolExhaustedError) as exc:
        pool.step([(b, [1], False)])
    assert isinstance(exc.value, BatchError)
    with pytest.raises(KVPoolExhaustedError):        # a's token would fit nowhere either: nothing runs
        pool.step([(b, [1], False), (a, [2], False)])
    assert pool.n_past(a) == len(ids) and pool.n_past(b) == 0 and pool.tokens(a) == ids
    pool.remove(a)
    assert pool.free_pages == 3
    out = pool.step([(b, [1, 2], False)])[0]
    np.testing.assert_array_equal(out, _solo(tiny, [1, 2])[0])


def test_bad_input(tiny):
    with pytest.raises(InvalidArgumentError):
        SequencePool(tiny, n_seq_max=0)
    pool = SequencePool(tiny, n_seq_max=2)
    a, b = pool.add(), pool.add()
    with pytest.raises(BatchError, match="n_seq_max"):
        pool.add()
    with pytest.raises(BatchError):
        pool.fork(a)
    with pytest.raises(InvalidArgumentError):
        pool.step([(a + b + 1, [1], False)])
    with pytest.raises(InvalidArgumentError):
        pool.step([(a, [tiny.n_vocab], False)])
    with pytest.raises(InvalidArgumentError):
        pool.step([(a, [], False)])
    with pytest.raises(InvalidArgumentError):
        pool.step([(a, [1], False), (a, [2], False)])
    with pytest.raises(ContextOverflowError):
        pool.step([(a, [1] * (N_CTX + 1), False)])
    with pytest.raises(InvalidArgumentError):
        pool.truncate(a, 1)
    assert pool.n_past(a) == 0 and pool.n_past(b) == 0      # nothing ran
    pool.remove(b)
    with pytest.raises(OxillamaError):
        pool.n_past(b)
    c = pool.add()                                           # the freed slot is reused
    assert pool.n_past(c) == 0


@pytest.mark.parametrize("n_batch", [16, 37])
def test_steps_larger_than_n_batch_run_in_pieces_with_the_same_logits(tiny, n_batch):
    a, b = _ids(tiny, 60, 21), _ids(tiny, 30, 22)
    for flags in ((True, True), (False, True), (True, False), (False, False)):
        pool = SequencePool(tiny, n_seq_max=2, n_batch=n_batch)
        sa, sb = pool.add(), pool.add()
        la, lb = pool.step([(sa, a, flags[0]), (sb, b, flags[1])])
        np.testing.assert_array_equal(la, _solo(tiny, a, all_logits=flags[0])[0])
        np.testing.assert_array_equal(lb, _solo(tiny, b, all_logits=flags[1])[0])
