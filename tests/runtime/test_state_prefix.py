"""Prompt-prefix reuse: PrefixKvCache (radix tree, LRU under a byte budget, counters) and the engine
running only the part of a prompt that is not cached yet."""
import numpy as np
import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.runtime import ContiguousKVCache, InferenceEngine, PrefixKvCache

N_LAYER, KV_DIM, N_CTX = 2, 4, 64
SYSTEM_PROMPT_TOKENS = 1000


def kv_rows(tokens):
    """Stand-in K/V where row p depends on tokens[0..p], as causal attention's do (exact in f32)."""
    prefix_sums = np.cumsum(np.asarray(tokens, dtype=np.float64) + 1)
    k = prefix_sums[None, :, None] + 0.5 * np.arange(N_LAYER)[:, None, None] + 0.25 * np.arange(KV_DIM)
    k = k.astype(np.float32)
    return k, -k


def filled(tokens):
    c = ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, "f32")
    if len(tokens):
        c.write(*kv_rows(tokens), 0)
    return c


def assert_holds(cache, tokens):
    k, v = cache.read()
    want_k, want_v = kv_rows(tokens)
    np.testing.assert_array_equal(k, want_k)
    np.testing.assert_array_equal(v, want_v)


def test_restore_gives_the_longest_cached_prefix():
    pc = PrefixKvCache()
    a = [5, 6, 7, 8, 9, 10]
    b = [5, 6, 7, 20, 21]          # splits a's edge after 3 tokens
    assert pc.insert(a, filled(a)) == 6
    assert pc.insert(b, filled(b)) == 2
    assert len(pc) == 8             # the shared [5, 6, 7] is stored once
    assert pc.match([5, 6, 7, 8, 99]) == 4
    assert pc.match([5, 6, 1]) == 2
    assert pc.match([4]) == 0
    for query, n in (([5, 6, 7, 20, 21, 22, 23], 5), ([5, 6, 7, 8, 9, 1], 5), ([5, 6, 2], 2)):
        dest = filled([])
        assert pc.restore(query, dest) == n
        assert dest.n_past == n
        assert_holds(dest, query[:n])
    assert pc.stats.hits == 3 and pc.stats.misses == 0 and pc.stats.hit_tokens == 12
    assert pc.restore([1, 2, 3], filled([])) == 0
    assert pc.stats.misses == 1


def test_restore_after_start_keeps_the_destination_prefix():
    pc = PrefixKvCache()
    a = list(range(10, 40))
    pc.insert(a, filled(a))
    dest = filled(a[:12] + [99, 98])    # the engine's own cache agrees on 12 tokens
    assert pc.restore(a[:25], dest, start=12) == 25
    assert_holds(dest, a[:25])
    assert pc.stats.hit_tokens == 13
    # nothing cached past start: a miss, dest truncated to start
    dest = filled([10, 11, 12])
    assert pc.restore([10, 11, 12, 77], dest, start=3) == 3 and dest.n_past == 3
    with pytest.raises(InvalidArgumentError):
        pc.restore(a, filled(a[:2]), start=5)


def test_insert_reads_only_new_positions_from_its_source():
    a = list(range(1, 23))
    seq = filled(a)
    pc = PrefixKvCache()
    assert pc.insert(a[:10], seq) == 10
    assert pc.insert(a, seq) == 12
    assert pc.insert(a, seq) == 0
    dest = filled([])
    assert pc.restore(a + [1], dest) == 22
    assert_holds(dest, a)
    with pytest.raises(InvalidArgumentError, match="holds 22 positions"):
        pc.insert(a + [1, 2], seq)


def test_lru_eviction_keeps_the_budget_and_shared_prefixes():
    row_bytes = 2 * N_LAYER * KV_DIM * 4
    system = list(range(100, 120))                 # 20 shared tokens
    pc = PrefixKvCache(max_bytes=40 * row_bytes)
    users = [system + [i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7] for i in range(0, 80, 8)]
    pc.insert(users[0], filled(users[0]))
    pc.insert(users[1], filled(users[1]))
    pc.restore(users[0], filled([]))              # users[0] is now more recent than users[1]
    pc.insert(users[2], filled(users[2]))         # 20 + 3 * 8 = 44 rows > 40: evict the LRU leaf
    assert pc.nbytes <= pc.max_bytes
    assert pc.match(users[1]) == 20 and pc.match(users[0]) == 28 and pc.match(users[2]) == 28
    assert pc.stats.evicted_tokens == 8
    for u in users[3:]:
        pc.insert(u, filled(u))
        assert pc.nbytes <= pc.max_bytes
    assert pc.match(system) == 20                 # the shared prefix survives every eviction
    assert pc.match(users[-1]) == 28
    # an entry larger than the whole budget is not kept
    big = PrefixKvCache(max_bytes=5 * row_bytes)
    big.insert(users[0], filled(users[0]))
    assert big.nbytes == 0 and big.match(users[0]) == 0


def test_layout_mismatch_and_bad_arguments():
    pc = PrefixKvCache()
    pc.insert([1, 2], filled([1, 2]))
    other = ContiguousKVCache(N_LAYER, N_CTX, KV_DIM, "f16")
    other.write(*(a.astype(np.float16) for a in kv_rows([1, 2, 3])), 0)
    with pytest.raises(InvalidArgumentError, match="layout"):
        pc.insert([1, 2, 3], other)
    with pytest.raises(InvalidArgumentError):
        PrefixKvCache(max_bytes=-1)
    with pytest.raises(InvalidArgumentError):
        pc.match([[1, 2]])


# ---- the engine ----

@pytest.fixture(scope="module")
def engine_with_cache(smollm2_path):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=SYSTEM_PROMPT_TOKENS + 128, n_threads=2,
                                   prefix_cache=PrefixKvCache()) as engine:
        yield engine


def _system_prompt(engine, n):
    text = " ".join(f"Rule {i}: answer politely, briefly and truthfully about topic number {i}." for i in range(120))
    ids = engine.tokenize("You are a helpful assistant. " + text)
    assert len(ids) >= n
    return ids[:n]


def test_session_prefix_reuse_gives_the_same_tokens(smollm2):
    """A second prompt sharing a prefix runs only the rest, and the completion is exactly what a
    fresh run gives (the kept K/V rows are the ones a full prefill would write)."""
    smollm2.reset()
    first = smollm2.tokenize("The history of Rome begins with a small village on the Tiber. Its first kings")
    second = smollm2.tokenize("The history of Rome begins with a small village on the Tiber. Later, the republic")
    smollm2.generate(first, max_tokens=4, temperature=0)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    before = smollm2.n_tokens_run
    reused_text = smollm2.generate(second, max_tokens=6, temperature=0)
    assert smollm2.last_prefix_reused == shared
    assert smollm2.n_tokens_run - before == len(second) - shared + 5    # suffix + 5 decoded tokens
    reused_tokens = smollm2.tokens
    smollm2.reset()
    assert smollm2.generate(second, max_tokens=6, temperature=0) == reused_text
    assert smollm2.tokens == reused_tokens
    # the same prompt again: everything but its last token is kept
    before = smollm2.n_tokens_run
    smollm2.generate(second, max_tokens=1, temperature=0)
    assert smollm2.n_tokens_run - before == 1
    # reuse off: the whole prompt runs
    smollm2.reuse_prefix = False
    try:
        before = smollm2.n_tokens_run
        smollm2.generate(second, max_tokens=1, temperature=0)
        assert smollm2.n_tokens_run - before == len(second)
    finally:
        smollm2.reuse_prefix = True


def test_shared_1000_token_system_prompt_prefills_only_the_suffix(engine_with_cache):
    e = engine_with_cache
    e.reset()
    system = _system_prompt(e, SYSTEM_PROMPT_TOKENS)
    turns = [e.tokenize(q, add_special=False) for q in
             ("\nWhat is the capital of France?", "\nName a red fruit.", "\nHow many legs has a cat?")]
    shared_turn = [next(i for i, (a, b) in enumerate(zip(t, turns[0])) if a != b) for t in turns[1:]]
    counts = []
    for t in turns[:2]:
        before = e.n_tokens_run
        e.generate(system + t, max_tokens=1, temperature=0)   # one sampled token: nothing decoded after
        counts.append(e.n_tokens_run - before)
    assert counts[0] == SYSTEM_PROMPT_TOKENS + len(turns[0])
    assert counts[1] == len(turns[1]) - shared_turn[0]         # the rest was kept in the session's cache
    # another request in between replaces the session's cache; the prefix cache still has the system prompt
    e.generate("Unrelated short request", max_tokens=1, temperature=0)
    hits = e.prefix_cache.stats.hits
    before = e.n_tokens_run
    e.generate(system + turns[2], max_tokens=1, temperature=0)
    assert e.n_tokens_run - before == len(turns[2]) - shared_turn[1]
    assert e.last_prefix_reused == SYSTEM_PROMPT_TOKENS + shared_turn[1]
    assert e.prefix_cache.stats.hits == hits + 1
    assert e.prefix_cache.match(system) == SYSTEM_PROMPT_TOKENS


def test_random_prompts_restore_the_longest_inserted_prefix():
    """Against brute force: with no eviction, restore() gives the longest common prefix with any
    inserted prompt, and the rows are exactly that prefix's."""
    rng = np.random.default_rng(3)
    pc = PrefixKvCache()
    inserted = []
    for _ in range(60):
        base = inserted[int(rng.integers(len(inserted)))] if inserted and rng.random() < 0.7 else []
        cut = int(rng.integers(0, len(base) + 1))
        prompt = list(base[:cut]) + rng.integers(0, 4, int(rng.integers(1, 12))).tolist()
        if rng.random() < 0.5:
            pc.insert(prompt, filled(prompt))
            inserted.append(prompt)
        want = max((_common(prompt, p) for p in inserted), default=0)
        assert pc.match(prompt) == want
        dest = filled([])
        assert pc.restore(prompt, dest) == want
        assert_holds(dest, prompt[:want])
    assert len(pc) <= sum(len(p) for p in inserted)


def _common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
