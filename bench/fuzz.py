"""Long fuzz runs of oxillama's entry points (issue 22), each case in a child process.

    python bench/fuzz.py [--seconds 180] [--targets chat_template,gbnf,...] [--timeout 20] [--memory-mb 3072]
                         [--out bench/fuzz-findings]

The targets and their input strategies are tests/fuzz/targets.py (the same ones the test suite runs
with a small budget). The parent draws inputs with hypothesis (random seed, no shrinking) and forks one
child per case; the child runs the check under RLIMIT_AS (memory) and RLIMIT_CPU, the parent kills it
after --timeout seconds of wall time. A case is a finding when the child raised something other than an
OxillamaError, ran out of time or memory, or died. Findings are saved under --out/<target>/ as a pickle
of the input (reload with pickle.load and call the target's check) plus a text file with the input's
repr and the child's report. The parent never runs a forward pass itself, so forked children do not
inherit OpenMP threads.

Prints, per target: cases run, findings by kind, cases/s. Exit status 1 when anything was found.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import resource
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))     # tests.fuzz.targets

OK, BARE, TIMEOUT, MEMORY, CRASH = "ok", "bare-exception", "timeout", "memory", "crash"


def run_child(check, state, case, timeout: float, memory_mb: int) -> tuple[str, str]:
    """(kind, report) of one case run in a forked child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: limits, run, report through the pipe, exit without cleanup
        os.close(r)
        code = 0
        try:
            limit = memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            cpu = int(timeout) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            check(state, case)
            msg = OK
        except MemoryError:
            msg, code = MEMORY + "\n" + traceback.format_exc(), 3
        except BaseException:   # noqa: BLE001 -- anything else is what the fuzzer looks for
            msg, code = BARE + "\n" + traceback.format_exc(), 2
        try:    # never return into the parent's copy of hypothesis, whatever happens here
            os.write(w, msg.encode("utf-8", "replace")[:65536])
            os.close(w)
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    status = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return TIMEOUT, f"no result after {timeout} s"
        time.sleep(0.002)
    with os.fdopen(r, "rb") as fh:
        report = fh.read().decode("utf-8", "replace")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        kind = TIMEOUT if sig in (signal.SIGXCPU, signal.SIGKILL) else CRASH
        return kind, f"killed by signal {sig}\n{report}"
    return (report.split("\n", 1)[0] or CRASH), report


def fuzz_target(name: str, seconds: float, timeout: float, memory_mb: int, out: str) -> dict:
    from hypothesis import HealthCheck, Phase, given, settings

    from tests.fuzz.targets import TARGETS

    strategy, setup, check = TARGETS[name]
    state = setup()
    counts = {OK: 0, BARE: 0, TIMEOUT: 0, MEMORY: 0, CRASH: 0}
    seen: set = set()
    stop_at = time.monotonic() + seconds

    @settings(max_examples=10**9, deadline=None, database=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case):
        if time.monotonic() > stop_at:
            raise _Done()
        nonlocal state
        kind, report = run_child(check, state, case, timeout, memory_mb)
        if hasattr(state, "alive") and not state.alive():    # a server target whose process died
            kind, report = CRASH, f"the server process died\n{report}"
            state.close()
            state = setup()
        counts[kind] = counts.get(kind, 0) + 1
        if kind != OK:
            save(out, name, kind, case, report, seen)

    try:
        run()
    except _Done:
        pass
    finally:
        if hasattr(state, "close"):
            state.close()
    return counts


class _Done(Exception):
    pass


def save(out: str, name: str, kind: str, case, report: str, seen: set) -> None:
    # one file per distinct (kind, last line of the report): the same bug found again is not saved again
    signature = kind + "|" + (report.strip().splitlines() or [""])[-1][:200]
    if signature in seen:
        return
    seen.add(signature)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    digest = hashlib.sha256(signature.encode()).hexdigest()[:12]
    try:
        with open(os.path.join(folder, f"{kind}-{digest}.pkl"), "wb") as fh:
            pickle.dump(case, fh)
    except Exception:   # noqa: BLE001 -- an unpicklable input still gets its text file
        pass
    with open(os.path.join(folder, f"{kind}-{digest}.txt"), "w") as fh:
        fh.write(f"target: {name}\nkind: {kind}\ninput: {case!r}\n\n{report}\n")


def main(argv=None) -> int:
    from tests.fuzz.targets import TARGETS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=180.0, help="run time per target (default 180)")
    p.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, from: {', '.join(TARGETS)}")
    p.add_argument("--timeout", type=float, default=20.0, help="wall seconds per case (default 20)")
    p.add_argument("--memory-mb", type=int, default=3072, help="address-space limit per case (default 3072)")
    p.add_argument("--out", default=os.path.join(HERE, "fuzz-findings"), help="where findings are saved")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    found = 0
    for name in args.targets.split(","):
        name = name.strip()
        if name not in TARGETS:
            p.error(f"unknown target {name!r}")
        t0 = time.monotonic()
        counts = fuzz_target(name, args.seconds, args.timeout, args.memory_mb, args.out)
        dt = time.monotonic() - t0
        total = sum(counts.values())
        bad = total - counts[OK]
        found += bad
        detail = ", ".join(f"{k} {v}" for k, v in counts.items() if v and k != OK) or "nothing found"
        print(f"{name:14} {total:7d} cases in {dt:6.1f} s ({total / dt:6.1f}/s): {detail}", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
