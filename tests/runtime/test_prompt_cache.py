"""The Scheduler's prompt cache (`oxillama serve --cache-ram`): finished requests' K/V kept in a
PrefixKvCache and copied into a later request's pages, with logits bit-identical to a cold run."""
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine, Scheduler
from oxillama.errors import InvalidArgumentError
from oxillama.runtime import PrefixKvCache
from oxillama.runtime.batch import SequencePool

DATA = Path(__file__).parents[1] / "models" / "data"
TIMEOUT = 120          # s; a request not done by then is a hang, not slowness
GATE_WAIT = 20         # s
N_CTX = 256


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def tiny(request):
    with InferenceEngine.from_gguf(DATA / f"{request.param}.gguf", n_ctx=N_CTX, n_threads=1) as engine:
        yield engine


@pytest.fixture(scope="module")
def smollm2_q8_0_kv(smollm2_path):
    """A q8_0 KV cache needs head_dim a multiple of 32, which the tiny models do not have."""
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=N_CTX, n_threads=1, type_k="q8_0", type_v="q8_0") as engine:
        yield engine


def _ids(engine, n, seed):
    return np.random.default_rng(seed).integers(0, engine.n_vocab - 1, n).tolist()


def test_restored_rows_give_the_cold_logits_bit_for_bit(tiny):
    """A sequence whose prefix was copied in from the cache (at a page boundary or not, whole or on
    top of a fork) gives exactly the logits of a sequence that ran every token."""
    _check_restore_is_exact(tiny)


def test_restored_q8_0_rows_give_the_cold_logits_bit_for_bit(smollm2_q8_0_kv):
    """q8_0 rows are copied as their blocks' bytes, never requantized."""
    _check_restore_is_exact(smollm2_q8_0_kv)


def _check_restore_is_exact(tiny):
    prompt = _ids(tiny, 150, 1)
    pool = SequencePool(tiny, n_seq_max=4)
    cache = PrefixKvCache()
    first = pool.add()
    pool.step([(first, prompt[:100], False)])
    cache.insert(prompt[:100], pool.rows(first, prompt[:100]))
    cold = pool.add()
    (want,) = pool.step([(cold, prompt, True)])
    for n_fork in (0, 37, 64):           # a live sequence holds the first n_fork positions
        seq = pool.fork(first, n_fork) if n_fork else pool.add()
        assert cache.restore(prompt, pool.rows(seq, prompt), start=n_fork) == 100
        assert pool.tokens(seq) == prompt[:100]
        (got,) = pool.step([(seq, prompt[100:], True)])
        np.testing.assert_array_equal(got, want[100:])
        pool.remove(seq)
    # the first sequence was not disturbed by the forks' copy-on-write
    (tail,) = pool.step([(first, prompt[100:], True)])
    np.testing.assert_array_equal(tail, want[100:])


def test_rows_of_scattered_pages_read_and_write_back_exactly(tiny):
    """Two sequences that grew in turns hold every other page: a sequence's rows, read a run of consecutive
    pool rows at a time, are its positions' rows in order (checked against the pool read position by
    position), and written into a fresh sequence they read back the same."""
    from oxillama import _core
    page = _core.KV_PAGE
    a, b = _ids(tiny, 3 * page + 5, 11), _ids(tiny, 3 * page, 12)
    pool = SequencePool(tiny, n_seq_max=3)
    sa, sb = pool.add(), pool.add()
    for i in range(0, len(a), page):        # a page of each in turn
        pool.step([(sa, a[i:i + page], False)])
        if i < len(b):
            pool.step([(sb, b[i:i + page], False)])
    start, stop = 7, len(a) - 1            # not on page boundaries
    k, v = pool.rows(sa, a).read(start, stop)
    slots = pool._slots(pool._seq(sa), start, stop)
    assert (np.diff(slots) != 1).sum() >= 2, "the pages should not be consecutive"
    for pos, slot in zip(range(start, stop), slots):
        want_k = pool.k[:, :, slot].reshape(pool.k.shape[0], -1)
        np.testing.assert_array_equal(k[:, pos - start], want_k)
        if not pool.v_is_k:
            np.testing.assert_array_equal(v[:, pos - start], pool.v[:, :, slot].reshape(pool.v.shape[0], -1))
    k0, v0 = pool.rows(sa, a).read(0, len(a))
    pool.remove(sb)
    copy = pool.add()
    pool.rows(copy, a).write(k0, v0, 0)
    k1, v1 = pool.rows(copy, a).read(0, len(a))
    np.testing.assert_array_equal(k1, k0)
    np.testing.assert_array_equal(v1, v0)


def test_rows_refuse_what_does_not_fit(tiny):
    pool = SequencePool(tiny, n_seq_max=2, n_pages=2)
    seq = pool.add()
    pool.step([(seq, _ids(tiny, 10, 2), False)])
    rows = pool.rows(seq, _ids(tiny, 10, 2))
    k, v = rows.read(0, 10)
    with pytest.raises(InvalidArgumentError, match="rows must be"):
        rows.write(k[:, :, :-1], v[:, :, :-1], 10)
    with pytest.raises(InvalidArgumentError, match="do not follow"):
        rows.write(k, v, 5)               # positions past the tokens the view was given
    with pytest.raises(InvalidArgumentError, match="not within"):
        rows.read(5, 11)


def _solo(engine, prompt, **kw):
    engine.reset()
    return engine.generate(prompt, **kw)


def test_second_turn_starts_from_the_cached_conversation(tiny):
    """Turn 2's prompt is turn 1's prompt, its answer and a new message: it is served from the cache
    (cached_tokens counted), and its text and logprobs are those of a cold run."""
    kw = dict(max_tokens=12, temperature=0.8, seed=4, logprobs=2, ignore_eos=True)
    turn1 = _ids(tiny, 90, 3)
    cache = PrefixKvCache(max_bytes=64 << 20)
    with Scheduler(tiny, n_seq_max=2, max_batch_tokens=64, prompt_cache=cache) as sched:
        h1 = sched.submit(turn1, **kw)
        c1 = h1.result(TIMEOUT)
        turn2 = turn1 + c1.tokens + _ids(tiny, 20, 4)
        h2 = sched.submit(turn2, **kw)
        c2 = h2.result(TIMEOUT)
        m = sched.metrics()
    # every position turn 1 ran is cached: its prompt and all its tokens but the last sampled one
    assert h2.stats["n_cached_prompt_tokens"] == len(turn1) + len(c1.tokens) - 1
    assert h1.stats["n_cached_prompt_tokens"] == 0
    want = _solo(tiny, turn2, **kw)
    assert (c2.tokens, str(c2), c2.logprobs) == (want.tokens, str(want), want.logprobs)
    assert c1.tokens == _solo(tiny, turn1, **kw).tokens
    assert m["prompt_cache_hits_total"] == 1 and m["prompt_cache_misses_total"] == 1
    assert m["prompt_cache_hit_tokens_total"] == h2.stats["n_cached_prompt_tokens"]
    assert m["prefix_cache_hits_total"] == h2.stats["n_cached_prompt_tokens"]
    assert 0 < m["prompt_cache_bytes"] <= m["prompt_cache_max_bytes"] == 64 << 20
    assert len(cache) == len(turn2) + len(c2.tokens) - 1


def test_a_small_budget_evicts_the_least_recently_used(tiny):
    """Under a budget for about one conversation the older one is evicted; answers stay exact."""
    kw = dict(max_tokens=4, temperature=0)
    a, b = _ids(tiny, 60, 5), _ids(tiny, 60, 6)
    probe = PrefixKvCache()
    pool = SequencePool(tiny, n_seq_max=1)
    seq = pool.add()
    pool.step([(seq, a, False)])
    probe.insert(a, pool.rows(seq, a))
    row_bytes = probe.nbytes // len(a)
    cache = PrefixKvCache(max_bytes=80 * row_bytes)
    with Scheduler(tiny, n_seq_max=1, prompt_cache=cache) as sched:
        got = [sched.submit(p, **kw).result(TIMEOUT) for p in (a, b)]
        h = sched.submit(a + [1, 2], **kw)     # a was evicted for b: a miss
        h.result(TIMEOUT)
        m = sched.metrics()
    assert [c.tokens for c in got] == [_solo(tiny, p, **kw).tokens for p in (a, b)]
    assert h.stats["n_cached_prompt_tokens"] == 0
    assert m["prompt_cache_evictions_total"] >= 1 and m["prompt_cache_bytes"] <= 80 * row_bytes
    assert cache.match(a + [1, 2]) == len(a) + 2 and cache.match(b) == 0     # the newest is kept


def test_a_finished_request_is_answered_before_its_rows_are_cached(tiny):
    """The copy of a finished request's K/V into the cache (tens of MB on a 1.7B model) happens after its
    handle is done, so a stream's last events do not wait for it; the next request still finds it."""
    import threading
    kw = dict(max_tokens=6, temperature=0.8, seed=2, ignore_eos=True)
    prompt = _ids(tiny, 40, 8)
    cache = PrefixKvCache()
    gate, copying = threading.Event(), threading.Event()
    insert = cache.insert

    def slow_insert(*args, **kwargs):
        copying.set()
        gate.wait(GATE_WAIT)      # (if the handle waited for the copy, result() below would wait this long)
        return insert(*args, **kwargs)

    cache.insert = slow_insert
    with Scheduler(tiny, n_seq_max=2, prompt_cache=cache) as sched:
        first = sched.submit(prompt, **kw).result(TIMEOUT)     # returns while the copy waits at the gate
        assert copying.wait(TIMEOUT) and len(cache) == 0
        gate.set()
        again = sched.submit(prompt + first.tokens[:3], **kw)
        again.result(TIMEOUT)
    # (all of its tokens but the last, whose logits it needs)
    assert again.stats["n_cached_prompt_tokens"] == len(prompt) + 2


def test_prompt_cache_argument_is_checked(tiny):
    with pytest.raises(InvalidArgumentError, match="prompt_cache"):
        Scheduler(tiny, prompt_cache=object())
