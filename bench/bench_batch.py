"""Many sequences in one forward (oxillama.runtime.batch.SequencePool) on the two real models.

    pytest bench/bench_batch.py --benchmark-only
    python bench/bench_batch.py [-m MODEL ...] [-t THREADS] [--steps 24]     # 8 sequences vs 1, no pytest

Each benchmark alternates the cases it compares step by step in one process, so that both see the same
machine, and puts the medians and their ratio in extra_info:
- batched decode: aggregate tokens/s of B sequences decoding together against one sequence (and against
  the same model's prefill tokens/s, the ceiling a step over the weights can reach);
- verify: a 5-token forward after a 64-token prefix against a 1-token forward (speculative decoding's cost);
- kv types: decode after 1,024 positions with a Q8_0 cache against f16.

Run as a script it prints, per model (default: SmolLM2-135M and the 1.7B Q4_0 / Q4_K_M files of
bench/real_size_models.py where they exist), 8 sequences decoding together against one: steps of 1 and of 8
alternated in one process, medians, the aggregate tokens/s ratio (issue 35: >= 5x on the 1.7B model), and a
512-token prefill's tokens/s in the same process (the ceiling a step over the weights can reach).
"""
import argparse
import os
import sys
import time

import numpy as np
import pytest

from oxillama import hub
from oxillama.runtime import InferenceEngine
from oxillama.runtime.batch import SequencePool

MODELS = ["smollm2-135m", "gemma3-270m"]
N_PROMPT = 16


def spread_ids(engine, n, seed=0):
    """n token ids spread over the vocabulary, the same for a seed"""
    return [(1000 + 7919 * (i + 31 * seed)) % min(engine.n_vocab, 30000) + 100 for i in range(n)]


@pytest.fixture(scope="module", params=MODELS)
def engine(request):
    with InferenceEngine.from_gguf(hub.pull(request.param, progress=False), n_ctx=1200) as e:
        yield e


def decoding_pool(engine, n_seq, n_ctx=256):
    """(pool, its n_seq sequences after their prompts, each one's next token)"""
    pool = SequencePool(engine, n_seq, n_ctx=n_ctx)
    seqs = [pool.add() for _ in range(n_seq)]
    out = pool.step([(s, spread_ids(engine, N_PROMPT, seed=i), False) for i, s in enumerate(seqs)])
    return pool, seqs, [int(np.argmax(o)) for o in out]


def alternated_steps(cases: dict, times: dict):
    """A function running one decode step of each case (n -> decoding_pool(engine, n)) in turn, each step's
    wall time appended to times[n]; a pool's sequences go back to their prompts after 200 positions."""
    def pair():
        for n, (pool, seqs, toks) in cases.items():
            if pool.n_past(seqs[0]) >= 200:
                for s in seqs:
                    pool.truncate(s, N_PROMPT)
            t = time.perf_counter()
            out = pool.step([(s, [tok], False) for s, tok in zip(seqs, toks)])
            times[n].append(time.perf_counter() - t)
            toks[:] = [int(np.argmax(o)) for o in out]
    return pair


@pytest.mark.parametrize("n_seq", [2, 4, 8])
def test_batched_decode_vs_one(benchmark, engine, n_seq):
    """One step of n_seq sequences against one step of 1, alternated; extra_info["speedup"] is the aggregate
    tokens/s of the batch over the single sequence's tokens/s (issue 15: >= 2x SmolLM2, >= 3.5x Gemma 3 at 8)."""
    times = {1: [], n_seq: []}
    pair = alternated_steps({1: decoding_pool(engine, 1), n_seq: decoding_pool(engine, n_seq)}, times)
    benchmark.pedantic(pair, rounds=48, iterations=1, warmup_rounds=2)
    t1, tn = np.median(times[1]), np.median(times[n_seq])
    # prefill tokens/s in the same run: the ceiling of a step that reads the weights once
    engine.reset()
    prompt = spread_ids(engine, 512)
    t = time.perf_counter()
    engine.forward(prompt)
    prefill = 512 / (time.perf_counter() - t)
    benchmark.extra_info.update(one_tokens_per_s=1 / t1, batch_tokens_per_s=n_seq / tn, speedup=t1 * n_seq / tn,
                                prefill_tokens_per_s=prefill, share_of_prefill=n_seq / tn / prefill)


def test_verify_5_vs_1(benchmark, engine):
    """A 5-token forward after a 64-token prefix against a 1-token forward (issue 15: <= 1.8x)."""
    prefix = spread_ids(engine, 64)
    times = {1: [], 5: []}

    def pair():
        for k in (1, 5):
            engine.reset()
            engine.forward(prefix)
            t = time.perf_counter()
            engine.forward(spread_ids(engine, k, seed=1), all_logits=True)
            times[k].append(time.perf_counter() - t)

    benchmark.pedantic(pair, rounds=24, iterations=1, warmup_rounds=2)
    benchmark.extra_info.update(cost_ratio=np.median(times[5]) / np.median(times[1]))


@pytest.mark.parametrize("model", MODELS)
def test_decode_1k_q8_0_vs_f16(benchmark, model):
    """Decode after 1,024 positions with a Q8_0 KV cache against f16, tokens alternated between two engines
    (issue 15: Q8_0 at least as fast). extra_info["speedup"]: f16 token time over Q8_0's."""
    path = hub.pull(model, progress=False)
    with InferenceEngine.from_gguf(path, n_ctx=1200) as f16, \
            InferenceEngine.from_gguf(path, n_ctx=1200, type_k="q8_0", type_v="q8_0") as q8:
        state = {name: int(np.argmax(e.forward(spread_ids(e, 1024)))) for name, e in (("f16", f16), ("q8_0", q8))}
        times = {"f16": [], "q8_0": []}

        def pair():
            for name, e in (("f16", f16), ("q8_0", q8)):
                if e.n_past >= 1024 + 128:
                    e.truncate(1024)
                t = time.perf_counter()
                state[name] = int(np.argmax(e.forward([state[name]])))
                times[name].append(time.perf_counter() - t)

        benchmark.pedantic(pair, rounds=64, iterations=1, warmup_rounds=2)
    f, q = np.median(times["f16"]), np.median(times["q8_0"])
    benchmark.extra_info.update(f16_tokens_per_s=1 / f, q8_0_tokens_per_s=1 / q, speedup=f / q)


def batch_vs_one(path: str, threads: int, n_seq: int = 8, steps: int = 24) -> dict:
    """Medians of alternated 1-sequence and n_seq-sequence decode steps (and a 512-token prefill's tokens/s).
    With 1 thread the steps' CPU time is measured too (the forward runs on this thread): on a machine shared
    with other work, its ratio holds much steadier than the wall one."""
    with InferenceEngine.from_gguf(path, n_ctx=1200, n_threads=threads) as engine:
        one, many = decoding_pool(engine, 1), decoding_pool(engine, n_seq)
        times, cpu = {1: [], n_seq: []}, {1: [], n_seq: []}
        for _ in range(steps + 2):
            for n, (pool, seqs, toks) in ((1, one), (n_seq, many)):
                c, t = time.thread_time(), time.perf_counter()
                out = pool.step([(s, [tok], False) for s, tok in zip(seqs, toks)])
                times[n].append(time.perf_counter() - t)
                cpu[n].append(time.thread_time() - c)
                toks[:] = [int(np.argmax(o)) for o in out]
        t1, tn = np.median(times[1][2:]), np.median(times[n_seq][2:])
        c1, cn = np.median(cpu[1][2:]), np.median(cpu[n_seq][2:])
        engine.reset()
        engine.forward(spread_ids(engine, 64))
        engine.reset()
        t = time.perf_counter()
        engine.forward(spread_ids(engine, 512))
        prefill = 512 / (time.perf_counter() - t)
    f = {"one_tokens_per_s": 1 / t1, "batch_tokens_per_s": n_seq / tn, "speedup": t1 * n_seq / tn,
         "prefill_tokens_per_s": prefill}
    if threads == 1:
        f["cpu_speedup"] = c1 * n_seq / cn
    return f


def main(argv=None) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from real_size_models import model_path
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF path or known model name (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=24, help="steps of each kind, alternated")
    ap.add_argument("--dir", default=os.environ.get("OXILLAMA_BENCH_MODELS", "/work/models"))
    args = ap.parse_args(argv)
    models = args.model or ["smollm2-135m"] + [str(p) for p in (model_path(args.dir, q) for q in ("Q4_0", "Q4_K_M"))
                                                if p.exists()]
    print(f"8 sequences vs 1, {args.threads} threads, medians of {args.steps} alternated steps")
    for m in models:
        f = batch_vs_one(str(hub.resolve_model(m)), args.threads, 8, args.steps)
        cpu = f"  (CPU time: {f['cpu_speedup']:.2f}x)" if "cpu_speedup" in f else ""
        print(f"{os.path.basename(m):36s} 1 seq {f['one_tokens_per_s']:7.1f} tok/s   8 seqs {f['batch_tokens_per_s']:7.1f} "
              f"tok/s: {f['speedup']:.2f}x{cpu}   (prefill {f['prefill_tokens_per_s']:.1f} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
