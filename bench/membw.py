"""This machine's memory read bandwidth, measured in C (bench/membw.c): the limit decode streams weights at.

    python bench/membw.py [-t THREADS] [--mb 2048] [--passes 5]

prints GB/s (1e9 bytes per second), the best of the passes, for a buffer far larger than the caches.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

_SRC = Path(__file__).with_name("membw.c")
_lib = None


def _load():
    global _lib
    if _lib is None:
        cc = os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"
        out = Path(tempfile.gettempdir()) / f"oxl_membw_{os.getpid()}.so"
        subprocess.run([cc, "-O2", "-fopenmp", "-shared", "-fPIC", str(_SRC), "-o", str(out)], check=True)
        _lib = ctypes.CDLL(str(out))
        _lib.oxl_bench_read_bw.restype = ctypes.c_double
        _lib.oxl_bench_read_bw.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_uint64)]
        out.unlink()
    return _lib


def read_bandwidth(n_threads: int = 2, mb: int = 2048, passes: int = 5) -> float:
    """Read GB/s: the best of `passes` reads of an `mb` MiB buffer by n_threads threads."""
    sink = ctypes.c_uint64()
    secs = _load().oxl_bench_read_bw(mb << 20, n_threads, passes, ctypes.byref(sink))
    if secs <= 0:
        raise MemoryError(f"could not allocate {mb} MiB for the bandwidth measurement")
    return (mb << 20) / secs / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--mb", type=int, default=2048)
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"read bandwidth: {read_bandwidth(args.threads, args.mb, args.passes):.1f} GB/s "
          f"({args.threads} threads, {args.mb} MiB, best of {args.passes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
