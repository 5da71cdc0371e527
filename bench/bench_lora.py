"""The cost of LoRA adapters in decode (issue 18: rank 16 on every projection of SmolLM2 <= 15% slower).

    pytest bench/bench_lora.py --benchmark-only

Two engines on the same model, one with a random rank-16 adapter on every attention and FFN projection,
tokens alternated between them; extra_info["slowdown"] is the adapted token time over the plain one.
"""
import time

import numpy as np
import pytest

from oxillama import hub
from oxillama.lora import LoraAdapter
from oxillama.runtime import InferenceEngine

PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def random_adapter(engine, rank, seed=0):
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, t in engine.gguf.tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in PROJECTIONS:
            rows, cols = t.shape
            # float16 values, as adapter files hold them (an F32 file's adapter is kept, and read, as F32)
            tensors[name] = ((rng.standard_normal((rank, cols)) * 0.01).astype(np.float16).astype(np.float32),
                             (rng.standard_normal((rows, rank)) * 0.01).astype(np.float16).astype(np.float32))
    return LoraAdapter(tensors, arch=engine.config.arch)


@pytest.mark.parametrize("model", ["smollm2-135m"])
@pytest.mark.parametrize("rank", [16])
def test_decode_with_adapter_vs_plain(benchmark, model, rank):
    path = hub.pull(model, progress=False)
    with InferenceEngine.from_gguf(path, n_ctx=512) as plain, InferenceEngine.from_gguf(path, n_ctx=512) as adapted:
        adapted.add_lora(random_adapter(adapted, rank))
        ids = [(1000 + 7919 * i) % 30000 + 100 for i in range(16)]
        state = {name: int(np.argmax(e.forward(ids))) for name, e in (("plain", plain), ("lora", adapted))}
        times = {"plain": [], "lora": []}

        def pair():
            for name, e in (("plain", plain), ("lora", adapted)):
                if e.n_past >= 200:
                    e.truncate(16)
                t = time.perf_counter()
                state[name] = int(np.argmax(e.forward([state[name]])))
                times[name].append(time.perf_counter() - t)

        benchmark.pedantic(pair, rounds=64, iterations=1, warmup_rounds=2)
    p, lo = np.median(times["plain"]), np.median(times["lora"])
    benchmark.extra_info.update(plain_tokens_per_s=1 / p, lora_tokens_per_s=1 / lo, slowdown=lo / p)
