"""`oxillama quantize IN.gguf OUT.gguf TYPE`: llama-quantize's file types and recipes.

    oxillama quantize model-f16.gguf model-q4_k_m.gguf Q4_K_M
    oxillama quantize model-f16.gguf model-iq4_xs.gguf IQ4_XS --imatrix imatrix.gguf

Progress goes to stderr, one line per tensor; the summary (sizes, bits per weight, time) too.
"""
from __future__ import annotations

import argparse
import sys

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    from oxillama.quant.recipes import FILE_TYPES
    p = subparsers.add_parser(
        "quantize", help="quantize a GGUF model (llama-quantize's types and recipes)", formatter_class=formatter,
        description="Quantize a GGUF model with llama.cpp's file types and recipes: the same tensor types "
                    "as llama-quantize, blocks bit-identical to ggml's quantizers. Types: "
                    + ", ".join(FILE_TYPES) + " (Q3_K, Q4_K, Q5_K: the _M mixes).")
    p.add_argument("input", metavar="IN.gguf", help="the model to quantize (F32, F16 or BF16 weights)")
    p.add_argument("output", metavar="OUT.gguf", help="the file to write (refused if it exists, see --force)")
    p.add_argument("type", metavar="TYPE", help="the file type, e.g. Q4_K_M, Q5_K_S, Q8_0, IQ4_XS")
    p.add_argument("--imatrix", metavar="FILE", default=None,
                   help="importance matrix (llama-imatrix's GGUF, or `oxillama imatrix`'s)")
    p.add_argument("--pure", action="store_true", help="every quantized tensor gets TYPE's base type (no mix)")
    p.add_argument("--output-tensor-type", metavar="QTYPE", default=None, help="type of output.weight")
    p.add_argument("--token-embedding-type", metavar="QTYPE", default=None, help="type of token_embd.weight")
    p.add_argument("--leave-output-tensor", action="store_true", help="keep output.weight as it is")
    p.add_argument("--tensor-type", metavar="REGEX=QTYPE", action="append", default=[],
                   help="type of the tensors whose name matches REGEX (repeatable; first match wins)")
    p.add_argument("--allow-requantize", action="store_true",
                   help="accept an already quantized input (it is dequantized first)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: every core)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite OUT.gguf if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-tensor progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxillama.errors import InvalidArgumentError
    from oxillama.quant.quantize_file import quantize_file
    overrides = []
    for item in args.tensor_type:
        pattern, sep, qtype = item.rpartition("=")
        if not sep or not pattern:
            raise InvalidArgumentError(f"--tensor-type {item!r}: expected REGEX=QTYPE")
        overrides.append((pattern, qtype))

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    report = quantize_file(args.input, args.output, args.type, imatrix=args.imatrix, pure=args.pure,
                           output_tensor_type=args.output_tensor_type,
                           token_embedding_type=args.token_embedding_type,
                           leave_output_tensor=args.leave_output_tensor, allow_requantize=args.allow_requantize,
                           tensor_types=overrides, n_threads=args.threads, force=args.force,
                           progress=None if args.quiet else progress)
    n = sum(_n_elements(t.shape) for t in report.tensors) or 1
    print(f"model size  = {report.src_bytes / 2**20:8.2f} MiB ({report.src_bytes * 8 / n:.2f} BPW)", file=sys.stderr)
    print(f"quant size  = {report.dst_bytes / 2**20:8.2f} MiB ({report.dst_bytes * 8 / n:.2f} BPW)", file=sys.stderr)
    print(f"wrote {report.path} ({report.file_type}) in {report.seconds:.1f} s", file=sys.stderr)
    return 0


def _n_elements(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
