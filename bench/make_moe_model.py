"""A real-size qwen3moe GGUF with random weights, for the mixture-of-experts benchmarks (no MoE GGUF can be
downloaded where these run).

    python bench/make_moe_model.py [--out /work/models/qwen3moe-1.3b.Q4_K_M.gguf]

The shape of issue 29: hidden 1024, 12 layers, 64 experts of FFN 512 with 8 used per token, 16 query / 4 KV
heads of 128, vocabulary 32,768: ~1.3 B parameters, ~0.2 B active per token. Written as F16 with oxillama's
GGUF writer, then quantized to Q4_K_M by llama.cpp (llama-cpp-python's llama_model_quantize) when it is
installed; without it, quantized here to a Q4_K_M-like mix (Q4_K; Q6_K for ffn_down_exps, attn_v and output).
Files are written under a temporary name and renamed when complete.

Then, for example:
    python bench/compare_llamacpp.py -m /work/models/qwen3moe-1.3b.Q4_K_M.gguf
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from oxillama.convert.hf import _minimal_vocab  # noqa: E402
from oxillama.gguf import GGUFWriter  # noqa: E402

N_VOCAB, N_EMBD, N_LAYER = 32768, 1024, 12
N_HEAD, N_HEAD_KV, HEAD_DIM = 16, 4, 128
N_EXPERT, N_USED, N_FF_EXP = 64, 8, 512


def tensors(rng):
    """(name, float32 array) in file order; matrices ~ N(0, 1/fan_in), norms ~ 1."""
    def mat(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[-1] ** -0.5))

    yield "token_embd.weight", rng.standard_normal((N_VOCAB, N_EMBD), dtype=np.float32)
    yield "output_norm.weight", np.ones(N_EMBD, np.float32)
    yield "output.weight", mat(N_VOCAB, N_EMBD)
    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    for il in range(N_LAYER):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", np.ones(N_EMBD, np.float32)
        yield p + "attn_q.weight", mat(q_dim, N_EMBD)
        yield p + "attn_k.weight", mat(kv_dim, N_EMBD)
        yield p + "attn_v.weight", mat(kv_dim, N_EMBD)
        yield p + "attn_output.weight", mat(N_EMBD, q_dim)
        yield p + "attn_q_norm.weight", np.ones(HEAD_DIM, np.float32)
        yield p + "attn_k_norm.weight", np.ones(HEAD_DIM, np.float32)
        yield p + "ffn_norm.weight", np.ones(N_EMBD, np.float32)
        yield p + "ffn_gate_inp.weight", mat(N_EXPERT, N_EMBD)
        yield p + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF_EXP, N_EMBD)
        yield p + "ffn_up_exps.weight", mat(N_EXPERT, N_FF_EXP, N_EMBD)
        yield p + "ffn_down_exps.weight", mat(N_EXPERT, N_EMBD, N_FF_EXP)


def own_qtype(name: str, data: np.ndarray) -> str:
    if data.ndim < 2 or name.endswith("ffn_gate_inp.weight"):
        return "F32"
    if name.endswith(("ffn_down_exps.weight", "attn_v.weight", "output.weight")):
        return "Q6_K"
    return "Q4_K"


def write_gguf(path: str, metadata: dict, n_vocab: int, tensors, qtype_of) -> None:
    """A GGUF at path: the metadata (ints as UINT32), a minimal vocabulary of n_vocab tokens, then the
    (name, float32 array) tensors, each stored as qtype_of(name, array). Shared with make_mla_model.py."""
    w = GGUFWriter(path)
    for k, v in metadata.items():
        w.add_metadata(k, v, type="UINT32" if isinstance(v, int) else None)
    for k, v in _minimal_vocab(n_vocab).items():
        w.add_metadata(k, v)
    for name, data in tensors:
        w.add_tensor(name, data, qtype=qtype_of(name, data))
    w.write()


def llama_cpp_q4_k_m(llama_cpp, f16: str, out: str) -> None:
    """out = f16 quantized to Q4_K_M by llama.cpp (llama-cpp-python's llama_model_quantize); f16 is removed."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(f16.encode(), out.encode(), params)
    os.remove(f16)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize failed with {rc}")


def write(path: str, qtype_of) -> None:
    a = "qwen3moe"
    md = {"general.architecture": a, "general.name": "random qwen3moe 1.3B (benchmark)",
          f"{a}.context_length": 4096, f"{a}.embedding_length": N_EMBD, f"{a}.block_count": N_LAYER,
          f"{a}.feed_forward_length": 3072, f"{a}.attention.head_count": N_HEAD,
          f"{a}.attention.head_count_kv": N_HEAD_KV, f"{a}.attention.key_length": HEAD_DIM,
          f"{a}.attention.value_length": HEAD_DIM, f"{a}.rope.freq_base": 1000000.0,
          f"{a}.attention.layer_norm_rms_epsilon": 1e-6, f"{a}.expert_count": N_EXPERT,
          f"{a}.expert_used_count": N_USED, f"{a}.expert_feed_forward_length": N_FF_EXP}
    write_gguf(path, md, N_VOCAB, tensors(np.random.default_rng(0)), qtype_of)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/work/models/qwen3moe-1.3b.Q4_K_M.gguf")
    ap.add_argument("--own-quantizer", action="store_true", help="quantize here even if llama.cpp is installed")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        print(f"{args.out} exists")
        return 0
    tmp = args.out + ".part"
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    if llama_cpp is None or args.own_quantizer:
        write(tmp, own_qtype)
    else:
        f16 = args.out.replace(".Q4_K_M", "") + ".F16.part.gguf"
        write(f16, lambda name, d: "F32" if d.ndim < 2 else "F16")
        llama_cpp_q4_k_m(llama_cpp, f16, tmp)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
