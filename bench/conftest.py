"""Benchmark fixtures. Run with `pytest bench/` (files named bench_*.py are collected here)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

# bigger than any last-level cache, so the sum streams from DRAM
_BANDWIDTH_BYTES = 512 << 20


def pytest_collect_file(file_path, parent):
    # a file named on the command line is collected by pytest itself
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def _parallel_sum_seconds(chunks: list[np.ndarray]) -> float:
    """Wall time for one thread per chunk to sum its chunk (NumPy reductions release the GIL)."""
    barrier = threading.Barrier(len(chunks) + 1)

    def work(c):
        barrier.wait()
        c.sum()

    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def measure_read_bandwidth(n_threads: int, nbytes: int = _BANDWIDTH_BYTES, repeats: int = 5) -> float:
    """Memory read bandwidth in GB/s: n_threads summing disjoint parts of an array larger than the caches."""
    a = np.ones(nbytes // 8, dtype=np.int64)
    chunks = np.array_split(a, n_threads)
    best = min(_parallel_sum_seconds(chunks) for _ in range(repeats))
    return nbytes / best / 1e9


@pytest.fixture(scope="session")
def mem_read_bandwidth() -> dict[int, float]:
    """Measured memory read bandwidth (GB/s) for 1 and 2 threads."""
    n_cores = os.cpu_count() or 1
    return {n: measure_read_bandwidth(n) for n in sorted({1, min(2, n_cores)})}
