"""What serving costs on top of batching: 8 concurrent streaming requests through `oxillama serve --parallel 8`
against InferenceEngine.generate_batch on the same 8 prompts (issue 35: the server within 10% of it).

    python bench/bench_server_vs_batch.py [-m MODEL] [-t THREADS] [--tokens 64] [--rounds 3]
    pytest bench/bench_server_vs_batch.py --benchmark-only -s

Both sides run the same prompts (token ids, so no chat template or tokenizer difference; new ones every round, so
the server's prompt cache finds nothing from a warm-up or an earlier round), the same sampling
(temperature 0.8, a seed per prompt, ignore_eos: every request generates exactly --tokens tokens; the server
bans the end-of-generation tokens for it with a -inf logit bias, as llama.cpp's server does, and generate_batch
is given the same bias, so both sides run the same sampler chain) and the same thread count; rounds alternate a
server burst and a generate_batch child process (each loads the model once and warms up first). The client
runs on the same machine, so it is lean (server_process.stream_raw: a bare connection whose socket
reports data only once the stream has ended; the streams are decoded once all have ended); its CPU per
token is reported beside the server's. Per side, per round:
  tokens/s   generated tokens over the wall time from sending the requests to the last one ending
  cpu ms/tok the process's CPU time (user + system, every thread: forward, scheduler, sampling, detokenizing,
             HTTP, SSE) over the same span per generated token; on a machine shared with other work this
             ratio holds much steadier than the wall figure, and it is what the server adds per token.
Reported: medians over rounds, and server / generate_batch for both; for the server also the CPU per token of
its main thread (the event loop: HTTP, SSE, JSON; the forward and sampling run on the scheduler's threads)
and of the client.
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

from server_process import ServerProcess, checkout_env, parse_raw, proc_cpu_seconds, read_raw, thread_cpu_seconds

N_SEQ = 8
PROMPT_TOKENS = 24

BATCH_CHILD = r"""
import json, os, sys, time
from oxillama import InferenceEngine
model, threads, n_tokens, (warm, prompts) = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
e = InferenceEngine.from_gguf(model, n_ctx=1024, n_threads=threads)
# the server's ignore_eos: the end-of-generation tokens banned by a -inf bias (oxillama.openai.request)
kw = dict(max_tokens=n_tokens, temperature=0.8, ignore_eos=True,
          logit_bias={t: float("-inf") for t in e.tokenizer.eog_ids})
e.generate_batch(warm, **dict(kw, max_tokens=4))           # warm-up: every slot used once
out = []
for r in range(int(sys.argv[5])):
    c0, t0 = os.times(), time.perf_counter()
    done = e.generate_batch(prompts, seed=r, **kw)
    t1, c1 = time.perf_counter(), os.times()
    n = sum(len(c.tokens) for c in done)
    out.append({"tokens": n, "wall": t1 - t0, "cpu": (c1.user - c0.user) + (c1.system - c0.system)})
print(json.dumps(out))
"""


def prompts_for(round_: int, n_vocab: int = 30000) -> list[list[int]]:
    """N_SEQ different prompts of PROMPT_TOKENS ordinary token ids, new ones every round: the server's prompt
    cache (on by default) must not find a round's prompts from an earlier one."""
    return [[(1000 + 7919 * (i + 97 * s + 1009 * round_)) % n_vocab + 100 for i in range(PROMPT_TOKENS)]
            for s in range(N_SEQ)]


async def _stream(url: str, prompt: list[int], n_tokens: int, seed: int) -> tuple[bytes, float]:
    """One streaming completion: its bytes, and when it ended."""
    body = {"prompt": prompt, "max_tokens": n_tokens, "temperature": 0.8, "seed": seed, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    return await read_raw(url, "/v1/completions", body)


def _completion_tokens(raw: bytes) -> int:
    """The completion tokens a stream's usage chunk counts."""
    usage, n_events = parse_raw(raw)
    if n_events < 2:
        raise RuntimeError(f"the stream had {n_events} events")
    return usage["completion_tokens"]


async def _burst(url: str, prompts, n_tokens: int, seed: int, pid: int) -> dict:
    """The 8 streams at once (a lean client: it shares the machine with the server, see stream_raw), decoded
    once the last has ended; the server's CPU seconds and the client's over the same span."""
    o0, m0, c0, t0 = os.times(), thread_cpu_seconds(pid, pid), proc_cpu_seconds(pid), time.perf_counter()
    streams = await asyncio.gather(*(_stream(url, p, n_tokens, seed * 100 + i) for i, p in enumerate(prompts)))
    c1, m1, o1 = proc_cpu_seconds(pid), thread_cpu_seconds(pid, pid), os.times()
    t1 = max(end for _, end in streams)
    counts = [_completion_tokens(raw) for raw, _ in streams]
    return {"tokens": sum(counts), "wall": t1 - t0, "cpu": c1 - c0, "loop_cpu": m1 - m0,
            "client_cpu": (o1.user - o0.user) + (o1.system - o0.system)}


def run(model: str, threads: int = 2, n_tokens: int = 64, rounds: int = 3) -> dict:
    server = ServerProcess(model, parallel=N_SEQ, n_ctx=1024, threads=threads)
    runs = {"server": [], "batch": []}
    try:
        server.wait_ready()
        asyncio.run(_burst(server.url, prompts_for(0), 4, 0, server.proc.pid))     # warm-up: every slot used once
        env = checkout_env()
        for r in range(rounds):
            prompts = prompts_for(1 + r)
            runs["server"].append(asyncio.run(_burst(server.url, prompts, n_tokens, r, server.proc.pid)))
            # the batch side in its own process, one generate_batch per round, while the server idles
            out = subprocess.run([sys.executable, "-c", BATCH_CHILD, model, str(threads), str(n_tokens),
                                  json.dumps([prompts_for(0), prompts]), "1"], env=env, capture_output=True, text=True,
                                 cwd=tempfile.gettempdir())
            if out.returncode != 0:
                raise RuntimeError(f"generate_batch child failed:\n{out.stderr[-3000:]}")
            runs["batch"].extend(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
    fig = {"model": os.path.basename(model), "threads": threads, "tokens_per_request": n_tokens, "rounds": rounds}
    for side, rs in runs.items():
        if any(x["tokens"] != N_SEQ * n_tokens for x in rs):
            raise RuntimeError(f"{side}: expected {N_SEQ * n_tokens} tokens a round, got {[x['tokens'] for x in rs]}")
        fig[side] = {"tokens_per_s": statistics.median(x["tokens"] / x["wall"] for x in rs),
                     "cpu_ms_per_token": statistics.median(1e3 * x["cpu"] / x["tokens"] for x in rs),
                     "rounds_tokens_per_s": [round(x["tokens"] / x["wall"], 1) for x in rs]}
        if side == "server":
            for key in ("loop_cpu", "client_cpu"):
                fig[side][key + "_ms_per_token"] = statistics.median(1e3 * x[key] / x["tokens"] for x in rs)
    fig["server_vs_batch_tokens_per_s"] = fig["server"]["tokens_per_s"] / fig["batch"]["tokens_per_s"]
    fig["server_vs_batch_cpu_per_token"] = fig["server"]["cpu_ms_per_token"] / fig["batch"]["cpu_ms_per_token"]
    return fig


def report(f: dict) -> str:
    lines = [f"{f['model']}: {N_SEQ} requests x {f['tokens_per_request']} tokens, {f['threads']} threads, "
             f"median of {f['rounds']} alternating rounds"]
    for side in ("batch", "server"):
        s = f[side]
        lines.append(f"  {side:7s} {s['tokens_per_s']:8.1f} tokens/s  {s['cpu_ms_per_token']:7.2f} cpu ms/token  "
                     f"rounds {s['rounds_tokens_per_s']}")
    lines.append(f"  (of the server's: its event loop thread {f['server']['loop_cpu_ms_per_token']:.3f} cpu ms/token; "
                 f"the client {f['server']['client_cpu_ms_per_token']:.3f})")
    lines.append(f"  server / generate_batch: tokens/s {f['server_vs_batch_tokens_per_s']:.3f}, "
                 f"cpu per token {f['server_vs_batch_cpu_per_token']:.3f}")
    return "\n".join(lines)


def test_server_vs_batch(benchmark):
    from oxillama import hub
    model = str(hub.pull("smollm2-135m", progress=False))
    figures = benchmark.pedantic(run, args=(model,), rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    print(report(figures))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this checkout's oxillama
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m", help="GGUF path or known model name")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per request")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args()
    from oxillama import hub
    figs = run(str(hub.resolve_model(a.model)), a.threads, a.tokens, a.rounds)
    print(report(figs))
    if a.json:
        Path(a.json).write_text(json.dumps(figs, indent=1))
