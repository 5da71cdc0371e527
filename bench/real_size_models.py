"""Real-size models with random weights, for speed figures that caches do not flatter.

    python bench/real_size_models.py [--dir /work/models] [--types Q4_0,Q4_K_M,Q8_0,IQ4_XS]

writes SmolLM2-1.7B's shapes (hidden 2048, 24 layers, FFN 8192, 32 heads, 32 KV heads, tied embeddings,
SmolLM2's tokenizer copied from the 135M test model's metadata) as an F16 GGUF with the `gguf` package, then
lets llama.cpp itself (llama-cpp-python's `llama_model_quantize`) make the quantized files, so both libraries
read the very same bytes. Nothing is downloaded but the small test model. Each file is written under a
temporary name and renamed when complete: a file that exists is whole, and another process may reuse it.

The weights are N(0, 0.02) (norms 1): numbers of the right size, not a language model; greedy decode still
runs the full network, which is all a speed figure needs.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SHAPES = dict(n_embd=2048, n_layer=24, n_ff=8192, n_head=32, n_head_kv=32, n_ctx_train=8192,
              rope_theta=130000.0, rms_eps=1e-5)
NAME = "smollm2-1.7b-random"
# llama.cpp's file type ids (llama_ftype), for llama_model_quantize
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_XS": 30,
          "IQ4_NL": 25}
DEFAULT_TYPES = ("Q4_0", "Q4_K_M", "Q8_0", "IQ4_XS")
N_VOCAB = 49152   # SmolLM2's tokenizer


def model_path(directory: str | os.PathLike, qtype: str) -> Path:
    return Path(directory) / f"{NAME}.{qtype}.gguf"


def _copy_tokenizer(writer, src: str) -> None:
    import gguf

    reader = gguf.GGUFReader(src)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, list(value))
        else:
            writer.add_key_value(key, value, vtype)


def begin_f16(path: Path, arch: str, name: str) -> "gguf.GGUFWriter":
    """A GGUFWriter for an F16 file of `arch` at path's temporary name, with its name, file type and SmolLM2's
    tokenizer (copied from the 135M test model) and vocabulary size set: the part every real-size file shares.
    The caller adds its own keys and tensors, then calls finish_f16."""
    import gguf

    from oxillama import hub

    w = gguf.GGUFWriter(str(path.with_suffix(".tmp")), arch)
    w.add_name(name)
    w.add_file_type(1)   # MOSTLY_F16
    _copy_tokenizer(w, str(hub.resolve_model("smollm2-135m")))
    w.add_vocab_size(N_VOCAB)
    return w


def finish_f16(w, path: Path) -> None:
    """Write out a begin_f16 writer and rename its file to path (a file that exists is whole)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path.with_suffix(".tmp"), path)


def rand_f16(rng, *shape) -> "np.ndarray":
    """N(0, 0.02) weights stored as F16 (what llama_model_quantize then quantizes)"""
    import numpy as np

    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)


def write_f16(path: Path, seed: int = 0) -> None:
    """The F16 file (3.4 GB), under a temporary name renamed at the end."""
    import numpy as np

    s = SHAPES
    w = begin_f16(path, "llama", NAME)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx_train"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_rope_dimension_count(s["n_embd"] // s["n_head"])

    rng = np.random.default_rng(seed)

    def rand(rows: int, cols: int) -> "np.ndarray":
        return rand_f16(rng, rows, cols)

    E, F, hd = s["n_embd"], s["n_ff"], s["n_embd"] // s["n_head"]
    w.add_tensor("token_embd.weight", rand(N_VOCAB, E))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "attn_q.weight", rand(s["n_head"] * hd, E))
        w.add_tensor(p + "attn_k.weight", rand(s["n_head_kv"] * hd, E))
        w.add_tensor(p + "attn_v.weight", rand(s["n_head_kv"] * hd, E))
        w.add_tensor(p + "attn_output.weight", rand(E, s["n_head"] * hd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(F, E))
        w.add_tensor(p + "ffn_up.weight", rand(F, E))
        w.add_tensor(p + "ffn_down.weight", rand(E, F))
    finish_f16(w, path)


def quantize(src: Path, dst: Path, qtype: str, threads: int) -> None:
    """llama.cpp's own quantization of src into dst (temporary name, renamed when done)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[qtype]
    params.nthread = threads
    tmp = dst.with_suffix(".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {qtype} failed with {rc}")
    os.replace(tmp, dst)


def ensure_file(dst: Path, f16: Path, write_f16_fn, qtype: str, threads: int = 2) -> Path:
    """dst, llama.cpp's qtype quantization of f16, made if missing (f16 written first by write_f16_fn(f16) if
    missing too). Every real-size bench file goes through here."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        if not f16.exists():
            print(f"writing {f16}", file=sys.stderr)
            write_f16_fn(f16)
        print(f"quantizing {dst}", file=sys.stderr)
        quantize(f16, dst, qtype, threads)
    return dst


def ensure(directory: str | os.PathLike, types=DEFAULT_TYPES, threads: int = 2) -> dict[str, Path]:
    """Paths of the quantized files, making whichever is missing (the F16 file first)."""
    f16 = model_path(directory, "F16")
    return {qtype: ensure_file(model_path(directory, qtype), f16, write_f16, qtype, threads) for qtype in types}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("OXILLAMA_BENCH_MODELS", "/work/models"))
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES), help=f"of {', '.join(FTYPES)}")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in FTYPES]
    if unknown:
        ap.error(f"unknown type(s) {unknown}; known: {sorted(FTYPES)}")
    for qtype, path in ensure(args.dir, types, args.threads).items():
        print(f"{qtype:8s} {path}  {path.stat().st_size / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
