"""python -m oxillama.convert HF_DIR OUT.gguf [--outtype f32|f16|q8_0]: convert a saved transformers checkpoint."""
import argparse
import logging
import sys

from oxillama.convert.hf import OUT_TYPES, convert_hf_dir
from oxillama.errors import OxillamaError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oxillama.convert", description=__doc__.split(":", 1)[1].strip())
    ap.add_argument("model_dir", help="folder with config.json and *.safetensors or pytorch_model*.bin")
    ap.add_argument("out", help="the GGUF file to write")
    ap.add_argument("--outtype", choices=sorted(OUT_TYPES), default="f16", help="type of the 2-D weights")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        convert_hf_dir(args.model_dir, args.out, outtype=args.outtype)
    except OxillamaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
