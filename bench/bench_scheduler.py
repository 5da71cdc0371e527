"""Continuous batching on the two real models (pytest-benchmark).

    pytest bench/bench_scheduler.py --benchmark-only

- Aggregate decode tokens/s of 8 concurrent sequences against 1 (ignore_eos, fixed max_tokens), the
  two runs alternated round by round so both see the same machine; extra_info["ratio_8_vs_1"]
  (issue 15 asks >= 2x on SmolLM2 and >= 3.5x on Gemma 3 once the C batched forward lands).
- The scheduler's Python overhead per step at 8 sequences: the share of each step's time spent outside
  pool.step() (planning, sampling, detokenizing, stop strings, handles); extra_info["overhead_frac"]
  (issue 15 asks < 5% of a decode step).
"""
import time

import pytest

from oxillama import hub
from oxillama.runtime import InferenceEngine
from oxillama.runtime.scheduler import Scheduler

MODELS = ["smollm2-135m", "gemma3-270m"]
N_PROMPT = 16
MAX_TOKENS = 32


def _prompt(engine, i):
    ids = [(1000 + 7919 * (j + 31 * i)) % min(engine.n_vocab, 30000) + 100 for j in range(N_PROMPT)]
    if engine.tokenizer.bos_id is not None:
        ids[0] = engine.tokenizer.bos_id
    return ids


@pytest.fixture(scope="module", params=MODELS)
def engine(request):
    with InferenceEngine.from_gguf(hub.pull(request.param, progress=False), n_ctx=256) as e:
        e.forward(_prompt(e, 0))
        e.reset()
        yield e


def _decode_run(sched, engine, n_seq):
    """Aggregate decode tokens/s of n_seq requests submitted together: tokens after each one's first,
    over the time from the first first token to the last finish."""
    t0 = time.perf_counter()
    handles = [sched.submit(_prompt(engine, i), max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
               for i in range(n_seq)]
    for h in handles:
        h.result()
    first = min(h.stats["time_to_first_token"] for h in handles)
    last = max(h.stats["e2e_latency"] for h in handles)
    n_decoded = sum(h.stats["n_generated_tokens"] - 1 for h in handles)
    return n_decoded / (last - first), time.perf_counter() - t0


def test_decode_8_vs_1(benchmark, engine):
    rates = {1: [], 8: []}
    with Scheduler(engine, n_seq_max=8) as sched:
        def pair():
            for n_seq in (1, 8):
                rates[n_seq].append(_decode_run(sched, engine, n_seq)[0])

        benchmark.pedantic(pair, rounds=2, iterations=1, warmup_rounds=1)
    med = {n: sorted(r)[len(r) // 2] for n, r in rates.items()}
    benchmark.extra_info["tokens_per_s_1"] = med[1]
    benchmark.extra_info["tokens_per_s_8"] = med[8]
    benchmark.extra_info["ratio_8_vs_1"] = med[8] / med[1]


def test_step_overhead_8_sequences(benchmark, engine):
    with Scheduler(engine, n_seq_max=8) as sched:
        _decode_run(sched, engine, 8)        # warm-up
        before = sched.metrics()
        benchmark.pedantic(lambda: _decode_run(sched, engine, 8), rounds=2, iterations=1)
        after = sched.metrics()
    steps = after["num_steps_total"] - before["num_steps_total"]
    step_s = after["step_time_total"] - before["step_time_total"]
    forward_s = after["forward_time_total"] - before["forward_time_total"]
    benchmark.extra_info["steps"] = steps
    benchmark.extra_info["step_ms"] = 1e3 * step_s / steps
    benchmark.extra_info["forward_ms"] = 1e3 * forward_s / steps
    benchmark.extra_info["overhead_ms"] = 1e3 * (step_s - forward_s) / steps
    benchmark.extra_info["overhead_frac"] = (step_s - forward_s) / step_s


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("max_batch_tokens,max_decode_slowdown", [(64, None), (256, None), (256, 2.5)])
def test_fairness_long_prefill_among_decodes(benchmark, model, max_batch_tokens, max_decode_slowdown):
    """4 decoding requests, then a 2,000-token prompt arrives: the decodes' p95 inter-token latency
    while it is prefilled, over their unloaded median (issue 15 asks < 3x), and the long prompt's time to
    first token (what the decodes' smoothness costs it). extra_info["p95_over_median"]."""
    with InferenceEngine.from_gguf(hub.pull(model, progress=False), n_ctx=2100) as engine:
        long_prompt = [(1000 + 7919 * j) % min(engine.n_vocab, 30000) + 100 for j in range(2000)]
        out = {}

        def run():
            with Scheduler(engine, n_seq_max=5, max_batch_tokens=max_batch_tokens,
                           max_decode_slowdown=max_decode_slowdown) as sched:
                decodes = [sched.submit(_prompt(engine, i), max_tokens=2000, temperature=0, ignore_eos=True)
                           for i in range(4)]
                while min(h.stats["n_generated_tokens"] for h in decodes) < 12:
                    time.sleep(0.01)
                unloaded = [len(h.stats["inter_token_latencies"]) for h in decodes]
                long = sched.submit(long_prompt, max_tokens=1)
                long.result()
                for h in decodes:
                    h.cancel()
                itl_free = sorted(x for h, n in zip(decodes, unloaded) for x in h.stats["inter_token_latencies"][2:n])
                itl_load = sorted(x for h, n in zip(decodes, unloaded) for x in h.stats["inter_token_latencies"][n:])
                out["median_unloaded_ms"] = 1e3 * itl_free[len(itl_free) // 2]
                out["p95_loaded_ms"] = 1e3 * itl_load[int(0.95 * (len(itl_load) - 1))]
                out["long_prompt_ttft_s"] = long.stats["time_to_first_token"]

        benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(out)
    benchmark.extra_info["p95_over_median"] = out["p95_loaded_ms"] / out["median_unloaded_ms"]
