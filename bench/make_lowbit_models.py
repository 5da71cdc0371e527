"""Quantize a random-weight model of SmolLM2-1.7B's shapes to the low-bit types with llama.cpp's own
quantizer (llama-cpp-python's llama_model_quantize), for bench/compare_llamacpp.py and bench_lowbit.py.

    python bench/make_lowbit_models.py [--src /work/models/smollm2-1.7b-random.F16.gguf] [TYPE ...]

TYPE is a llama.cpp file type name (Q1_0, TQ1_0, TQ2_0, IQ3_XXS, IQ3_S, NVFP4, ...; the IQ1/IQ2 types need
an importance matrix, which llama.cpp refuses to go without). Each output is written under a temporary
name and renamed when complete; an existing output is kept.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("types", nargs="*", default=["Q1_0"])
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    for t in a.types:
        print(quantize(a.src, t, a.threads))


if __name__ == "__main__":
    main()
