"""Single-sequence speed of two builds of oxillama, alternating child processes (A B A B ...).

    python bench/compare_builds.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 5] [--models smollm2-135m gemma3-270m]

Each checkout must hold an in-place build (`python setup.py build_ext --inplace`). Each child loads the model
and measures prefill of 512 tokens, decode after a 16-token prompt and decode after 1,024 tokens (tokens/s of
forward(), median over the tokens), generate()'s decode (its predicted tokens over predicted_ms: forward,
sampling and detokenizing, greedy, 64 tokens) and 8 sequences decoded together by a Scheduler (tokens/s over
the whole batch, 8 x 32 tokens); the table gives the medians over the rounds and NEW / OLD. Alternating
processes keep a drifting machine from favouring one build.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
from oxillama import InferenceEngine, hub
from oxillama.runtime.scheduler import Scheduler
name, threads = sys.argv[1], int(sys.argv[2])
e = InferenceEngine.from_gguf(hub.pull(name, progress=False), n_ctx=1200, n_threads=threads)
ids = [(1000 + 7919 * i) % min(e.n_vocab, 30000) + 100 for i in range(1100)]
def decode(n_prompt, n=48):
    e.reset()
    tok = int(np.argmax(e.forward(ids[:n_prompt])))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        tok = int(np.argmax(e.forward([tok])))
        times.append(time.perf_counter() - t)
    return 1 / float(np.median(times))
no_eog = {t: -1e30 for t in e.tokenizer.eog_ids}     # every run decodes its whole max_tokens
def generate(n=64):
    c = e.generate(ids[:16], max_tokens=n, temperature=0, logit_bias=no_eog)
    return c.timings.predicted_n / (c.timings.predicted_ms / 1e3)
def batch8(n=32):
    with Scheduler(e, n_seq_max=8) as s:
        s.submit(ids[:8], max_tokens=2, temperature=0).result()
        t = time.perf_counter()
        handles = [s.submit(ids[i:i + 16], max_tokens=n, temperature=0.8, seed=i, logit_bias=no_eog)
                   for i in range(8)]
        done = sum(len(h.result().tokens) for h in handles)
        return done / (time.perf_counter() - t)
e.reset(); e.forward(ids[:64])
e.reset()
t = time.perf_counter(); e.forward(ids[:512]); prefill = 512 / (time.perf_counter() - t)
print(json.dumps({"prefill": prefill, "decode": decode(16), "decode_1k": decode(1024), "generate": generate(),
                  "batch8": batch8()}))
"""


def run(checkout: str, model: str, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(threads)], env=env, capture_output=True, text=True,
                         cwd=os.path.abspath(checkout), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    args = ap.parse_args()
    for model in args.models:
        results = {"old": [], "new": []}
        for _ in range(args.rounds):
            for which in ("old", "new"):
                results[which].append(run(getattr(args, which), model, args.threads))
        print(f"{model} (tokens/s, median of {args.rounds} alternating rounds, {args.threads} threads)")
        for key in ("prefill", "decode", "decode_1k", "generate", "batch8"):
            old = statistics.median(r[key] for r in results["old"])
            new = statistics.median(r[key] for r in results["new"])
            print(f"  {key:10s} old {old:8.1f}  new {new:8.1f}  new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
