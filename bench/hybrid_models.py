"""Real-size hybrid models with random weights (recurrent + attention layers), for speed figures.

    python bench/hybrid_models.py [--dir /work/models] [--types Q4_K_M]

writes LFM2-1.2B's shapes in llama.cpp's `lfm2` layout (hidden 2048, 16 layers of which 6 attention (32 heads,
8 KV heads) at LFM2-1.2B's places and 10 gated short convolutions of width 3, FFN 8192) as an F16 GGUF with the
`gguf` package, then lets llama.cpp itself (llama-cpp-python's `llama_model_quantize`) make the quantized files,
so both libraries read the very same bytes. The vocabulary is SmolLM2's (49,152 tokens, copied from the 135M
test model) where LFM2 has 65,536: the output product is 3/4 of LFM2's, everything else is LFM2-1.2B's.
Files are written under a temporary name and renamed when complete (a file that exists is whole).

Then, e.g.:  python bench/compare_llamacpp.py -m /work/models/lfm2-1.2b-random.Q4_K_M.gguf -t 2
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_size_models import FTYPES, N_VOCAB, begin_f16, ensure_file, finish_f16, rand_f16  # noqa: E402

LFM2 = dict(n_embd=2048, n_layer=16, n_ff=8192, n_head=32, n_head_kv=8, conv_l=3, n_ctx_train=128000,
            rope_theta=1_000_000.0, rms_eps=1e-5, attention=(2, 5, 8, 10, 12, 14))
NAME = "lfm2-1.2b-random"


def model_path(directory, qtype: str) -> Path:
    return Path(directory) / f"{NAME}.{qtype}.gguf"


def write_lfm2_f16(path: Path, seed: int = 0) -> None:
    """The F16 file (~2.2 GB): matrices F16, norms and conv taps F32 (as llama.cpp keeps them)."""
    import numpy as np

    s = LFM2
    w = begin_f16(path, "lfm2", NAME)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx_train"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv([s["n_head_kv"] if il in s["attention"] else 0 for il in range(s["n_layer"])])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_uint32("lfm2.shortconv.l_cache", s["conv_l"])

    rng = np.random.default_rng(seed)

    def rand(rows: int, cols: int) -> "np.ndarray":
        return rand_f16(rng, rows, cols)

    E, F, hd = s["n_embd"], s["n_ff"], s["n_embd"] // s["n_head"]
    ones = np.ones(E, np.float32)
    w.add_tensor("token_embd.weight", rand(N_VOCAB, E))
    w.add_tensor("token_embd_norm.weight", ones)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        if i in s["attention"]:
            w.add_tensor(p + "attn_q.weight", rand(s["n_head"] * hd, E))
            w.add_tensor(p + "attn_k.weight", rand(s["n_head_kv"] * hd, E))
            w.add_tensor(p + "attn_v.weight", rand(s["n_head_kv"] * hd, E))
            w.add_tensor(p + "attn_output.weight", rand(E, s["n_head"] * hd))
            w.add_tensor(p + "attn_q_norm.weight", np.ones(hd, np.float32))
            w.add_tensor(p + "attn_k_norm.weight", np.ones(hd, np.float32))
        else:
            w.add_tensor(p + "shortconv.in_proj.weight", rand(3 * E, E))
            w.add_tensor(p + "shortconv.conv.weight",
                         (rng.standard_normal((E, s["conv_l"]), dtype=np.float32) * 0.5).astype(np.float32))
            w.add_tensor(p + "shortconv.out_proj.weight", rand(E, E))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", rand(F, E))
        w.add_tensor(p + "ffn_up.weight", rand(F, E))
        w.add_tensor(p + "ffn_down.weight", rand(E, F))
    finish_f16(w, path)


def ensure(directory, types=("Q4_K_M",), threads: int = 2) -> dict[str, Path]:
    f16 = model_path(directory, "F16")
    return {qtype: ensure_file(model_path(directory, qtype), f16, write_lfm2_f16, qtype, threads) for qtype in types}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("OXILLAMA_BENCH_MODELS", "/work/models"))
    ap.add_argument("--types", default="Q4_K_M", help=f"of {', '.join(FTYPES)}")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for qtype, path in ensure(args.dir, types, args.threads).items():
        print(f"{qtype:8s} {path}  {path.stat().st_size / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
