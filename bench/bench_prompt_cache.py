"""The prompt cache (`oxillama serve --cache-ram`) on the two real models (pytest-benchmark).

    pytest bench/bench_prompt_cache.py --benchmark-only

A request with a 1,000-token prefix runs and finishes; a second request with the same prefix and 20 new
tokens then arrives. Its time to first token with the prefix served from the cache ("warm") against the
same request on a scheduler without a cache ("cold"), the two alternated round by round on fresh
schedulers so both see the same machine; extra_info["warm_over_cold"] (median TTFT ratio) and the
cached tokens the warm request reported.
"""
import pytest

from oxillama import hub
from oxillama.runtime import InferenceEngine, PrefixKvCache
from oxillama.runtime.scheduler import Scheduler

MODELS = ["smollm2-135m", "gemma3-270m"]
N_PREFIX, N_NEW, ROUNDS = 1000, 20, 3


def _ids(engine, n, salt):
    ids = [(1000 + 7919 * (j + 31 * salt)) % min(engine.n_vocab, 30000) + 100 for j in range(n)]
    if salt == 0 and engine.tokenizer.bos_id is not None:
        ids[0] = engine.tokenizer.bos_id
    return ids


@pytest.mark.parametrize("model", MODELS)
def test_ttft_second_request_sharing_a_1000_token_prefix(benchmark, model):
    with InferenceEngine.from_gguf(hub.pull(model, progress=False), n_ctx=1100) as engine:
        prefix = _ids(engine, N_PREFIX, 0)
        first, second = prefix + _ids(engine, N_NEW, 1), prefix + _ids(engine, N_NEW, 2)
        ttft = {"cold": [], "warm": []}
        cached = []

        def second_ttft(cache):
            with Scheduler(engine, n_seq_max=2, max_batch_tokens=512, prompt_cache=cache) as sched:
                sched.submit(first, max_tokens=4, temperature=0).result()     # finished: only the cache holds it
                h = sched.submit(second, max_tokens=1, temperature=0)
                h.result()
            return h.stats

        def pair():
            ttft["cold"].append(second_ttft(None)["time_to_first_token"])
            stats = second_ttft(PrefixKvCache(max_bytes=1 << 30))
            ttft["warm"].append(stats["time_to_first_token"])
            cached.append(stats["n_cached_prompt_tokens"])

        benchmark.pedantic(pair, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    med = {k: sorted(v)[len(v) // 2] for k, v in ttft.items()}
    benchmark.extra_info["ttft_cold_s"] = med["cold"]
    benchmark.extra_info["ttft_warm_s"] = med["warm"]
    benchmark.extra_info["warm_over_cold"] = med["warm"] / med["cold"]
    benchmark.extra_info["cached_tokens"] = cached[-1]
