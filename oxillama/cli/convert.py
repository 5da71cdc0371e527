"""`oxillama convert HF_DIR OUT.gguf [--outtype f16|bf16|q8_0|f32]`: a saved transformers checkpoint
to GGUF, for every family oxillama runs (oxillama.convert; needs torch or safetensors)."""
from __future__ import annotations

import argparse
import os

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    from oxillama.convert.hf import OUT_TYPES
    p = subparsers.add_parser("convert", help="convert a Hugging Face checkpoint folder to GGUF",
                              formatter_class=formatter,
                              description="Convert a saved transformers checkpoint (config.json and *.safetensors "
                                          "or pytorch_model*.bin) to a GGUF file; quantize it further with "
                                          "`oxillama quantize`.")
    p.add_argument("model_dir", metavar="HF_DIR", help="the checkpoint folder")
    p.add_argument("output", metavar="OUT.gguf", help="the GGUF file to write (refused if it exists, see --force)")
    p.add_argument("--outtype", choices=sorted(OUT_TYPES), default="f16", help="type of the 2-D weights")
    p.add_argument("-f", "--force", action="store_true", help="overwrite OUT.gguf if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxillama.convert.hf import convert_hf_dir
    from oxillama.errors import OxillamaError
    if os.path.exists(args.output) and not args.force:
        raise OxillamaError(f"{args.output} exists (use --force to overwrite it)")
    try:
        convert_hf_dir(args.model_dir, args.output, outtype=args.outtype)
    except OSError as e:
        raise OxillamaError(f"cannot convert {args.model_dir} to {args.output}: {e.strerror or e}") from e
    print(f"wrote {args.output}")
    return 0
