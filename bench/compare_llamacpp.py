"""oxillama against llama.cpp (llama-cpp-python) on the same GGUF, thread count and prompts.

    python bench/compare_llamacpp.py [-m MODEL ...] [-t THREADS] [--rounds N] [--json out.json]

Each measurement runs in a fresh child process, alternating oxillama and llama.cpp round by round,
so neither library's threads, caches or memory disturb the other. Reported per model:

  prefill   tokens/s for a 512-token prompt from an empty cache
  decode    tokens/s for 128 greedy tokens after a short prompt
  decode@1k tokens/s for 128 greedy tokens after a 1,024-token prompt (--long N: after N tokens)
  rss       resident memory after the run (oxillama: file size + repacked weights + KV cache + the rest)

--file-layout adds oxillama with repack=False (weights read in the file's layout only) to every round.

and, per library, the median over rounds of decode@1k / decode (how much a long context slows decode).
With --bandwidth the memory read bandwidth is measured in C (bench/membw.py) before each round, and
decode is also given as a share of the limit file bytes / bandwidth (every weight is read once per token;
the KV cache read after a long prompt is not counted, so long-context shares run lower).
With --beside N the short-prompt decode runs in N slices inside each child, and decode is also given as the
share of its weight bytes per second (every tensor, but the embedding table of a model with its own output
matrix) over the read bandwidth probed in C on either side of the slice (membw.ReadProbe, 1 GiB, 2 threads):
median over the slices, then over the rounds. This VM's bandwidth swings 19-27 GB/s within minutes, so a reading
once a round does not say what a decode got; one beside each slice does. The probe runs in THIS (the parent)
process while the child waits on its pipe: before each slice and after the last the child asks for a reading and
blocks; the parent waits --settle ms (50) so that the child's threads have gone idle (libgomp's default wait
policy spins for a while after each parallel region; llama.cpp's OpenMP team too), reads its buffer with
pthreads started and joined for the read (no OpenMP team of its own to linger beside the next slice), and
answers. So every probe reads the same buffer in the same process under the same conditions,
whichever library the child runs, and the parent also probes the same way with no model process at all after
each child exits: the three medians are printed side by side ("probe beside oxillama / llama.cpp / alone"),
and the method is sound when they agree within the noise. (Shares by the clock, and by CPU time: decode's
process CPU time per thread against each probe thread's own CPU time, which load from other processes
disturbs far less.)
For real-size models, bench/real_size_models.py writes SmolLM2-1.7B's shapes with random weights:

    python bench/real_size_models.py && python bench/compare_llamacpp.py --bandwidth --long 2048 \
        -m /work/models/smollm2-1.7b-random.Q4_0.gguf

with min/median/max over the rounds and the median ratio oxillama / llama.cpp. Without
llama-cpp-python installed it says so and exits with status 2.

    python bench/compare_llamacpp.py --interleaved [-m MODEL ...] [-t THREADS]

instead loads both libraries in one process and alternates them token by token during greedy decode
(short prompt and 1,024-token prompt), printing per-token median tokens/s and the ratio. Each library's
idle threads may disturb the other a little, but both always see the same machine: on a shared VM whose
speed drifts between runs this ratio holds much steadier than the round-by-round one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N_PREFILL = 512
N_DECODE = 128
N_LONG = 1024


def _prompt_ids(n_vocab: int, n: int, bos: int | None) -> list[int]:
    """A deterministic token sequence of ordinary ids (the same for both libraries)."""
    ids = [(1000 + 7919 * i) % min(n_vocab, 30000) + 100 for i in range(n)]
    if bos is not None:
        ids[0] = bos
    return ids


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


def _n_ctx(n_long: int, n_decode: int = N_DECODE) -> int:
    return max(n_long, N_PREFILL) + n_decode + 16


def _long_key(n_long: int) -> str:
    return f"decode@{n_long // 1024}k" if n_long % 1024 == 0 else f"decode@{n_long}"


def _decode_cases(n_long: int) -> list[tuple[str, int]]:
    """(key, prompt tokens) of the decode figures; --long 0 leaves out the long-context one"""
    return [("decode", 16)] + ([(_long_key(n_long), n_long)] if n_long else [])


PROBE_MB = 1024   # the bandwidth probe's buffer beside a decode: 2-4x the L3 of the Xeon, ~50 ms a read
SETTLE = 0.05     # seconds the parent waits before each probe: the child's threads go idle
_probe = None     # the parent's ReadProbe, made at the first child that decodes in slices
PROBE_TAG = "@probe"


def parent_probe(threads: int, settle: float = SETTLE) -> tuple[float, float]:
    """A read of the parent's probe buffer (GB/s by the clock, by CPU time) after `settle` seconds idle."""
    global _probe
    from membw import ReadProbe

    if _probe is None or _probe.n_threads != threads:
        if _probe is not None:
            _probe.close()
        _probe = ReadProbe(threads, PROBE_MB)
    time.sleep(settle)
    return _probe.read()


def child_probe() -> tuple[float, float]:
    """In a worker child: ask the parent for a probe reading and wait for it (this process stays idle)."""
    sys.stdout.write(PROBE_TAG + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline().split()
    if len(line) != 2:
        raise RuntimeError("the parent did not answer the probe request")
    return float(line[0]), float(line[1])


def weight_bytes(model: str) -> int:
    """The tensor bytes one decode step reads: every tensor, but the token embedding table where the file has
    an output matrix of its own (a step reads one row of the table; a tied table is the output matrix)."""
    from oxillama.gguf.reader import GGUFFile

    f = GGUFFile(model)
    untied = "output.weight" in f.tensors
    return sum(t.nbytes for name, t in f.tensors.items() if not (untied and name == "token_embd.weight"))


def timed_decode(step, n_decode: int, threads: int, model: str, slices: int = 0, probe=child_probe) -> dict:
    """step() decodes one token; n_decode of them. {"tok/s"} by the clock; with slices > 0 the tokens run in that
    many slices with a reading of probe() (GB/s by the clock, by CPU time; by default the parent's, asked over
    the pipe) before each and after the last, and the dict also holds the
    decode's share of the bandwidth beside it: per slice, the weight bytes per second over the mean of the two
    reads around it, the median of the slices ("share"; by CPU time "share_cpu": decode's process CPU time over
    threads against the probe's per-thread CPU rate), and the probe's median GB/s ("bw", "bw_cpu")."""
    if slices <= 0:
        t = time.perf_counter()
        for _ in range(n_decode):
            step()
        return {"tok/s": n_decode / (time.perf_counter() - t)}
    wbytes = weight_bytes(model)
    cuts = [n_decode * i // slices for i in range(slices + 1)]
    wall = 0.0
    share, share_cpu = [], []
    bw = [probe()]
    for i in range(slices):
        n = cuts[i + 1] - cuts[i]
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n):
            step()
        dt, dc = time.perf_counter() - t, time.process_time() - c
        bw.append(probe())
        wall += dt
        if n:
            share.append(n * wbytes / dt / 1e9 / ((bw[-2][0] + bw[-1][0]) / 2))
            share_cpu.append(n * wbytes / (dc / threads) / 1e9 / ((bw[-2][1] + bw[-1][1]) / 2))
    return {"tok/s": n_decode / wall, "share": statistics.median(share), "share_cpu": statistics.median(share_cpu),
            "bw": statistics.median(b[0] for b in bw), "bw_cpu": statistics.median(b[1] for b in bw)}


def _decode_figures(res: dict, key: str, d: dict) -> None:
    """timed_decode's figures into a worker's result: key's tokens/s, and beside the short-prompt decode its
    shares of the probed bandwidth"""
    res[key] = d["tok/s"]
    for k in ("share", "share_cpu", "bw", "bw_cpu"):
        if k in d:
            res[f"{key}_{k}"] = d[k]


def worker_oxillama(model: str, threads: int, n_long: int = N_LONG, n_decode: int = N_DECODE,
                    repack: bool = True, slices: int = 0) -> dict:
    import numpy as np

    from oxillama.runtime import InferenceEngine

    engine = InferenceEngine.from_gguf(model, n_ctx=_n_ctx(n_long, n_decode), n_threads=threads, n_batch=512,
                                       repack=repack)
    bos = engine.tokenizer.bos_id
    res = {}
    prompt = _prompt_ids(engine.n_vocab, N_PREFILL, bos)
    engine.forward(prompt[:8])            # warm-up: page in weights
    engine.reset()
    t = time.perf_counter()
    engine.forward(prompt)
    res["prefill"] = N_PREFILL / (time.perf_counter() - t)
    for key, n_prompt in _decode_cases(n_long):
        engine.reset()
        logits = [engine.forward(_prompt_ids(engine.n_vocab, n_prompt, bos))]

        def step():
            logits[0] = engine.forward([int(np.argmax(logits[0]))])

        _decode_figures(res, key, timed_decode(step, n_decode, threads, model, slices if key == "decode" else 0))
    res["rss_mb"] = _rss_mb()
    res["file_mb"] = os.path.getsize(model) / 2**20
    res["kv_mb"] = engine.kv.memory_bytes() / 2**20
    res["repacked_mb"] = engine.model.repacked_bytes / 2**20
    return res


def worker_llamacpp(model: str, threads: int, n_long: int = N_LONG, n_decode: int = N_DECODE,
                    slices: int = 0) -> dict:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model, n_ctx=_n_ctx(n_long, n_decode), n_threads=threads, n_threads_batch=threads, n_batch=512,
                          verbose=False)
    bos = llm.token_bos() if llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true" else None
    n_vocab = llm.n_vocab()
    res = {}
    prompt = _prompt_ids(n_vocab, N_PREFILL, bos)
    llm.eval(prompt[:8])
    llm.reset()
    t = time.perf_counter()
    llm.eval(prompt)
    res["prefill"] = N_PREFILL / (time.perf_counter() - t)
    for key, n_prompt in _decode_cases(n_long):
        llm.reset()
        llm.eval(_prompt_ids(n_vocab, n_prompt, bos))

        def step():
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
            llm.eval([int(np.argmax(logits))])

        _decode_figures(res, key, timed_decode(step, n_decode, threads, model, slices if key == "decode" else 0))
    res["rss_mb"] = _rss_mb()
    return res


def interleaved_decode(model: str, threads: int, n_prompt: int, n_tokens: int = N_DECODE) -> dict:
    """Per-token seconds of greedy decode for both libraries, alternating every token in this process."""
    import llama_cpp
    import numpy as np

    from oxillama.runtime import InferenceEngine

    n_ctx = n_prompt + n_tokens + 8
    engine = InferenceEngine.from_gguf(model, n_ctx=n_ctx, n_threads=threads, n_batch=512)
    llm = llama_cpp.Llama(model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512,
                          verbose=False)
    try:
        n_vocab = llm.n_vocab()
        prompt = _prompt_ids(min(engine.n_vocab, n_vocab), n_prompt, engine.tokenizer.bos_id)
        tok_ox = int(np.argmax(engine.forward(prompt)))
        llm.eval(prompt)
        tok_lc = tok_ox
        times = {"oxillama": [], "llamacpp": []}
        for _ in range(n_tokens):
            t = time.perf_counter()
            tok_ox = int(np.argmax(engine.forward([tok_ox])))
            times["oxillama"].append(time.perf_counter() - t)
            t = time.perf_counter()
            llm.eval([tok_lc])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
            tok_lc = int(np.argmax(logits))
            times["llamacpp"].append(time.perf_counter() - t)
    finally:
        engine.close()
        llm.close()
    return times


def main_interleaved(models: list[str], threads: int) -> int:
    for model in models:
        print(f"\n{os.path.basename(model)}  (tokens/s, per-token median, libraries alternated each token)")
        for key, n_prompt in (("decode", 16), ("decode@1k", N_LONG)):
            t = interleaved_decode(model, threads, n_prompt)
            ox, lc = statistics.median(t["oxillama"]), statistics.median(t["llamacpp"])
            print(f"{key:12s} oxillama {1 / ox:8.1f}   llama.cpp {1 / lc:8.1f}   ratio {lc / ox:5.2f}x")
    return 0


def run_child(lib: str, model: str, threads: int, n_long: int = N_LONG, n_decode: int = N_DECODE,
              slices: int = 0, settle: float = SETTLE, alone: list | None = None) -> dict:
    """The figures of one child process running lib on model. With slices > 0 this process answers the child's
    probe requests (parent_probe, `settle` seconds idle before each reading), and after the child
    exits it appends one reading with no model process at all to `alone` (if given)."""
    import tempfile

    cmd = [sys.executable, __file__, "--worker", lib, "-m", model, "-t", str(threads), "--long", str(n_long),
           "--decode-tokens", str(n_decode), "--beside", str(slices)]
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                 bufsize=1)
        last = ""
        for line in child.stdout:
            if line.strip() == PROBE_TAG:
                gbs, gbs_cpu = parent_probe(threads, settle)
                child.stdin.write(f"{gbs!r} {gbs_cpu!r}\n")
                child.stdin.flush()   # the reading's threads are joined: the child goes on beside none
            elif line.strip():
                last = line
        child.stdin.close()
        rc = child.wait()
        if rc != 0:
            err.seek(0)
            raise RuntimeError(f"{lib} worker failed:\n{err.read()[-3000:]}")
    if slices and alone is not None:
        alone.append(parent_probe(threads, settle))
    return json.loads(last)


def _stats(values: list[float]) -> str:
    return f"{min(values):8.1f} {statistics.median(values):8.1f} {max(values):8.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF path or known model name (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=None, help="threads for both (default: physical cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--interleaved", action="store_true", help="decode only, both libraries in this process, "
                                                               "alternating every token")
    ap.add_argument("--long", type=int, default=N_LONG, help="prompt tokens before the long-context decode "
                                                          "(0: none)")
    ap.add_argument("--decode-tokens", type=int, default=N_DECODE, help="greedy tokens per decode figure")
    ap.add_argument("--bandwidth", action="store_true", help="measure the read bandwidth in C before each "
                                                             "round and give decode as a share of its limit")
    ap.add_argument("--beside", type=int, default=0, metavar="N",
                    help="decode in N slices with the read bandwidth probed around each, and its share of it")
    ap.add_argument("--settle", type=float, default=SETTLE * 1e3, metavar="MS",
                    help="--beside: milliseconds idle before each probe reading")
    ap.add_argument("--file-layout", action="store_true", help="also run oxillama with repack=False (the "
                                                               "weights in the file's layout only) in the rounds")
    ap.add_argument("--worker", choices=["oxillama", "llamacpp", "oxillama-file"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not (args.long == 0 or args.long >= 16) or args.decode_tokens < 1:
        ap.error("--long must be 0 (no long-context decode) or at least 16, --decode-tokens at least 1")
    if not 0 <= args.beside <= args.decode_tokens:
        ap.error("--beside must be between 0 and --decode-tokens")
    if args.settle < 0:
        ap.error("--settle must be >= 0")

    if args.worker:
        if args.worker == "llamacpp":
            res = worker_llamacpp(args.model[0], args.threads, args.long, args.decode_tokens, args.beside)
        else:
            res = worker_oxillama(args.model[0], args.threads, args.long, args.decode_tokens,
                                  repack=args.worker == "oxillama", slices=args.beside)
        print(json.dumps(res))
        return 0

    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python is not installed: `pip install llama-cpp-python` to compare with llama.cpp",
              file=sys.stderr)
        return 2
    from oxillama import hub
    from oxillama._system import default_threads

    threads = args.threads or default_threads()
    models = [str(hub.resolve_model(m)) for m in (args.model or ["smollm2-135m", "gemma3-270m"])]
    cpu = _cpu_name()
    if args.interleaved:
        print(f"CPU: {cpu}; threads: {threads}; interleaved per token")
        return main_interleaved(models, threads)
    print(f"CPU: {cpu}; threads: {threads}; rounds: {args.rounds}")
    long_key = _long_key(args.long)
    results = {}
    bandwidth = []
    for model in models:
        libs = ["oxillama", "llamacpp"] + (["oxillama-file"] if args.file_layout else [])
        runs = {lib: [] for lib in libs}
        alone = []
        for r in range(args.rounds):
            if args.bandwidth:
                from membw import read_bandwidth
                bandwidth.append(read_bandwidth(threads))
            order = libs[r % len(libs):] + libs[:r % len(libs)]   # each library first in turn
            for lib in order:
                runs[lib].append(run_child(lib, model, threads, args.long, args.decode_tokens, args.beside,
                                           args.settle / 1e3, alone))
        results[os.path.basename(model)] = runs
        file_gb = os.path.getsize(model) / 1e9
        print(f"\n{os.path.basename(model)}  ({file_gb:.2f} GB)")
        print(f"{'':12s} {'library':9s} {'min':>8s} {'median':>8s} {'max':>8s}  tokens/s")
        keys = ["prefill"] + [key for key, _ in _decode_cases(args.long)]
        for key in keys:
            for lib in libs:
                print(f"{key:12s} {lib:9s} {_stats([x[key] for x in runs[lib]])}")
            for lib in [x for x in libs if x != "llamacpp"]:
                ratio = statistics.median(x[key] for x in runs[lib]) / statistics.median(
                    x[key] for x in runs["llamacpp"])
                name = "ratio" if lib == "oxillama" else "ratio (file layout)"
                print(f"{key:12s} {name:9s} {ratio:26.2f}x")
        if args.long:
            # decode after the long prompt against decode after a short prompt, per round (the same process)
            slow = {lib: statistics.median(x[long_key] / x["decode"] for x in runs[lib]) for lib in runs}
            print(f"{long_key} / decode: oxillama {slow['oxillama']:.2f}, llama.cpp {slow['llamacpp']:.2f}")
        if bandwidth:
            bw = statistics.median(bandwidth)
            limit = bw / file_gb
            shares = ", ".join(f"{lib} {statistics.median(x['decode'] for x in runs[lib]) / limit:.0%}"
                               for lib in runs)
            print(f"read bandwidth {bw:.1f} GB/s (median of {len(bandwidth)}, C): decode limit {limit:.1f} "
                  f"tokens/s; decode's share: {shares}")
        if args.beside:
            for k, what in (("share", "by the clock"), ("share_cpu", "by CPU time")):
                shares = ", ".join(f"{lib} {statistics.median(x['decode_' + k] for x in runs[lib]):.0%}" for lib in runs)
                bw = statistics.median(x["decode_bw" + k[5:]] for lib in runs for x in runs[lib])
                print(f"decode's share of the read bandwidth beside it ({what}, median probe {bw:.1f} GB/s): {shares}")
            print(probe_line(runs, alone))
        ox = runs["oxillama"][-1]
        packed = ox.get("repacked_mb", 0.0)
        extra = ox["rss_mb"] - ox["file_mb"] - ox["kv_mb"] - packed
        print(f"rss: oxillama {ox['rss_mb']:.0f} MB (file {ox['file_mb']:.0f} + repacked {packed:.0f} + KV "
              f"{ox['kv_mb']:.0f} + {extra:.0f}), llama.cpp {runs['llamacpp'][-1]['rss_mb']:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "threads": threads, "bandwidth_gbs": bandwidth, "results": results}, f,
                      indent=1)
    return 0


def probe_line(runs: dict, alone: list) -> str:
    """The probe's median GB/s beside each library's decode and with no model process (by the clock / CPU time):
    the method is sound when they agree within the noise."""
    cells = [f"{lib} {statistics.median(x['decode_bw'] for x in r):.1f} / "
             f"{statistics.median(x['decode_bw_cpu'] for x in r):.1f}" for lib, r in runs.items()]
    if alone:
        cells.append(f"alone {statistics.median(a[0] for a in alone):.1f} / "
                     f"{statistics.median(a[1] for a in alone):.1f}")
    return "probe GB/s (by the clock / by CPU time) beside " + ", ".join(cells)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
