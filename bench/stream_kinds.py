"""One activation row against each kind of matrix of a real-size file, streamed from DRAM, beside a plain read.

    python bench/stream_kinds.py [--model /work/models/smollm2-1.7b-random.Q4_K_M.gguf] [--rounds 7]
                                 [--gb 1.0] [--layouts packed,file] [--threads 1,2] [--kinds Q4_0,Q8_0]

Groups the file's 2-D weights by type (and the token embedding apart: a tied output matrix), copies each group
(repacked where the active tier has a layout, and in the file's layout) until it is >= --gb GB so that no cache
holds it, then times rounds interleaving every group with a plain read of as many bytes (AVX2 loads,
bench/membw.c's loop): GB/s of each group and its share of the read's rate in the same rounds. This is decode's
question per matrix kind: does the one-row kernel stream at the memory's pace? (Whole-model figures:
bench/real_size_models.py.)

Each thread count in --threads is measured in its own rounds. With T threads, thread t takes the t-th share of
every matrix's rows (a multiple of 16, as the forward pass splits them) and of every read buffer, and each
thread's rate is its bytes over its own CPU time (time.thread_time), so that other processes on a shared
machine drop out as far as they can; the figure is the threads' rates summed (with 1 thread: CPU time).
--kinds keeps only the groups whose type (e.g. Q4_0, or "Q6_K token_embd") is listed.
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
import threading
import time
from pathlib import Path

import numpy as np

READ_SRC = r"""
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
__attribute__((target("avx2"))) uint64_t oxl_bench_read(const void *pv, size_t bytes) {
    const __m256i *p = (const __m256i *)pv;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 4 <= bytes / 32; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(p + i));
        a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(p + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(p + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(p + i + 3));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0);
}
"""


def _reader():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "read.c", Path(tmp) / "read.so"
        src.write_text(READ_SRC)
        subprocess.run(cc.split() + ["-O2", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
        lib = ctypes.CDLL(str(out))
    lib.oxl_bench_read.restype = ctypes.c_uint64
    lib.oxl_bench_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/work/models/smollm2-1.7b-random.Q4_K_M.gguf")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gb", type=float, default=1.0, help="GB each group is copied up to (beyond the caches)")
    ap.add_argument("--layouts", default="packed,file", help="packed, file or both")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated, each in its own rounds")
    ap.add_argument("--kinds", default="", help="only these groups (types, comma-separated); default all")
    args = ap.parse_args(argv)
    only = {k.strip() for k in args.kinds.split(",") if k.strip()}

    from oxillama import _core
    from oxillama.gguf.reader import GGUFFile

    f = GGUFFile(args.model)
    kinds: dict[str, list] = {}
    for name, t in f.tensors.items():
        if len(t.shape) != 2 or t.qtype in ("F32", "F16"):
            continue
        key = t.qtype + (" token_embd" if name == "token_embd.weight" else "")
        if only and key not in only:
            continue
        kinds.setdefault(key, []).append(t)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(max(t.shape[1] for ts in kinds.values() for t in ts)).astype(np.float32)
    groups = {}
    for key, ts in kinds.items():
        for layout in args.layouts.split(","):
            mats = []
            for t in ts:
                rows, cols = t.shape
                w = np.array(t.data)
                p = _core.repack(w, t.qtype_id, rows, cols, 2) if layout == "packed" else None
                if layout == "packed" and p is None:
                    break
                vdt = _core.vec_dot_type(t.qtype_id)
                xq = np.asarray(_core.quantize(x[:cols], vdt, reference=False), np.uint8)
                mats.append((w, t.qtype_id, rows, cols, p, xq, np.zeros((1, rows), np.float32)))
            else:
                nbytes = sum(m[0].nbytes for m in mats)
                copies = max(1, int(np.ceil(args.gb * 1e9 / nbytes)))
                groups[f"{key} {layout}"] = mats + [
                    (w.copy(), qt, r, c, None if p is None else _core.repack(w, qt, r, c, 2), xq, y)
                    for _ in range(copies - 1) for (w, qt, r, c, p, xq, y) in mats]
    lib = _reader()
    bufs = [np.full(32 << 20, 1, np.uint8) for _ in range(int(np.ceil(args.gb * 1e9 / (32 << 20))))]

    def share(n: int, t: int, nt: int, align: int) -> tuple[int, int]:
        """thread t's part [a, b) of n items, cut at multiples of align"""
        cut = lambda i: n if i == nt else min(n, (n * i // nt + align - 1) // align * align)
        return cut(t), cut(t + 1)

    def read(t: int, nt: int) -> int:
        n = 0
        for b in bufs:
            a, e = share(b.nbytes, t, nt, 4096)
            lib.oxl_bench_read(b.ctypes.data + a, e - a)
            n += e - a
        return n

    def product(mats, t: int, nt: int) -> int:
        n = 0
        for (w, qt, r, c, p, xq, y) in mats:
            r0, r1 = share(r, t, nt, 16)
            if r1 > r0:
                _core.gemm_range(w, qt, r, c, xq, 1, y, r0, r1, packed=p)
                n += w.nbytes // r * (r1 - r0)
        return n

    def rate(nt: int, fn, *a) -> float:
        """the threads' bytes over their own CPU time, summed"""
        rates = [0.0] * nt

        def work(t: int) -> None:
            c = time.thread_time()
            n = fn(*a, t, nt)
            rates[t] = n / (time.thread_time() - c) / 1e9

        threads = [threading.Thread(target=work, args=(t,)) for t in range(nt)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return sum(rates)

    rate(1, read)
    for mats in groups.values():
        rate(1, product, mats)
    for nt in (int(v) for v in args.threads.split(",")):
        rates: dict[str, list[float]] = {"read": []}
        for _ in range(args.rounds):
            rates["read"].append(rate(nt, read))
            for name, mats in groups.items():
                rates.setdefault(name, []).append(rate(nt, product, mats))
        bw = statistics.median(rates["read"])
        print(f"{Path(args.model).name}, {nt} thread{'s' * (nt > 1)}, CPU time per thread, medians of "
              f"{args.rounds} interleaved rounds")
        print(f"{'read':28s} {bw:6.1f} GB/s")
        for name, mats in groups.items():
            ratio = statistics.median(r / b for r, b in zip(rates[name], rates["read"]))
            print(f"{name:28s} {statistics.median(rates[name]):6.1f} GB/s  {ratio:5.0%} of the read "
                  f"({len(mats)} matrices, {sum(m[0].nbytes for m in mats) / 1e9:.2f} GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
