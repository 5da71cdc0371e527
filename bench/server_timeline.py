"""Where a streaming server's time goes between forwards: `oxillama serve` run with timestamps on its scheduler
thread and its event loop, under the same 8-stream burst as bench_server_vs_batch.py.

    python bench/server_timeline.py [-m MODEL] [-t THREADS] [--tokens 64] [--rounds 3]

Per decode step (a step whose forward ran only 1-token decodes), medians in ms:
  forward    SequencePool.step (the C forward, GIL released)
  sample     the forward's end to the step's wake-up of the event loop (every request's Decoder.advance)
  schedule   that wake-up to the next forward's start (the next step's plan; a GIL wait shows here)
  loop lag   the wake-up to the loop running its callback
  loop busy  the loop's callback to its last send of the step's events
and how much of the loop's busy span fell inside the next forward (the loop then competes with the forward's
threads for the cores) or before it (the scheduler thread waits for it: Scheduler._step). Context switches and
CPU time per step of every thread of the server come from /proc/PID/task/*/status and stat. A diagnostic: not part
of the test suite.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server_vs_batch import N_SEQ, _burst, prompts_for  # noqa: E402
from server_process import checkout_env, free_port  # noqa: E402

CHILD = r"""
import atexit, json, sys, threading, time
from oxillama.runtime import batch, scheduler
from oxillama.server import sse
out_path = sys.argv[1]
T = {"fwd": [], "wake": [], "loop": [], "send": [], "submit": [], "plan": []}
clock = time.perf_counter

step = batch.SequencePool.step
def timed_step(self, items):
    t = clock()
    try:
        return step(self, items)
    finally:
        T["fwd"].append((t, clock(), len(items), sum(len(x[1]) for x in items)))
batch.SequencePool.step = timed_step

wake_loops = scheduler._wake_loops
def timed_wake(wake):
    T["wake"].append(clock())
    return wake_loops(wake)
scheduler._wake_loops = timed_wake

set_all = scheduler._set_all
def timed_set_all(*args):
    T["loop"].append(clock())
    return set_all(*args)
scheduler._set_all = timed_set_all

send = sse.EventStream._send_with_timeout
async def timed_send(self, s, message):
    await send(self, s, message)
    T["send"].append(clock())
sse.EventStream._send_with_timeout = timed_send

schedule = scheduler.Scheduler._schedule
def timed_schedule(self):
    t = clock()
    try:
        return schedule(self)
    finally:
        T["plan"].append((t, clock()))
scheduler.Scheduler._schedule = timed_schedule

submit = scheduler.Scheduler.submit
def timed_submit(self, prompt, **kw):
    T["submit"].append(clock())
    return submit(self, prompt, **kw)
scheduler.Scheduler.submit = timed_submit

atexit.register(lambda: open(out_path, "w").write(json.dumps(T)))
from oxillama.cli import main
sys.exit(main(sys.argv[2:]))
"""


def ctx_switches(pid: int) -> dict[str, tuple[int, int, float]]:
    """{thread name/tid: (voluntary, nonvoluntary context switches, CPU seconds)} of every thread of pid"""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[f"{st['Name'].strip()}/{tid}"] = (int(st["voluntary_ctxt_switches"]),
                                            int(st["nonvoluntary_ctxt_switches"]),
                                            (int(fields[11]) + int(fields[12])) / tick)
    return out


def analyse(T: dict, spans: list[tuple[float, float]]) -> dict:
    fwd = [f for f in T["fwd"] if any(a <= f[0] <= b for a, b in spans)]
    wakes, loops, sends = sorted(T["wake"]), sorted(T["loop"]), sorted(T["send"])
    rows = []
    for i in range(len(fwd) - 1):
        f0, f1, n_items, n_tok = fwd[i]
        nxt = fwd[i + 1][0]
        if n_tok != n_items or nxt - f1 > 0.5:      # a prefill step, or the last step of a burst
            continue
        w = [x for x in wakes if f1 <= x <= nxt]
        if not w:
            continue
        wk = w[0]
        lp = [x for x in loops if wk <= x <= fwd[i + 1][1]]
        if not lp:
            continue
        lo = lp[0]
        sd = [x for x in sends if lo <= x <= fwd[i + 1][1]]
        end = sd[-1] if sd else lo
        inside = max(0.0, end - max(lo, nxt))
        rows.append({"forward": f1 - f0, "sample": wk - f1, "schedule": nxt - wk, "loop_lag": lo - wk,
                     "loop_busy": end - lo, "busy_in_forward": inside, "busy_before_forward": (end - lo) - inside,
                     "step": nxt - f0})
    med = {k: 1e3 * statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}
    rounds = []
    for a, b in spans:     # the round's wall: before the first forward, the steps, after the last forward
        fs = [f for f in fwd if a <= f[0] <= b]
        sd = [x for x in sends if a <= x <= b]
        sub = [x for x in T["submit"] if a <= x <= b]
        plans = [p for p in T["plan"] if a <= p[0] <= b][:2]
        rounds.append({"wall": b - a, "head": fs[0][0] - a, "forward": sum(f[1] - f[0] for f in fs),
                       "between": fs[-1][1] - fs[0][0] - sum(f[1] - f[0] for f in fs),
                       "after_last_forward": b - fs[-1][1], "last_send_to_end": b - sd[-1],
                       "steps": len(fs), "submits_ms": [round(1e3 * (x - a), 1) for x in sub],
                       "first_plans_ms": [(round(1e3 * (p[0] - a), 1), round(1e3 * (p[1] - a), 1)) for p in plans], "first_steps": [(round(1e3 * (f[0] - a), 1), round(1e3 * (f[1] - f[0]), 1), f[2], f[3]) for f in fs[:3]]})
    return {"decode_steps": len(rows), "steps": len(fwd), "median_ms": med, "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from oxillama import hub
    import httpx
    model = str(hub.resolve_model(a.model))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = Path(tempfile.mkdtemp()) / "timeline.json"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out), "serve", "-m", model, "--port", str(port),
                             "--parallel", str(N_SEQ), "--n-ctx", "1024", "--threads", str(a.threads)],
                            env=checkout_env(), cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    spans, figs = [], []
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        asyncio.run(_burst(url, prompts_for(0), 4, 0, proc.pid))
        for r in range(a.rounds):
            c0 = ctx_switches(proc.pid)
            t0 = time.perf_counter()
            figs.append(asyncio.run(_burst(url, prompts_for(1 + r), a.tokens, r, proc.pid)))
            spans.append((t0, time.perf_counter()))
            c1 = ctx_switches(proc.pid)
            steps = a.tokens + 1
            print(f"round {r}: {figs[-1]['tokens'] / figs[-1]['wall']:.1f} tokens/s; per step and thread, "
                  f"context switches (voluntary, involuntary) and CPU ms: " + ", ".join(
                      f"{k} {(c1[k][0] - c0[k][0]) / steps:.1f},{(c1[k][1] - c0[k][1]) / steps:.1f} "
                      f"{1e3 * (c1[k][2] - c0[k][2]) / steps:.2f}"
                      for k in c1 if k in c0 and c1[k] != c0[k]))
    finally:
        proc.terminate()
        proc.wait(60)
    res = analyse(json.loads(out.read_text()), spans)
    print(f"{res['decode_steps']} decode steps of {res['steps']}; medians (ms): "
          + ", ".join(f"{k} {v:.3f}" for k, v in res["median_ms"].items()))
    for r in res["rounds"]:
        print("round (ms): " + ", ".join(f"{k} {1e3 * v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
