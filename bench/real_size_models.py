"""Real-size models with random weights, for speed figures that caches do not flatter.

    python bench/real_size_models.py [--dir /work/models] [--types Q4_0,Q4_K_M,Q8_0,IQ4_XS]
    python bench/real_size_models.py --table [--rounds 3] [-t 2]      # the README table

writes SmolLM2-1.7B's shapes (hidden 2048, 24 layers, FFN 8192, 32 heads, 32 KV heads, tied embeddings,
SmolLM2's tokenizer copied from the 135M test model's metadata) as an F16 GGUF with the `gguf` package, then
lets llama.cpp itself (llama-cpp-python's `llama_model_quantize`) make the quantized files, so both libraries
read the very same bytes. Nothing is downloaded but the small test model. Each file is written under a
temporary name and renamed when complete: a file that exists is whole, and another process may reuse it.

The weights are N(0, 0.02) (norms 1): numbers of the right size, not a language model; greedy decode still
runs the full network, which is all a speed figure needs.

--table then measures every file against llama.cpp (bench/compare_llamacpp.py's child processes: a fresh
process per library and figure set, libraries alternating which goes first round by round) and prints the README
table: prefill of 512 tokens, decode after a 16-token prompt and decode after --long (2,048) tokens, oxillama vs
llama.cpp with the ratio of the medians, and decode's share of the read bandwidth measured beside it: each child
decodes in --beside slices, and before each slice and after the last it asks this (the parent) process for a
read of a 1 GiB buffer in C (bench/membw.py's ReadProbe, 2 pthreads) and waits on its pipe; the parent waits
--settle ms (50) for the child's OpenMP threads to stop spinning, reads, and answers. The share is the slice's
weight bytes per second over the mean of the two reads around it (median of the slices, then of the rounds).
Every probe is the same read in the same process whichever library decodes, and after every child the parent
probes once more with no model process at all: the note under the table gives the probe's median beside each
library and alone, which should agree within the noise (before, each child probed itself, and the reads beside
oxillama's decode came out 13.5-18.6 GB/s against 20.7-22.8 beside llama.cpp's: that inflated oxillama's share).
The VM's bandwidth swings 19-27 GB/s within minutes, so a reading at the start of a round (still given under the
table) does not say what a decode got.
--clock cpu takes both sides by CPU time instead (decode's process CPU time per thread, each probe thread's own
CPU time): for a machine that other jobs load. A round of the four default files takes ~10-15 minutes on the
2-core Xeon; the table is only as steady as the machine is quiet.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SHAPES = dict(n_embd=2048, n_layer=24, n_ff=8192, n_head=32, n_head_kv=32, n_ctx_train=8192,
              rope_theta=130000.0, rms_eps=1e-5)
NAME = "smollm2-1.7b-random"
# llama.cpp's file type ids (llama_ftype), for llama_model_quantize
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_XS": 30,
          "IQ4_NL": 25}
DEFAULT_TYPES = ("Q4_0", "Q4_K_M", "Q8_0", "IQ4_XS")
N_VOCAB = 49152   # SmolLM2's tokenizer


def model_path(directory: str | os.PathLike, qtype: str) -> Path:
    return Path(directory) / f"{NAME}.{qtype}.gguf"


def _copy_tokenizer(writer, src: str) -> None:
    import gguf

    reader = gguf.GGUFReader(src)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, list(value))
        else:
            writer.add_key_value(key, value, vtype)


def begin_f16(path: Path, arch: str, name: str) -> "gguf.GGUFWriter":
    """A GGUFWriter for an F16 file of `arch` at path's temporary name, with its name, file type and SmolLM2's
    tokenizer (copied from the 135M test model) and vocabulary size set: the part every real-size file shares.
    The caller adds its own keys and tensors, then calls finish_f16."""
    import gguf

    from oxillama import hub

    w = gguf.GGUFWriter(str(path.with_suffix(".tmp")), arch)
    w.add_name(name)
    w.add_file_type(1)   # MOSTLY_F16
    _copy_tokenizer(w, str(hub.resolve_model("smollm2-135m")))
    w.add_vocab_size(N_VOCAB)
    return w


def finish_f16(w, path: Path) -> None:
    """Write out a begin_f16 writer and rename its file to path (a file that exists is whole)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path.with_suffix(".tmp"), path)


def rand_f16(rng, *shape) -> "np.ndarray":
    """N(0, 0.02) weights stored as F16 (what llama_model_quantize then quantizes)"""
    import numpy as np

    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)


def write_f16(path: Path, seed: int = 0) -> None:
    """The F16 file (3.4 GB), under a temporary name renamed at the end."""
    import numpy as np

    s = SHAPES
    w = begin_f16(path, "llama", NAME)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx_train"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_rope_dimension_count(s["n_embd"] // s["n_head"])

    rng = np.random.default_rng(seed)

    def rand(rows: int, cols: int) -> "np.ndarray":
        return rand_f16(rng, rows, cols)

    E, F, hd = s["n_embd"], s["n_ff"], s["n_embd"] // s["n_head"]
    w.add_tensor("token_embd.weight", rand(N_VOCAB, E))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "attn_q.weight", rand(s["n_head"] * hd, E))
        w.add_tensor(p + "attn_k.weight", rand(s["n_head_kv"] * hd, E))
        w.add_tensor(p + "attn_v.weight", rand(s["n_head_kv"] * hd, E))
        w.add_tensor(p + "attn_output.weight", rand(E, s["n_head"] * hd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(F, E))
        w.add_tensor(p + "ffn_up.weight", rand(F, E))
        w.add_tensor(p + "ffn_down.weight", rand(E, F))
    finish_f16(w, path)


def quantize(src: Path, dst: Path, qtype: str, threads: int) -> None:
    """llama.cpp's own quantization of src into dst (temporary name, renamed when done)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[qtype]
    params.nthread = threads
    tmp = dst.with_suffix(".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {qtype} failed with {rc}")
    os.replace(tmp, dst)


def ensure_file(dst: Path, f16: Path, write_f16_fn, qtype: str, threads: int = 2) -> Path:
    """dst, llama.cpp's qtype quantization of f16, made if missing (f16 written first by write_f16_fn(f16) if
    missing too). Every real-size bench file goes through here."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        if not f16.exists():
            print(f"writing {f16}", file=sys.stderr)
            write_f16_fn(f16)
        print(f"quantizing {dst}", file=sys.stderr)
        quantize(f16, dst, qtype, threads)
    return dst


def ensure(directory: str | os.PathLike, types=DEFAULT_TYPES, threads: int = 2) -> dict[str, Path]:
    """Paths of the quantized files, making whichever is missing (the F16 file first)."""
    f16 = model_path(directory, "F16")
    return {qtype: ensure_file(model_path(directory, qtype), f16, write_f16, qtype, threads) for qtype in types}


def measure(paths: dict[str, Path], threads: int, rounds: int, n_long: int, n_decode: int, beside: int = 4,
            settle: float = 0.05) -> dict:
    """Per type, per library, the figure sets of every round; the bandwidth of every round (GB/s); per type the
    probe readings with no model process ("alone": (GB/s by the clock, by CPU time) after each child)."""
    import compare_llamacpp as cl
    from membw import read_bandwidth

    runs = {q: {"oxillama": [], "llamacpp": []} for q in paths}
    alone = {q: [] for q in paths}
    bandwidth = []
    for r in range(rounds):
        bandwidth.append(read_bandwidth(threads))
        print(f"round {r + 1}/{rounds}: read bandwidth {bandwidth[-1]:.1f} GB/s", file=sys.stderr)
        for qtype, path in paths.items():
            for lib in (("oxillama", "llamacpp") if (r + list(paths).index(qtype)) % 2 == 0
                        else ("llamacpp", "oxillama")):
                runs[qtype][lib].append(cl.run_child(lib, str(path), threads, n_long, n_decode, beside, settle,
                                                     alone[qtype]))
                print(f"  {qtype:7s} {lib:9s} " + ", ".join(f"{k} {v:.1f}" for k, v in runs[qtype][lib][-1].items()
                                                          if not k.endswith("_mb")), file=sys.stderr)
    return {"runs": runs, "bandwidth": bandwidth, "alone": alone}


def table(paths: dict[str, Path], figures: dict, threads: int, n_long: int, clock: str = "wall") -> str:
    """The README table (markdown) of measure()'s figures: medians over the rounds."""
    import statistics

    import compare_llamacpp as cl

    long_key = cl._long_key(n_long)
    share_key = "decode_share" + ("_cpu" if clock == "cpu" else "")
    bw = statistics.median(figures["bandwidth"])
    rounds = len(figures["bandwidth"])
    head = (f"| 1.7B file | prefill 512 (oxillama vs llama.cpp) | decode | {long_key} | decode's share of the read "
            f"bandwidth measured beside it{' (CPU time)' if clock == 'cpu' else ''} |")
    lines = [head, "| --- | --- | --- | --- | --- |"]
    probes, probe_notes = [], []
    for qtype, path in paths.items():
        runs = figures["runs"][qtype]
        med = {lib: {k: statistics.median(x[k] for x in runs[lib]) for k in ("prefill", "decode", long_key, share_key)}
               for lib in runs}
        probes += [x["decode_bw" + ("_cpu" if clock == "cpu" else "")] for lib in runs for x in runs[lib]]
        probe_notes.append(f"{qtype}: " + cl.probe_line(runs, figures.get("alone", {}).get(qtype, [])).replace(
            "probe GB/s (by the clock / by CPU time) beside ", ""))
        gb = path.stat().st_size / 1e9
        cells = [f"{qtype} ({gb:.2f} GB)"]
        for k in ("prefill", "decode", long_key):
            ox, lc = med["oxillama"][k], med["llamacpp"][k]
            cells.append(f"{ox:.1f} vs {lc:.1f} tok/s: **{ox / lc:.2f}x**" if k == "prefill"
                         else f"{ox:.1f} vs {lc:.1f}: {ox / lc:.2f}x")
        cells.append(f"{med['oxillama'][share_key]:.0%} vs {med['llamacpp'][share_key]:.0%}")
        lines.append("| " + " | ".join(cells) + " |")
    cpu = cl._cpu_name()
    lines.append("")
    lines.append(f"{cpu}, {threads} threads, medians of {rounds} alternating rounds. Share: each child decodes in "
                 f"slices with the read bandwidth measured in C ({threads} threads, a 1 GiB buffer) by the parent "
                 f"process before each slice and after the last, while the child waits idle; a slice's weight bytes "
                 f"per second over the mean of the two reads around it"
                 f"{', both by CPU time' if clock == 'cpu' else ''}, median of the slices, then of the rounds (each "
                 f"child's median probe {min(probes):.1f}-{max(probes):.1f} GB/s; the probe's median GB/s by the "
                 f"clock / by CPU time beside each library and with no model process: {'; '.join(probe_notes)}). "
                 f"Bandwidth at the start of each round (C, best of 5 reads of 2 GiB): "
                 f"{', '.join(f'{b:.1f}' for b in figures['bandwidth'])} GB/s, median {bw:.1f}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("OXILLAMA_BENCH_MODELS", "/work/models"))
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES), help=f"of {', '.join(FTYPES)}")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="measure every file against llama.cpp and print the "
                                                         "README table")
    ap.add_argument("--rounds", type=int, default=3, help="--table: alternating rounds")
    ap.add_argument("--long", type=int, default=2048, help="--table: prompt tokens before the long decode")
    ap.add_argument("--decode-tokens", type=int, default=64, help="--table: greedy tokens per decode figure")
    ap.add_argument("--json", default=None, help="--table: also write the raw figures here")
    ap.add_argument("--beside", type=int, default=4, help="--table: slices of each decode, the bandwidth read "
                                                          "around each (the share column)")
    ap.add_argument("--settle", type=float, default=50.0, metavar="MS",
                    help="--table: milliseconds the parent waits idle before each probe reading")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="--table: the share's clock (cpu: "
                                                                             "on a machine other jobs load)")
    args = ap.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in FTYPES]
    if unknown:
        ap.error(f"unknown type(s) {unknown}; known: {sorted(FTYPES)}")
    paths = ensure(args.dir, types, args.threads)
    if not args.table:
        for qtype, path in paths.items():
            print(f"{qtype:8s} {path}  {path.stat().st_size / 1e9:.2f} GB")
        return 0
    if args.rounds < 1 or args.long < 16 or args.decode_tokens < 1 or not 1 <= args.beside <= args.decode_tokens:
        ap.error("--rounds and --decode-tokens must be >= 1, --long >= 16, 1 <= --beside <= --decode-tokens")
    if args.settle < 0:
        ap.error("--settle must be >= 0")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python is not installed: the table compares with it", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))          # compare_llamacpp, membw
    figures = measure(paths, args.threads, args.rounds, args.long, args.decode_tokens, args.beside, args.settle / 1e3)
    if args.json:
        import json
        Path(args.json).write_text(json.dumps({"threads": args.threads, **figures,
                                               "files": {q: str(p) for q, p in paths.items()}}, indent=1))
    print(table(paths, figures, args.threads, args.long, args.clock))
    return 0


if __name__ == "__main__":
    sys.exit(main())
