"""End-to-end speed of the engine on the two real models (pytest-benchmark).

    pytest bench/bench_engine.py --benchmark-only

Prefill: a 512-token prompt from an empty cache. Decode: one greedy token after a short prompt and
after a 1,024-token prompt. tokens/s is in each benchmark's extra_info.
"""
import numpy as np
import pytest

from oxillama import hub
from oxillama.runtime import InferenceEngine

MODELS = ["smollm2-135m", "gemma3-270m"]


def _ids(engine, n):
    ids = [(1000 + 7919 * i) % min(engine.n_vocab, 30000) + 100 for i in range(n)]
    if engine.tokenizer.bos_id is not None:
        ids[0] = engine.tokenizer.bos_id
    return ids


@pytest.fixture(scope="module", params=MODELS)
def engine(request):
    with InferenceEngine.from_gguf(hub.pull(request.param, progress=False), n_ctx=1200) as e:
        e.forward(_ids(e, 8))
        e.reset()
        yield e


def test_prefill_512(benchmark, engine):
    ids = _ids(engine, 512)

    def run():
        engine.reset()
        engine.forward(ids)

    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info["tokens_per_s"] = 512 / benchmark.stats.stats.median


@pytest.mark.parametrize("n_prompt", [16, 1024])
def test_decode(benchmark, engine, n_prompt):
    engine.reset()
    logits = engine.forward(_ids(engine, n_prompt))
    state = {"tok": int(np.argmax(logits))}

    def step():
        if engine.n_past >= engine.n_ctx - 1:
            engine.truncate(n_prompt)
        state["tok"] = int(np.argmax(engine.forward([state["tok"]])))

    benchmark.pedantic(step, rounds=64, iterations=1, warmup_rounds=2)
    benchmark.extra_info["tokens_per_s"] = 1 / benchmark.stats.stats.median


@pytest.mark.parametrize("model", MODELS)
def test_decode_1k_vs_short_interleaved(benchmark, model):
    """Decode after 1,024 cached positions against decode after 16, tokens alternated between two
    engines so that both see the same machine (issue 10 asks for >= 0.75). extra_info["ratio"] is the
    median 1k token time's inverse over the short one's."""
    import time

    path = hub.pull(model, progress=False)
    with InferenceEngine.from_gguf(path, n_ctx=1200) as short, InferenceEngine.from_gguf(path, n_ctx=1200) as long:
        state = {}
        for name, e, n in (("short", short, 16), ("long", long, 1024)):
            state[name] = int(np.argmax(e.forward(_ids(e, n))))
        times = {"short": [], "long": []}

        def pair():
            for name, e, n in (("short", short, 16), ("long", long, 1024)):
                if e.n_past >= n + 128:   # stay near the position the benchmark is about
                    e.truncate(n)
                t = time.perf_counter()
                state[name] = int(np.argmax(e.forward([state[name]])))
                times[name].append(time.perf_counter() - t)

        benchmark.pedantic(pair, rounds=96, iterations=1, warmup_rounds=2)
    s, l = np.median(times["short"]), np.median(times["long"])
    benchmark.extra_info.update(short_tokens_per_s=1 / s, long_tokens_per_s=1 / l, ratio=s / l)
