"""`oxillama imatrix -m MODEL -f TEXT -o imatrix.gguf`: an importance matrix for `quantize --imatrix`,
in llama.cpp's imatrix GGUF format (llama-quantize reads it too)."""
from __future__ import annotations

import argparse
import os
import sys

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("imatrix", help="collect an importance matrix over a text (llama-imatrix's format)",
                              formatter_class=formatter,
                              description="Run the model over a text in chunks of -c tokens and save, for every "
                                          "weight matrix, the mean square of the activations it meets per "
                                          "column: what `oxillama quantize --imatrix` (or llama-quantize) "
                                          "weighs the quantization error by.")
    p.add_argument("-m", "--model", required=True, help="GGUF model file (or a known model name)")
    p.add_argument("-f", "--file", required=True, help="the calibration text")
    p.add_argument("-o", "--output", default="imatrix.gguf", help="the imatrix file to write")
    p.add_argument("-c", "--ctx-size", type=int, default=512, help="tokens per chunk")
    p.add_argument("--chunks", type=int, default=-1, help="at most this many chunks (-1: all)")
    p.add_argument("--process-output", action="store_true", help="collect output.weight too")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: every core)")
    p.add_argument("--force", action="store_true", help="overwrite the output if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxillama.errors import InvalidArgumentError, OxillamaError
    from oxillama.quant.imatrix_collect import collect_imatrix
    from oxillama.runtime.engine import InferenceEngine
    if os.path.exists(args.output) and not args.force:
        raise OxillamaError(f"{args.output} exists (use --force to overwrite it)")
    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read {args.file}: {e.strerror or e}") from None

    def show(i, n, seconds):
        print(f"[{i + 1}/{n}] {seconds:.1f} s", file=sys.stderr, flush=True)
    with InferenceEngine.from_gguf(args.model, n_ctx=args.ctx_size, n_threads=args.threads, n_batch=16) as engine:
        imx = collect_imatrix(engine, text, n_ctx=args.ctx_size, n_chunks=args.chunks,
                              process_output=args.process_output, dataset=args.file, progress=show)
    try:
        imx.save(args.output)
    except OSError as e:
        raise OxillamaError(f"cannot write {args.output}: {e.strerror or e}") from e
    print(f"wrote {args.output}: {len(imx.sums)} matrices, {imx.chunk_count} chunks of {args.ctx_size} tokens",
          file=sys.stderr)
    return 0
