"""`oxillama rm NAME|hf://ORG/REPO[:QUANT]`: delete a cached model, as `ollama rm`."""
from __future__ import annotations

from oxillama import hub


def add_parser(sub) -> None:
    p = sub.add_parser("rm", help="delete a model from the local cache",
                       description="Delete a known model, or a Hugging Face repository's cached GGUF files "
                                   "(hf://ORG/REPO: all of them; hf://ORG/REPO:QUANT: that one), from the cache.")
    p.add_argument("names", nargs="+", metavar="NAME", help="a known model or hf://ORG/REPO[:QUANT]")
    p.set_defaults(func=run)


def run(args) -> int:
    for name in args.names:
        removed = hub.remove(name)
        print(f"deleted {name} ({len(removed)} file{'s' if len(removed) != 1 else ''})")
    return 0
