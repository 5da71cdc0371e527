"""What this machine offers: CPU features, SIMD tiers in use, OpenMP, thread count."""
from __future__ import annotations

import functools
import logging
import os
import sys


@functools.lru_cache(maxsize=None)
def physical_cores() -> int:
    """Physical cores available to this process (SMT siblings counted once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = list(range(os.cpu_count() or 1))
        if sys.platform == "darwin":
            try:
                import subprocess
                out = subprocess.run(["sysctl", "-n", "hw.perflevel0.physicalcpu"], capture_output=True, text=True)
                if out.returncode != 0 or not out.stdout.strip():
                    out = subprocess.run(["sysctl", "-n", "hw.physicalcpu"], capture_output=True, text=True)
                return max(1, int(out.stdout.strip()))
            except (OSError, ValueError):
                pass
        return max(1, len(cpus))
    cores = set()
    for cpu in cpus:
        path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            with open(path) as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def logical_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


OVERSUBSCRIBE_ENV = "OXILLAMA_THREADS_OVERSUBSCRIBE"
_warned_oversubscribe: set[tuple[int, int]] = set()


def resolve_threads(n_threads: int | None) -> int:
    """The thread count to run with: n_threads, or default_threads() when None.

    More threads than logical CPUs only spin and wait for each other at every barrier (on 2 CPUs,
    32 threads decode 6x slower than 2, and 1,000 barely move), so a count above logical_cpus() is
    lowered to it with a warning, once per count, unless OXILLAMA_THREADS_OVERSUBSCRIBE=1 asks for
    it (`oxillama run --threads-oversubscribe`). Counts below 1 are returned for the caller to refuse.
    """
    n = default_threads() if n_threads is None else int(n_threads)
    cpus = logical_cpus()
    if n <= cpus or os.environ.get(OVERSUBSCRIBE_ENV, "") not in ("", "0"):
        return n
    if (n, cpus) not in _warned_oversubscribe:
        _warned_oversubscribe.add((n, cpus))
        logging.getLogger("oxillama").warning(
            "%d threads requested but this process can run on %d logical CPUs: using %d "
            "(set %s=1 to run %d anyway)", n, cpus, cpus, OVERSUBSCRIBE_ENV, n)
    return cpus


def default_threads() -> int:
    """OXILLAMA_NUM_THREADS if set, else the number of physical cores."""
    env = os.environ.get("OXILLAMA_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            logging.getLogger("oxillama").warning("OXILLAMA_NUM_THREADS=%r is not an integer: ignored", env)
    return physical_cores()


def available_memory() -> int | None:
    """Bytes of memory a new allocation can use without swapping: Linux's MemAvailable (bounded by a
    cgroup memory limit when there is one), else the free physical pages; None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    for path, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(path) as f, open(usage) as g:
                limit, used = f.read().strip(), int(g.read().strip())
            if limit != "max" and int(limit) < 1 << 60:
                avail = min(avail, max(0, int(limit) - used))
            break
        except (OSError, ValueError):
            continue
    return avail


def system_info() -> dict:
    """CPU features detected, the SIMD tier each quant type's kernel uses, the repacked weight layouts a
    loaded model's matrices of those types are copied into (repack=True, the default), OpenMP, default
    threads."""
    from oxillama import _core
    return {
        "cpu_features": _core.cpu_features(),
        "kernels": _core.kernel_tiers(),
        "repacked_layouts": _core.repacked_layouts(),
        "active_tier": _core.active_tier(),
        "usable_tiers": _core.usable_tiers(),
        "compiled_tiers": _core.compiled_tiers(),
        "openmp": _core.openmp_enabled(),
        "n_threads": default_threads(),
        "logical_cpus": logical_cpus(),
    }


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_heap() -> None:
    """Give the heap pages freed by a large build (a vocabulary's temporary lists and dicts) back to
    the OS. glibc keeps freed small blocks in its arenas, so after a 262k-token tokenizer is built the
    process would stay ~40 MB larger than what it still uses; elsewhere this does nothing."""
    trim = _malloc_trim()
    if trim is not None:
        import gc
        gc.collect()
        trim(0)
