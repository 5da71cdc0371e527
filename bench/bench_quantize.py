"""`oxillama quantize` of a ~1 GB F16 model to Q4_K_M against llama.cpp's quantizer, same threads.

The model (random llama-shaped weights, 12 layers of n_embd 2048 / n_ff 5632, 1.08 GB F16) is made
once under $OXILLAMA_BENCH_MODELS (default /work/models), never in the repository. llama.cpp runs
through llama-cpp-python's libllama (llama_model_quantize, nthread = ours); skipped without it.

    pytest bench/bench_quantize.py --benchmark-only
"""
from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "quant"))
import llama_cpp_ref  # noqa: E402
import model_files  # noqa: E402

from oxillama.quant import recipes  # noqa: E402
from oxillama.quant.quantize_file import quantize_file  # noqa: E402

MODELS = os.environ.get("OXILLAMA_BENCH_MODELS", "/work/models")
THREADS = 2


@pytest.fixture(scope="module")
def f16_model() -> str:
    path = os.path.join(MODELS, "oxillama-quantize-bench-1g.F16.gguf")
    if not os.path.exists(path):
        os.makedirs(MODELS, exist_ok=True)
        tmp = path + ".making"
        model_files.make_f16_llama(tmp, n_layer=12, n_embd=2048, n_ff=5632, n_head=16, n_head_kv=4)
        os.replace(tmp, path)
    return path


def test_quantize_q4_k_m_vs_llama_cpp(benchmark, f16_model, tmp_path):
    if not llama_cpp_ref.available():
        pytest.skip("llama-cpp-python is not installed")
    out, ref = str(tmp_path / "ours.gguf"), str(tmp_path / "ref.gguf")
    ours, theirs = [], []
    for _ in range(2):   # alternate A/B rounds; the machine's load moves
        t0 = time.perf_counter()
        quantize_file(f16_model, out, "Q4_K_M", n_threads=THREADS, force=True)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        llama_cpp_ref.llama_quantize(f16_model, ref, recipes.file_type("Q4_K_M").ftype, nthread=THREADS)
        theirs.append(time.perf_counter() - t0)
    benchmark.extra_info.update(oxillama_s=sorted(ours), llama_cpp_s=sorted(theirs),
                                speed_vs_llama_cpp=min(theirs) / min(ours))
    with open(out, "rb") as a, open(ref, "rb") as b:
        assert a.read(1 << 20) == b.read(1 << 20)
    benchmark.pedantic(quantize_file, args=(f16_model, out, "Q4_K_M"),
                       kwargs=dict(n_threads=THREADS, force=True), rounds=1, iterations=1)
