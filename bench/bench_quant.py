"""matvec and matmul throughput per quant type and SIMD tier, next to the memory read bandwidth.

Targets (issue 2): Q4_0/Q4_1/Q8_0 matvec on 4096 x 4096 at >= 70% of the measured memory read
bandwidth on 2 threads; matmul over 64 activation rows at least 8x the matvec throughput per row.
Each result's extra_info holds weight_GBps, mem_read_GBps and their ratio (bandwidth_fraction);
matmul results hold rows_per_s (activation rows per second) to compare with matvec's calls per second.

    pytest bench/bench_quant.py --benchmark-columns=median,ops -k "Q4_0 and avx2"
"""
from __future__ import annotations

import numpy as np
import pytest

from oxillama import _core
from oxillama.quant import QMatrix, quantize

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS",
         "F16", "BF16", "F32", "MXFP4", "NVFP4", "Q1_0", "TQ1_0", "TQ2_0", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS",
         "IQ3_S", "IQ1_S", "IQ1_M")
# no quantizer for these: random blocks (grid indices, signs, sub-scales) with a small fp16 scale
NO_QUANTIZER = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
HOT_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K", "F16")
TIERS = tuple(t for t in _core.usable_tiers() if t != "scalar")
N_THREADS = 2
MATMUL_ROWS = 64
# (rows, cols, what): the square case and shapes of the two test models
SHAPES = [(4096, 4096, "square"), (1536, 576, "smollm2_ffn_up"), (576, 1536, "smollm2_ffn_down"),
          (49152, 576, "smollm2_token_embd"), (2048, 640, "gemma3_ffn_up"), (262144, 640, "gemma3_token_embd")]
REAL_TYPES = {"smollm2_ffn_up": "Q4_1", "smollm2_ffn_down": "Q4_1", "smollm2_token_embd": "Q8_0",
              "gemma3_ffn_up": "Q5_0", "gemma3_token_embd": "Q8_0"}

_cache: dict = {}


def _matrix(qtype: str, rows: int, cols: int) -> QMatrix:
    key = (qtype, rows, cols)
    if key not in _cache:
        _cache.clear()   # one matrix alive at a time: the big ones are hundreds of MB
        rng = np.random.default_rng(0)
        if qtype in NO_QUANTIZER:
            from oxillama.quant import type_info
            size = type_info(qtype).type_size
            data = rng.integers(0, 256, size=(rows * cols // 256, size), dtype=np.uint8)
            if qtype == "IQ1_M":   # its fp16 scale's top 4 bits are the last scale word's: keep it finite
                data[:, -1] = (data[:, -1] & 0x0F) | 0x20
            else:
                data[:, :2] = np.float16(0.01).view(np.uint8)
            _cache[key] = QMatrix(data.reshape(-1), qtype, rows, cols, n_threads=N_THREADS)
        else:
            W = rng.standard_normal((rows, cols), dtype=np.float32)
            _cache[key] = QMatrix(quantize(W, qtype), qtype, rows, cols, n_threads=N_THREADS)
    return _cache[key]


def _report(benchmark, m: QMatrix, bw: dict[int, float], n_act_rows: int, n_threads: int):
    """Median-based figures, plus the best run's (on a shared machine the median mostly measures
    how often a thread was descheduled)."""
    seconds, best = benchmark.stats.stats.median, benchmark.stats.stats.min
    gbps = m.data.nbytes / seconds / 1e9
    mem = bw[max(k for k in bw if k <= n_threads)]
    benchmark.extra_info.update({
        "weight_bytes": int(m.data.nbytes), "weight_GBps": round(gbps, 2), "mem_read_GBps": round(mem, 2),
        "bandwidth_fraction": round(gbps / mem, 3), "rows_per_s": round(n_act_rows / seconds, 1),
        "weight_GBps_best": round(m.data.nbytes / best / 1e9, 2), "rows_per_s_best": round(n_act_rows / best, 1),
        "n_threads": n_threads})


def _cases(types, shapes):
    """The square case on 1 and N_THREADS threads (per-core and target figures), the rest on N_THREADS."""
    out = []
    for rows, cols, what in shapes:
        for qtype in types if what == "square" else (REAL_TYPES[what],):
            for tier in TIERS:
                for n_threads in (1, N_THREADS) if what == "square" else (N_THREADS,):
                    out.append(pytest.param(qtype, tier, rows, cols, n_threads,
                                            id=f"{qtype}-{tier}-{what}-{n_threads}t"))
    return out


@pytest.mark.parametrize("qtype,tier,rows,cols,n_threads", _cases(TYPES, SHAPES))
def test_matvec(benchmark, mem_read_bandwidth, qtype, tier, rows, cols, n_threads):
    m = _matrix(qtype, rows, cols)
    x = np.random.default_rng(1).standard_normal(cols, dtype=np.float32)
    y = np.empty(rows, np.float32)
    benchmark(m.matvec, x, out=y, tier=tier, n_threads=n_threads)
    _report(benchmark, m, mem_read_bandwidth, 1, n_threads)


@pytest.mark.parametrize("qtype,tier,rows,cols,n_threads", _cases(HOT_TYPES, SHAPES[:3] + SHAPES[4:5]))
def test_matmul(benchmark, mem_read_bandwidth, qtype, tier, rows, cols, n_threads):
    m = _matrix(qtype, rows, cols)
    X = np.random.default_rng(1).standard_normal((MATMUL_ROWS, cols), dtype=np.float32)
    Y = np.empty((MATMUL_ROWS, rows), np.float32)
    benchmark(m.matmul, X, out=Y, tier=tier, n_threads=n_threads)
    _report(benchmark, m, mem_read_bandwidth, MATMUL_ROWS, n_threads)


# Small batches (issue 15): n activation rows against the real models' matrices, as batched decode of
# n sequences and a speculative verify of n tokens run them. The weights stream from DRAM in a decode
# step, so a small matrix is benchmarked as enough copies of itself to exceed the caches, multiplied one
# after the other (one "step"); rows_per_s = n x copies / step time, and rows_per_s_vs_n1 compares with
# the one-row product (matvec) of the same run.
SMALL_BATCH_ROWS = (1, 2, 4, 8, 16)
SMALL_BATCH_SHAPES = [("Q4_1", 1536, 576, "smollm2_ffn_up"), ("Q4_1", 576, 1536, "smollm2_ffn_down"),
                      ("Q8_0", 49152, 576, "smollm2_output"), ("Q5_0", 2048, 640, "gemma3_ffn_up"),
                      ("Q4_K", 640, 2048, "gemma3_ffn_down_q4k"), ("Q6_K", 640, 2048, "gemma3_ffn_down_q6k"),
                      ("Q8_0", 262144, 640, "gemma3_output")]
STREAM_BYTES = 96 << 20
_small_batch_n1: dict = {}


def _stream_copies(qtype: str, rows: int, cols: int) -> list[QMatrix]:
    key = ("copies", qtype, rows, cols)
    if key not in _cache:
        _cache.clear()
        rng = np.random.default_rng(0)
        data = quantize(rng.standard_normal((rows, cols), dtype=np.float32), qtype)
        k = max(1, -(-STREAM_BYTES // data.nbytes))
        _cache[key] = [QMatrix(data.copy(), qtype, rows, cols, n_threads=N_THREADS) for _ in range(k)]
    return _cache[key]


@pytest.mark.parametrize("n", SMALL_BATCH_ROWS)
@pytest.mark.parametrize("qtype,rows,cols,what", SMALL_BATCH_SHAPES, ids=[s[3] for s in SMALL_BATCH_SHAPES])
def test_small_batch(benchmark, mem_read_bandwidth, qtype, rows, cols, what, n):
    mats = _stream_copies(qtype, rows, cols)
    X = np.random.default_rng(1).standard_normal((n, cols), dtype=np.float32)
    Y = np.empty((n, rows), np.float32)

    def step():
        for m in mats:
            if n == 1:
                m.matvec(X[0], out=Y[0])
            else:
                m.matmul(X, out=Y)

    benchmark(step)
    seconds = benchmark.stats.stats.median
    rows_per_s = n * len(mats) / seconds
    if n == 1:
        _small_batch_n1[what] = rows_per_s
    weight_bytes = sum(m.data.nbytes for m in mats)
    mem = mem_read_bandwidth[max(k for k in mem_read_bandwidth if k <= N_THREADS)]
    benchmark.extra_info.update({
        "n_rows": n, "copies": len(mats), "rows_per_s": round(rows_per_s, 1),
        "rows_per_s_vs_n1": round(rows_per_s / _small_batch_n1[what], 2) if what in _small_batch_n1 else None,
        "weight_GBps": round(weight_bytes / seconds / 1e9, 2), "mem_read_GBps": round(mem, 2),
        "n_threads": N_THREADS})
