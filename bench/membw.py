"""This machine's memory read bandwidth, measured in C (bench/membw.c): the limit decode streams weights at.

    python bench/membw.py [-t THREADS] [--mb 2048] [--passes 5]

prints GB/s (1e9 bytes per second), the best of the passes, for a buffer far larger than the caches.
ReadProbe keeps such a buffer for short reads beside another measurement (bench/compare_llamacpp.py reads
it around each slice of a decode, from the parent process while the decoding child waits: this VM's
bandwidth swings 19-27 GB/s within minutes). The reads run on pthreads started per read, not an OpenMP team,
so that no runtime's spinning threads outlive a read or meet a model's (bench/membw.c).
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
        subprocess.run([cc, "-O2", "-pthread", "-shared", "-fPIC", str(_SRC), "-o", str(out)], check=True)
        _lib = ctypes.CDLL(str(out))
        _lib.oxl_bench_read_bw.restype = ctypes.c_double
        _lib.oxl_bench_read_bw.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_uint64)]
        _lib.oxl_bench_buffer.restype = ctypes.c_void_p
        _lib.oxl_bench_buffer.argtypes = [ctypes.c_size_t, ctypes.c_int]
        _lib.oxl_bench_free.restype = None
        _lib.oxl_bench_free.argtypes = [ctypes.c_void_p]
        _lib.oxl_bench_read_pass.restype = ctypes.c_double
        _lib.oxl_bench_read_pass.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_double)]
        out.unlink()
    return _lib


def read_bandwidth(n_threads: int = 2, mb: int = 2048, passes: int = 5) -> float:
    """Read GB/s: the best of `passes` reads of an `mb` MiB buffer by n_threads threads."""
    sink = ctypes.c_uint64()
    secs = _load().oxl_bench_read_bw(mb << 20, n_threads, passes, ctypes.byref(sink))
    if secs <= 0:
        raise MemoryError(f"could not allocate {mb} MiB for the bandwidth measurement")
    return (mb << 20) / secs / 1e9


class ReadProbe:
    """A buffer of `mb` MiB (mapped and written once) for reads beside another measurement. read() reads it
    once with n_threads threads and gives (GB/s by the clock, GB/s by CPU time): the second is each thread's
    bytes over its own CPU time, summed, which other processes on a shared machine disturb far less. Close it
    (or use it as a context manager) to free the buffer."""

    def __init__(self, n_threads: int = 2, mb: int = 1024):
        self.n_threads, self.bytes = n_threads, (mb << 20) & ~127
        self._sink = ctypes.c_uint64()
        self._buf = _load().oxl_bench_buffer(self.bytes, n_threads)
        if not self._buf:
            raise MemoryError(f"could not allocate {mb} MiB for the bandwidth probe")

    def read(self) -> tuple[float, float]:
        if not self._buf:
            raise ValueError("the probe is closed")
        cpu = ctypes.c_double()
        secs = _load().oxl_bench_read_pass(self._buf, self.bytes, self.n_threads, ctypes.byref(self._sink),
                                           ctypes.byref(cpu))
        if secs <= 0:
            raise RuntimeError(f"the bandwidth probe could not start {self.n_threads} threads")
        return self.bytes / secs / 1e9, cpu.value / 1e9

    def close(self) -> None:
        if self._buf:
            _load().oxl_bench_free(self._buf)
            self._buf = None

    def __enter__(self) -> "ReadProbe":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
