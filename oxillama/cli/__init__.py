"""The `oxillama` console script. Each subcommand lives in its own module here and exposes
`add_parser(subparsers)`, which registers the subcommand and sets `func(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from oxillama.errors import ContextOverflowError, OxillamaError

SUBCOMMANDS = ("run", "chat", "pull", "list", "rm", "inspect", "selftest", "convert_lora", "serve",
               # model tools (issue 32)
               "quantize", "imatrix", "perplexity", "convert", "verify", "tokenize", "detokenize")
_VERBOSE_HELP = "log more (-vv for debug); also shows pip's output when a model is downloaded"


def build_parser() -> argparse.ArgumentParser:
    from oxillama import __version__
    parser = argparse.ArgumentParser(prog="oxillama", description="Run GGUF language models on the CPU.")
    parser.add_argument("-V", "--version", action="version", version=f"oxillama {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"oxillama.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"oxillama.cli.{name}":
                raise
            continue
        module.add_parser(sub)
        # -v after the subcommand too (`oxillama run -v ...`); its own dest, since a subparser's
        # default would overwrite the count given before the subcommand
        sub.choices[name.replace("_", "-")].add_argument("-v", "--verbose", action="count", default=0, dest="sub_verbose",
                                       help=_VERBOSE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.verbose += getattr(args, "sub_verbose", 0)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # the package logger follows -v also when logging was configured before main() (as in a test),
    # and is given back as it was afterwards
    logger = logging.getLogger("oxillama")
    previous = logger.level
    logger.setLevel(level)
    try:
        return int(args.func(args) or 0)
    except ContextOverflowError as e:
        print(f"oxillama: error: {e}; give a larger context with -c N (the model's trained context bounds it)",
              file=sys.stderr)
        return 1
    except OxillamaError as e:
        print(f"oxillama: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        logger.setLevel(previous)
