"""Session state costs on SmolLM2 (pytest-benchmark).

    pytest bench/bench_state.py --benchmark-only

Time to first token of a chat turn that resends a long history (HISTORY_TOKENS tokens + a short
new turn): with the engine keeping the shared prefix in its own cache, with the prefix restored
from a PrefixKvCache after another request replaced the cache, and with reuse off (full prefill).
Snapshots: blob size, snapshot()+save() and load time against the number of cached positions; the
sizes are in each benchmark's extra_info (kv_bytes, blob_bytes).
"""
import pytest

from oxillama import hub
from oxillama.runtime import ContiguousKVCache, InferenceEngine, PrefixKvCache

HISTORY_TOKENS = 1000
TURN_TOKENS = 24
SNAPSHOT_POSITIONS = [64, 256, 1024]


def _ids(engine, n, offset=0):
    return [(1000 + 7919 * (i + offset)) % 30000 + 100 for i in range(n)]


@pytest.fixture(scope="module")
def engine():
    path = hub.pull("smollm2-135m", progress=False)
    with InferenceEngine.from_gguf(path, n_ctx=HISTORY_TOKENS + 2 * TURN_TOKENS + 8) as e:
        yield e


@pytest.mark.parametrize("mode", ["session_reuse", "prefix_cache", "no_reuse"])
def test_chat_turn_time_to_first_token(benchmark, engine, mode):
    history = _ids(engine, HISTORY_TOKENS)
    prompt = history + _ids(engine, TURN_TOKENS, offset=HISTORY_TOKENS)
    engine.reset()
    engine.prefix_cache = None
    engine.forward(history)                   # the previous turn
    stored = ContiguousKVCache.like(engine.kv)
    stored.write(*engine.kv.read(0, engine.kv.n_past), 0)   # the history's K/V, kept aside for the prefix cache

    def setup():
        engine.reuse_prefix = mode != "no_reuse"
        engine.prefix_cache = None
        if mode == "session_reuse":
            engine.truncate(HISTORY_TOKENS)     # the cache holds the history, as after the last turn
        else:
            engine.reset()                      # another request took the cache
        if mode == "prefix_cache":
            engine.prefix_cache = PrefixKvCache()
            engine.prefix_cache.insert(history, stored)

    def first_token():
        engine.generate(prompt, max_tokens=1, temperature=0)

    if mode == "session_reuse":
        engine.generate(prompt, max_tokens=1, temperature=0)   # so truncate() has the history to keep
    try:
        benchmark.pedantic(first_token, setup=setup, rounds=3, iterations=1)
    finally:
        engine.reuse_prefix = True
        engine.prefix_cache = None
    benchmark.extra_info["prompt_tokens"] = len(prompt)
    benchmark.extra_info["tokens_run"] = len(prompt) - engine.last_prefix_reused


@pytest.fixture(scope="module", params=SNAPSHOT_POSITIONS)
def filled(request, engine):
    engine.reset()
    engine.forward(_ids(engine, request.param))
    return engine


def test_snapshot_save(benchmark, filled, tmp_path):
    path = tmp_path / "s.oxs"
    benchmark.pedantic(filled.save, args=(path,), rounds=5, iterations=1)
    benchmark.extra_info["positions"] = filled.n_past
    benchmark.extra_info["kv_bytes"] = filled.kv.bytes_per_token * filled.n_past
    benchmark.extra_info["blob_bytes"] = path.stat().st_size


def test_snapshot_load(benchmark, filled, tmp_path):
    path = tmp_path / "s.oxs"
    filled.save(path)
    benchmark.pedantic(filled.load_snapshot, args=(path,), rounds=5, iterations=1)
    benchmark.extra_info["positions"] = filled.n_past
    benchmark.extra_info["blob_bytes"] = path.stat().st_size
