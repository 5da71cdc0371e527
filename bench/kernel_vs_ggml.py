"""The kernel alone against ggml's: the same weight bytes and the same activation bytes through ggml-cpu's
vec_dot (llama-cpp-python's libggml-cpu.so, row by row as its mul_mat runs a decode) and through oxillama's
product, 1 thread, alternating round by round; CPU time of the timing thread (a pass preempted by another
process is not charged for the wait), medians and the ratio ggml time / oxillama time.

    python bench/kernel_vs_ggml.py [TYPE ...] [--rows 16384] [--cols 4096] [--rounds 11] [--batch N]
                                   [--tier avx512vnni]

Activations are quantized once by ggml's from_float for the type's vec_dot type (Q8_0, Q8_K: the same
block layouts in both libraries), so both products read identical bytes. oxillama is timed two ways: its
vec_dot row by row (the matvec) and its multi-row kernel for one row (gemm, which the decode uses for the
types that set gemm_one_row), and, where the tier has a repacked layout for the type, its product on the
repacked copy (what a model loaded with repack=True, the default, runs); the fastest is the `ox` column. --batch N times N activation rows instead
(prefill-like: ggml's vec_dot per output, oxillama's multi-row kernel). Types without a quantizer in
oxillama (the i-quants) get random blocks with a small fp16 scale, as bench/bench_quant.py makes them.
Without llama-cpp-python it says so and exits with status 2.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

_SRC = Path(__file__).with_name("kernel_vs_ggml.c")
DEFAULT_TYPES = ("Q1_0", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0",
                 "MXFP4", "NVFP4")
NO_QUANTIZER = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")


class _Traits(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


def _ggml():
    import llama_cpp
    d = Path(llama_cpp.__file__).parent / "lib"
    ctypes.CDLL(str(d / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(d / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    cpu.ggml_cpu_init()
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_Traits)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    return cpu


def _shim():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    out = Path(tempfile.gettempdir()) / f"oxl_kvg_{os.getpid()}.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(_SRC), "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    out.unlink()
    lib.oxl_bench_ggml_rows.restype = ctypes.c_double
    lib.oxl_bench_ggml_rows.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _weights(qtype: str, rows: int, cols: int) -> np.ndarray:
    from oxillama.quant import quantize, type_info
    rng = np.random.default_rng(0)
    if qtype in NO_QUANTIZER:
        size = type_info(qtype).type_size
        data = rng.integers(0, 256, size=(rows * cols // 256, size), dtype=np.uint8)
        if qtype == "IQ1_M":   # its fp16 scale's top 4 bits are the last scale word's: keep it finite
            data[:, -1] = (data[:, -1] & 0x0F) | 0x20
        else:
            data[:, :2] = np.array([0.01], np.float16).view(np.uint8)
        return data.reshape(-1)
    return quantize(rng.standard_normal((rows, cols), dtype=np.float32), qtype)


def run(qtype: str, rows: int, cols: int, rounds: int, batch: int, tier: str | None, cpu, shim) -> dict:
    from oxillama import _core
    from oxillama.quant import type_info
    info = type_info(qtype)
    tr = cpu.ggml_get_type_traits_cpu(int(info.qtype)).contents
    act = type_info(int(tr.vec_dot_type))
    w = _weights(qtype, rows, cols)
    row_bytes = w.nbytes // rows
    x = np.random.default_rng(1).standard_normal((batch, cols), dtype=np.float32)
    xq = np.zeros(batch * act.row_bytes(cols), np.uint8)
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        cpu.ggml_get_type_traits_cpu(int(tr.vec_dot_type)).contents.from_float)
    for j in range(batch):
        from_float(x[j].ctypes.data, xq[j * act.row_bytes(cols):].ctypes.data, cols)
    y_g = np.zeros((batch, rows), np.float32)
    y_o = np.zeros((batch, rows), np.float32)
    y_v = np.zeros(rows, np.float32)
    packed = None
    if _core.repacked_row_size(int(info.qtype), cols, tier) > 0:
        packed = np.asarray(_core.repack(w, int(info.qtype), rows, cols, 1, tier))
        y_p = np.zeros((batch, rows), np.float32)
    g, o, v, p = [], [], [], []
    for _ in range(rounds):
        t = 0.0
        for j in range(batch):
            t += shim.oxl_bench_ggml_rows(tr.vec_dot, cols, rows, w.ctypes.data, row_bytes,
                                          xq[j * act.row_bytes(cols):].ctypes.data, y_g[j].ctypes.data)
        g.append(t)
        t0 = time.thread_time()
        _core.gemm_range(w, int(info.qtype), rows, cols, xq, batch, y_o, 0, rows, tier)
        o.append(time.thread_time() - t0)
        if packed is not None:
            t0 = time.thread_time()
            _core.gemm_range(w, int(info.qtype), rows, cols, xq, batch, y_p, 0, rows, tier, packed)
            p.append(time.thread_time() - t0)
        if batch == 1:
            t0 = time.thread_time()
            _core.matvec(w, int(info.qtype), rows, cols, x[0], y_v, 1, tier)   # vec_dot row by row
            v.append(time.thread_time() - t0)
    # agreement (same bytes, so the sums should agree to float rounding)
    rel = float(np.max(np.abs(y_o - y_g)) / (np.max(np.abs(y_g)) + 1e-30))
    mg, mo = statistics.median(g), statistics.median(o)
    mv = statistics.median(v) if v else float("inf")
    mp = statistics.median(p) if p else float("inf")
    if packed is not None and not np.array_equal(y_p, y_o):
        raise SystemExit(f"{qtype}: the repacked product differs from the file-layout one")
    return {"type": qtype, "rows": rows, "cols": cols, "batch": batch, "ggml_ms": mg * 1e3, "gemm_ms": mo * 1e3,
            "vec_dot_ms": mv * 1e3, "packed_ms": mp * 1e3, "ratio": mg / min(mo, mv, mp), "max_rel_diff": rel,
            "best_ms": min(g) * 1e3, "best_ox_ms": min(o + v + p) * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="*", default=list(DEFAULT_TYPES))
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tier", default=None)
    a = ap.parse_args(argv)
    try:
        cpu = _ggml()
    except Exception as e:   # not installed or unloadable: nothing to compare with
        print(f"llama-cpp-python's ggml is not available ({e})", file=sys.stderr)
        return 2
    shim = _shim()
    print(f"{'type':8} {'rows x cols':>12} {'batch':>5} {'ggml ms':>9} {'gemm ms':>9} {'vecdot ms':>9} "
          f"{'packed ms':>9} {'ggml/ox':>8} {'rel diff':>9} {'best ggml/ox ms':>16}")
    for t in a.types:
        r = run(t, a.rows, a.cols, a.rounds, a.batch, a.tier, cpu, shim)
        print(f"{t:8} {a.rows:>6}x{a.cols:<5} {a.batch:>5} {r['ggml_ms']:9.2f} {r['gemm_ms']:9.2f} "
              f"{r['vec_dot_ms']:9.2f} {r['packed_ms']:9.2f} {r['ratio']:7.2f}x "
              f"{r['max_rel_diff']:9.1e} {r['best_ms']:7.2f}/{r['best_ox_ms']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
