"""Quantize a random-weight model of SmolLM2-1.7B's shapes to the low-bit types with llama.cpp's own
quantizer (llama-cpp-python's llama_model_quantize), for bench/compare_llamacpp.py and bench_lowbit.py.

    python bench/make_lowbit_models.py [--src /work/models/smollm2-1.7b-random.F16.gguf] [TYPE ...]

TYPE is a llama.cpp file type name (Q1_0, TQ1_0, TQ2_0, IQ3_XXS, IQ3_S, NVFP4, ...; the IQ1/IQ2 types need
an importance matrix, which llama.cpp refuses to go without). Each output is written under a temporary
name and renamed when complete; an existing output is kept.

    python bench/make_lowbit_models.py --random-blocks IQ2_XXS [IQ3_S ...]

instead writes ...random-blocks.<TYPE>.gguf in seconds: every layer matrix of the type with random blocks
(grid indices, signs, sub-scales; block scale 0.01), the token embedding (tied output) the Q6_K one of the
Q1_0 file. Speed depends on the bytes' layout, not their values, so these time decode and prefill of a
type as a real file would (llama.cpp's i-quant quantizers take hours on 2 cores for a 1.7B model).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_SRC = "/work/models/smollm2-1.7b-random.F16.gguf"


def quantize(src: str, ftype_name: str, n_threads: int) -> str:
    import llama_cpp
    out = src.replace(".F16.gguf", f".{ftype_name}.gguf")
    if os.path.exists(out):
        return out
    tmp = out + ".tmp"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.nthread = n_threads
    t0 = time.time()
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({ftype_name}) failed with {rc}")
    os.replace(tmp, out)
    print(f"{out}: {os.path.getsize(out) / 1e6:.0f} MB in {time.time() - t0:.0f} s", file=sys.stderr)
    return out


def random_blocks(src: str, type_name: str, embd_from: str) -> str:
    import numpy as np

    from oxillama.gguf import GGUFFile, GGUFWriter
    from oxillama.quant import type_info
    out = src.replace(".F16.gguf", f".random-blocks.{type_name}.gguf")
    if os.path.exists(out):
        return out
    info = type_info(type_name)
    rng = np.random.default_rng(0)
    with GGUFFile(src) as f, GGUFFile(embd_from) as e:
        w = GGUFWriter(out + ".tmp")
        w.add_metadata_from(f, exclude=["general.file_type"])
        for name, t in f.tensors.items():
            shape = tuple(t.shape)
            if name == "token_embd.weight":
                et = e.tensors[name]
                w.add_tensor(name, np.asarray(et.data).view(np.uint8).reshape(-1), et.qtype, tuple(et.shape))
            elif len(shape) == 2 and name.startswith("blk."):
                n_blocks = shape[0] * shape[1] // info.block_size
                data = rng.integers(0, 256, size=(n_blocks, info.type_size), dtype=np.uint8)
                if type_name == "IQ1_M":   # its fp16 scale is the top 4 bits of the scale words
                    data[:, -1] = (data[:, -1] & 0x0F) | 0x20
                else:
                    data[:, :2] = np.array([0.01], np.float16).view(np.uint8)
                w.add_tensor(name, data.reshape(-1), type_name, shape)
            else:
                w.add_tensor(name, np.asarray(t.data).view(np.uint8).reshape(-1), t.qtype, shape)
        w.write()
    os.replace(out + ".tmp", out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("types", nargs="*", default=["Q1_0"])
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--random-blocks", action="store_true", help="random blocks of the types, not llama.cpp's quantizer")
    a = ap.parse_args()
    for t in a.types:
        if a.random_blocks:
            print(random_blocks(a.src, t, a.src.replace(".F16.gguf", ".Q1_0.gguf")))
        else:
            print(quantize(a.src, t, a.threads))


if __name__ == "__main__":
    main()
