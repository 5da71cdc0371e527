"""One quant type's multi-row kernel alone in two builds of oxillama, alternating child processes (A B A B ...).

    python bench/kernel_builds.py OLD_CHECKOUT NEW_CHECKOUT --type Q4_K [--rows 2048 --cols 2048]
                                  [--act-rows 1,8,64] [--rounds 3] [--matrices 1] [--layouts file,packed]

Each checkout must hold an in-place build. A child (one thread) quantizes a rows x cols matrix of N(0, 1) values
with the reference quantizer, quantizes --act-rows activation rows to the type's vec_dot type, and times
oxl_gemm_range over all rows (`file`: the file's layout) and, where the active tier has one, the repacked layout
(`packed`). Times are CPU time (time.process_time), so that other processes on a shared machine drop out of the
figure as far as they can; each figure is the median of 5 runs of ~2 G operations, and the table gives the
medians over the rounds in GOPS (2 x rows x cols x activation rows per second) with NEW / OLD. The matrix of the
default size stays in cache: this is the kernel's arithmetic, not the memory's (bench/membw.py for that).
--matrices N cycles over N different matrices of that size, so that N x rows x cols weights that do not fit in
the cache measure the kernel at the memory's pace (decode of a real model, MoE experts).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import numpy as np
from oxillama import _core
from oxillama.quant.types import GGMLType
qt = int(GGMLType[sys.argv[1]])
rows, cols = int(sys.argv[2]), int(sys.argv[3])
ncs = [int(v) for v in sys.argv[4].split(",")]
n_mat, layouts = int(sys.argv[5]), sys.argv[6].split(",")
rng = np.random.default_rng(0)
W0 = np.asarray(_core.quantize_rows(rng.standard_normal(rows * cols).astype(np.float32), qt, rows, cols), np.uint8)
Ws = [W0] + [np.roll(W0, W0.size // rows * (k * rows // n_mat)) for k in range(1, n_mat)]   # whole rows rotated
vdt = _core.vec_dot_type(qt)
Ps = [_core.repack(W, qt, rows, cols) for W in Ws] if "packed" in layouts else [None] * n_mat
out = {}
for nc in ncs:
    X = rng.standard_normal((nc, cols)).astype(np.float32)
    xq = np.concatenate([np.asarray(_core.quantize(X[j], vdt, reference=False), np.uint8) for j in range(nc)])
    Y = np.zeros((nc, rows), np.float32)
    for name in layouts:
        if name == "packed" and Ps[0] is None:
            continue
        reps = max(n_mat, int(2e9 / (2 * rows * cols * nc)))
        times = []
        for _ in range(5):
            t = time.process_time()
            for k in range(reps):
                _core.gemm_range(Ws[k % n_mat], qt, rows, cols, xq, nc, Y, 0, rows,
                                 packed=Ps[k % n_mat] if name == "packed" else None)
            times.append((time.process_time() - t) / reps)
        out[f"{name} {nc}"] = 2 * rows * cols * nc / statistics.median(times) / 1e9
print(json.dumps(out))
"""


def run(checkout: str, qtype: str, rows: int, cols: int, act_rows: str, matrices: int = 1,
        layouts: str = "file,packed") -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", CHILD, qtype, str(rows), str(cols), act_rows, str(matrices), layouts], env=env,
                         capture_output=True, text=True, cwd=os.path.abspath(os.sep))
    if res.returncode:
        raise SystemExit(f"{checkout}: the child failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--type", required=True, help="a GGML type name, e.g. Q4_K")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--act-rows", default="1,8,64", help="activation row counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--matrices", type=int, default=1, help="matrices cycled over (beyond the cache: several)")
    ap.add_argument("--layouts", default="file,packed", help="file, packed or both")
    args = ap.parse_args(argv)
    figures = {args.old: [], args.new: []}
    for _ in range(args.rounds):
        for checkout in (args.old, args.new):
            figures[checkout].append(run(checkout, args.type, args.rows, args.cols, args.act_rows, args.matrices,
                                         args.layouts))
    keys = sorted({k for f in figures.values() for one in f for k in one}, key=lambda k: (k.split()[0], int(k.split()[1])))
    print(f"{args.type} {args.rows} x {args.cols} x {args.matrices} matrices, 1 thread, CPU time, medians of {args.rounds} alternating rounds (GOPS)")
    print(f"{'layout, act. rows':20s} {'old':>8s} {'new':>8s} {'new/old':>8s}")
    for k in keys:
        med = [statistics.median(v) if v else None
               for v in ([one[k] for one in figures[c] if k in one] for c in (args.old, args.new))]
        ratio = f"{med[1] / med[0]:8.2f}" if None not in med else f"{'-':>8s}"
        print(f"{k:20s} {med[0] or float('nan'):8.1f} {med[1] or float('nan'):8.1f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
