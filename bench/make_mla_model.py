"""A deepseek2 GGUF with random weights and DeepSeek-V2-Lite's attention, for the latent-attention benchmarks.

    python bench/make_mla_model.py [--out /work/models/deepseek2-v2lite-attn-random.Q4_K_M.gguf]

V2-Lite's shapes where it matters for multi-head latent attention: hidden 2048, 16 heads, kv_lora_rank 512,
nope 128 + rope 64, v 128 (a 576-value latent per token and layer), no q LoRA; 8 blocks, the first dense (FFN
10944), then 16 experts of 1408 with 6 used and 2 shared (V2-Lite has 64 experts in 26 more blocks: fewer here
to keep the file small; a token reads the same expert bytes per block); vocabulary 32,768. Written as F16, then
quantized to Q4_K_M by llama.cpp (llama-cpp-python's llama_model_quantize); files are written under a temporary
name and renamed when complete. Then, for example:

    python bench/compare_llamacpp.py --long 2048 -m /work/models/deepseek2-v2lite-attn-random.Q4_K_M.gguf

Measured (2 threads, shared 2-core Xeon under other jobs' load, --interleaved, 32 greedy tokens, llama-cpp-python
0.3.36): decode 8.6 vs llama.cpp 4.1 tokens/s (2.10x); after a 1,024-token prompt 8.1 vs 2.9 (2.80x): the latent
cache (576 values per token and layer) keeps long-context decode at 0.94 of short, llama.cpp's at 0.71.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from make_moe_model import llama_cpp_q4_k_m, write_gguf  # noqa: E402

N_VOCAB, N_EMBD, N_LAYER, N_DENSE, N_FF = 32768, 2048, 8, 1, 10944
N_HEAD, KV_LORA_RANK, D_NOPE, D_ROPE, D_V = 16, 512, 128, 64, 128
N_EXPERT, N_USED, N_FF_EXP, N_SHARED = 16, 6, 1408, 2


def tensors(rng):
    """(name, float32 array) in file order; matrices ~ N(0, 1/fan_in), norms ~ 1."""
    def mat(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[-1] ** -0.5)

    yield "token_embd.weight", rng.standard_normal((N_VOCAB, N_EMBD), dtype=np.float32)
    yield "output_norm.weight", np.ones(N_EMBD, np.float32)
    yield "output.weight", mat(N_VOCAB, N_EMBD)
    for il in range(N_LAYER):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", np.ones(N_EMBD, np.float32)
        yield p + "attn_q.weight", mat(N_HEAD * (D_NOPE + D_ROPE), N_EMBD)
        yield p + "attn_kv_a_mqa.weight", mat(KV_LORA_RANK + D_ROPE, N_EMBD)
        yield p + "attn_kv_a_norm.weight", np.ones(KV_LORA_RANK, np.float32)
        yield p + "attn_k_b.weight", mat(N_HEAD, KV_LORA_RANK, D_NOPE)
        yield p + "attn_v_b.weight", mat(N_HEAD, D_V, KV_LORA_RANK)
        yield p + "attn_output.weight", mat(N_EMBD, N_HEAD * D_V)
        yield p + "ffn_norm.weight", np.ones(N_EMBD, np.float32)
        if il < N_DENSE:
            yield p + "ffn_gate.weight", mat(N_FF, N_EMBD)
            yield p + "ffn_up.weight", mat(N_FF, N_EMBD)
            yield p + "ffn_down.weight", mat(N_EMBD, N_FF)
            continue
        yield p + "ffn_gate_inp.weight", mat(N_EXPERT, N_EMBD)
        yield p + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF_EXP, N_EMBD)
        yield p + "ffn_up_exps.weight", mat(N_EXPERT, N_FF_EXP, N_EMBD)
        yield p + "ffn_down_exps.weight", mat(N_EXPERT, N_EMBD, N_FF_EXP)
        yield p + "ffn_gate_shexp.weight", mat(N_SHARED * N_FF_EXP, N_EMBD)
        yield p + "ffn_up_shexp.weight", mat(N_SHARED * N_FF_EXP, N_EMBD)
        yield p + "ffn_down_shexp.weight", mat(N_EMBD, N_SHARED * N_FF_EXP)


def write(path: str) -> None:
    a = "deepseek2"
    md = {"general.architecture": a, "general.name": "random deepseek2, V2-Lite attention (benchmark)",
          f"{a}.context_length": 4096, f"{a}.embedding_length": N_EMBD, f"{a}.block_count": N_LAYER,
          f"{a}.feed_forward_length": N_FF, f"{a}.attention.head_count": N_HEAD, f"{a}.attention.head_count_kv": 1,
          f"{a}.attention.key_length": KV_LORA_RANK + D_ROPE, f"{a}.attention.value_length": KV_LORA_RANK,
          f"{a}.attention.key_length_mla": D_NOPE + D_ROPE, f"{a}.attention.value_length_mla": D_V,
          f"{a}.attention.kv_lora_rank": KV_LORA_RANK, f"{a}.rope.dimension_count": D_ROPE,
          f"{a}.attention.q_lora_rank": 0,   # llama.cpp needs the key unless the block count is a Lite model's
          f"{a}.rope.freq_base": 10000.0, f"{a}.attention.layer_norm_rms_epsilon": 1e-6,
          f"{a}.leading_dense_block_count": N_DENSE, f"{a}.expert_count": N_EXPERT, f"{a}.expert_used_count": N_USED,
          f"{a}.expert_feed_forward_length": N_FF_EXP, f"{a}.expert_shared_count": N_SHARED,
          f"{a}.expert_weights_scale": 1.0, f"{a}.expert_gating_func": 1, f"{a}.vocab_size": N_VOCAB}
    write_gguf(path, md, N_VOCAB, tensors(np.random.default_rng(0)),
               lambda name, d: "F32" if d.ndim < 2 or name.endswith("ffn_gate_inp.weight") else "F16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/work/models/deepseek2-v2lite-attn-random.Q4_K_M.gguf")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        print(f"{args.out} exists")
        return 0
    import llama_cpp
    f16 = args.out.replace(".Q4_K_M", "") + ".F16.part.gguf"
    tmp = args.out + ".part"
    write(f16)
    llama_cpp_q4_k_m(llama_cpp, f16, tmp)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
