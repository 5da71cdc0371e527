"""`oxillama perplexity -m MODEL -f TEXT [-c N]`: llama-perplexity's figure, and KL divergence.

    oxillama perplexity -m model-f16.gguf -f wiki.test.raw -c 512
    oxillama perplexity -m model-f16.gguf -f wiki.test.raw --kl-divergence-base base.kld   # save
    oxillama perplexity -m model-q4_k_m.gguf --kl-divergence-base base.kld --kl-divergence  # compare

Prints what llama-perplexity prints: the running PPL per chunk ([1]x,[2]y,...) and
`Final estimate: PPL = X +/- Y`; with --kl-divergence the same statistics blocks (PPL ratio,
KL divergence percentiles, Δp, same top token).
"""
from __future__ import annotations

import argparse
import sys

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("perplexity", help="perplexity of a model over a text (llama-perplexity's figure)",
                              formatter_class=formatter,
                              description="Perplexity over a text file as llama-perplexity computes it (chunks "
                                          "of -c tokens, the second half of each scored), or the KL divergence "
                                          "of a model from saved base log-probabilities.")
    p.add_argument("-m", "--model", required=True, help="GGUF model file (or a known model name)")
    p.add_argument("-f", "--file", default=None, help="the text file")
    p.add_argument("-c", "--ctx-size", type=int, default=512, help="tokens per chunk")
    p.add_argument("--chunks", type=int, default=-1, help="score at most this many chunks (-1: all)")
    p.add_argument("--n-seq", type=int, default=None,
                   help="chunks per forward (default: as many as 2048 tokens hold)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: every core)")
    p.add_argument("--kl-divergence-base", metavar="FILE", default=None,
                   help="where to save the model's log-probabilities (with -f), or the saved file to "
                        "compare to (with --kl-divergence); llama-perplexity's format")
    p.add_argument("--kl-divergence", action="store_true",
                   help="compare the model to --kl-divergence-base (its tokens; -f is not needed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxillama.errors import InvalidArgumentError
    from oxillama.runtime.engine import InferenceEngine
    from oxillama.runtime import perplexity as ppl_mod
    if args.kl_divergence and not args.kl_divergence_base:
        raise InvalidArgumentError("--kl-divergence needs --kl-divergence-base FILE (the saved base)")
    n_ctx = args.ctx_size
    if args.kl_divergence:
        n_ctx = ppl_mod.read_logits_header(args.kl_divergence_base)[0]
    elif not args.file:
        raise InvalidArgumentError("give the text with -f FILE")
    text = None
    if not args.kl_divergence:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read {args.file}: {e.strerror or e}") from None
    n_seq = args.n_seq or max(1, 2048 // n_ctx)
    with InferenceEngine.from_gguf(args.model, n_ctx=n_ctx, n_threads=args.threads,
                                   n_batch=max(512, min(2048, n_ctx * n_seq))) as engine:
        if args.kl_divergence:
            print("chunk             PPL               KL Divergence     Same top p")

            def show_kld(i, ppl, kld, same):
                print(f"{i + 1:4d}    {ppl:9.4f}    {kld:10.5f}    {100 * same:6.3f} %", flush=True)
            r = ppl_mod.kl_divergence(engine, args.kl_divergence_base, n_seq=n_seq, progress=show_kld)
            _print_kld(r)
            return 0

        def show(i, running):
            sys.stdout.write(f"[{i + 1}]{running:.4f},")
            sys.stdout.flush()
        r = ppl_mod.perplexity(engine, text, n_ctx=n_ctx, n_chunks=args.chunks, n_seq=n_seq, progress=show,
                               save_logits=args.kl_divergence_base)
        print()
        print(f"Final estimate: PPL = {r.ppl:.4f} +/- {r.ppl_unc:.5f}")
        print(f"perplexity: {r.n_chunks} chunks of {r.n_ctx} tokens, {r.count} scored, {r.seconds:.1f} s "
              f"({r.n_chunks * r.n_ctx / max(r.seconds, 1e-9):.0f} tokens/s)", file=sys.stderr)
    return 0


def _print_kld(r) -> None:
    print()
    print("====== Perplexity statistics ======")
    print(f"Mean PPL(Q)                   : {r.ppl[0]:10.6f} ± {r.ppl[1]:10.6f}")
    print(f"Mean PPL(base)                : {r.ppl_base[0]:10.6f} ± {r.ppl_base[1]:10.6f}")
    print(f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * r.cor:6.2f}%")
    print(f"Mean ln(PPL(Q)/PPL(base))     : {r.log_ppl_ratio[0]:10.6f} ± {r.log_ppl_ratio[1]:10.6f}")
    print(f"Mean PPL(Q)/PPL(base)         : {r.ppl_ratio[0]:10.6f} ± {r.ppl_ratio[1]:10.6f}")
    print(f"Mean PPL(Q)-PPL(base)         : {r.ppl_diff[0]:10.6f} ± {r.ppl_diff[1]:10.6f}")
    print()
    print("====== KL divergence statistics ======")
    print(f"Mean    KLD: {r.kld[0]:10.6f} ± {r.kld[1]:10.6f}")
    k = r.kld_percentiles
    print(f"Maximum KLD: {k['max']:10.6f}")
    for key in ("99.9", "99.0", "95.0", "90.0"):
        print(f"{key}%   KLD: {k[key]:10.6f}")
    print(f"Median  KLD: {k['median']:10.6f}")
    for key in ("10.0", "5.0", "1.0", "0.1"):
        print(f"{key:>4s}%   KLD: {k[key]:10.6f}")
    print(f"Minimum KLD: {k['min']:10.6f}")
    print()
    print("====== Token probability statistics ======")
    print(f"Mean    Δp: {100 * r.p_diff[0]:6.3f} ± {100 * r.p_diff[1]:5.3f} %")
    p = r.p_diff_percentiles
    print(f"Maximum Δp: {100 * p['max']:6.3f}%")
    for key in ("99.9", "99.0", "95.0", "90.0", "75.0"):
        print(f"{key}%   Δp: {100 * p[key]:6.3f}%")
    print(f"Median  Δp: {100 * p['median']:6.3f}%")
    for key in ("25.0", "10.0", "5.0", "1.0", "0.1"):
        print(f"{key:>4s}%   Δp: {100 * p[key]:6.3f}%")
    print(f"Minimum Δp: {100 * p['min']:6.3f}%")
    print(f"RMS Δp    : {100 * r.p_diff_rms[0]:6.3f} ± {100 * r.p_diff_rms[1]:5.3f} %")
    print(f"Same top p: {100 * r.same_top[0]:6.3f} ± {100 * r.same_top[1]:5.3f} %")
