"""A sparse mixture of experts at a real size: the random qwen3moe of bench/make_moe_model.py (1.3 B parameters,
64 experts of which 8 per token, Q4_K_M).

    python bench/make_moe_model.py          # once: /work/models/qwen3moe-1.3b.Q4_K_M.gguf
    pytest bench/bench_moe.py --benchmark-only

- decode: tokens/s, the bytes a token reads (attention, router, 8 experts per layer, one embedding row, the
  output matrix) and their product against the read bandwidth measured in the same run (issue 29: >= 70%);
- 8 sequences decoding together against one (issue 29: >= 3x the tokens/s in all).
Against llama.cpp on the same file: `python bench/compare_llamacpp.py -m /work/models/qwen3moe-1.3b.Q4_K_M.gguf`.
"""
import os
import time

import numpy as np
import pytest

from bench_batch import alternated_steps, decoding_pool, spread_ids  # bench/bench_batch.py
from oxillama.gguf import GGUFFile
from oxillama.runtime import InferenceEngine

MODEL = os.environ.get("OXILLAMA_MOE_MODEL", "/work/models/qwen3moe-1.3b.Q4_K_M.gguf")
N_PROMPT = 16


def bytes_per_token(path: str) -> int:
    """Weight bytes one decoded token reads: every non-expert tensor but the embedding table, n_used / n_expert
    of the stacked experts, one embedding row."""
    with GGUFFile(path) as g:
        arch = g.architecture
        n_expert, n_used = g.metadata[f"{arch}.expert_count"], g.metadata[f"{arch}.expert_used_count"]
        total = 0
        for t in g.tensors.values():
            if t.name == "token_embd.weight":
                total += t.nbytes // t.shape[0]
            elif "_exps." in t.name:
                total += t.nbytes * n_used // n_expert
            else:
                total += t.nbytes
        return total


@pytest.fixture(scope="module")
def engine():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run bench/make_moe_model.py")
    with InferenceEngine.from_gguf(MODEL, n_ctx=512) as e:
        yield e


def test_decode_bandwidth(benchmark, engine, mem_read_bandwidth):
    engine.reset()
    tok = int(np.argmax(engine.forward(spread_ids(engine, N_PROMPT))))
    times = []

    def step():
        nonlocal tok
        t = time.perf_counter()
        tok = int(np.argmax(engine.forward([tok])))
        times.append(time.perf_counter() - t)

    benchmark.pedantic(step, rounds=64, iterations=1, warmup_rounds=4)
    tps = 1 / float(np.median(times))
    nbytes = bytes_per_token(MODEL)
    bw = mem_read_bandwidth[min(engine.n_threads, max(mem_read_bandwidth))]
    benchmark.extra_info.update(tokens_per_s=tps, bytes_per_token=nbytes, weight_gb_per_s=tps * nbytes / 1e9,
                                read_bandwidth_gb_per_s=bw, share_of_bandwidth=tps * nbytes / 1e9 / bw)


def test_8_sequences_vs_one(benchmark, engine):
    times = {1: [], 8: []}
    pair = alternated_steps({1: decoding_pool(engine, 1), 8: decoding_pool(engine, 8)}, times)
    benchmark.pedantic(pair, rounds=32, iterations=1, warmup_rounds=2)
    t1, t8 = np.median(times[1]), np.median(times[8])
    benchmark.extra_info.update(one_tokens_per_s=1 / t1, batch_tokens_per_s=8 / t8, speedup=t1 * 8 / t8)
