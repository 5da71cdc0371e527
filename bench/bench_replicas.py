"""Throughput of `oxillama serve` behind Ray Serve with 1 vs 2 replicas (1 thread each), beside the plain
single-process server with 2 threads, on loopback (bounded; stops by itself).

    python bench/bench_replicas.py [--duration 30] [--clients 8] [--rounds 2] [-m smollm2-135m]

Each configuration starts the real server, warms it up, then `clients` concurrent clients send
non-streaming chat requests (64 tokens, ignore_eos) back to back for `duration` s; prints generated
tokens/s over all clients, failures and which replicas answered (X-Oxillama-Replica). Configurations
alternate round by round so that drift on a shared VM hits all of them alike; compare the medians.
Needs the ray extra.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_TOKENS = 64
CONFIGS = {
    "1 replica x 1 thread (Ray)": ["--replicas", "1", "--threads-per-replica", "1"],
    "2 replicas x 1 thread (Ray)": ["--replicas", "2", "--threads-per-replica", "1"],
    "1 process x 2 threads (no Ray)": ["--threads", "2"],
}


async def load(url: str, duration: float, clients: int) -> dict:
    import httpx
    tokens, failures, replicas = 0, 0, set()
    until = time.monotonic() + duration

    async def client(i: int):
        nonlocal tokens, failures
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            k = 0
            while time.monotonic() < until:
                body = {"model": "m", "max_tokens": MAX_TOKENS, "ignore_eos": True, "seed": i * 1000 + k,
                        "messages": [{"role": "user", "content": f"Write about topic number {i}-{k}."}]}
                k += 1
                r = await http.post("/v1/chat/completions", json=body)
                if r.status_code != 200:
                    failures += 1
                    continue
                tokens += r.json()["usage"]["completion_tokens"]
                replicas.add(r.headers.get("x-oxillama-replica"))
    t0 = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return {"tok_s": tokens / (time.monotonic() - t0), "failures": failures, "replicas": len(replicas)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    from oxillama import hub
    from tests.server.conftest import start_server
    model = str(hub.resolve_model(args.model))
    seen: dict[str, list] = {name: [] for name in CONFIGS}
    for rnd in range(args.rounds):
        for name, flags in CONFIGS.items():
            server = start_server(model, "--parallel", "8", "--n-ctx", "512", "--drain-timeout", "5", *flags)
            try:
                asyncio.run(load(server.base_url, 3.0, args.clients))      # warm-up
                result = asyncio.run(load(server.base_url, args.duration, args.clients))
            finally:
                server.stop()
            seen[name].append(result)
            print(f"round {rnd + 1} {name:32} {result['tok_s']:7.1f} tok/s, {result['failures']} failed, "
                  f"{result['replicas']} replica(s) answered", flush=True)
    base = statistics.median(r["tok_s"] for r in seen["1 replica x 1 thread (Ray)"])
    for name, results in seen.items():
        med = statistics.median(r["tok_s"] for r in results)
        print(f"median {name:32} {med:7.1f} tok/s ({med / base:.2f}x one replica)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
