"""The `oxillama` console script. Each subcommand lives in its own module here and exposes
`add_parser(subparsers)`, which registers the subcommand and sets `func(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from oxillama.errors import OxillamaError

SUBCOMMANDS = ("run", "pull", "inspect", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oxillama", description="Run GGUF language models on the CPU.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"oxillama.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"oxillama.cli.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OxillamaError as e:
        print(f"oxillama: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
