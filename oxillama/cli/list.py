"""`oxillama list`: the models in the cache (known models pulled, Hugging Face GGUF files), as `ollama list`."""
from __future__ import annotations

from oxillama import hub


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list the models in the local cache",
                       description="List the cached models: the known models pulled (oxillama pull) and the "
                                   "GGUF files in the Hugging Face cache (hf://ORG/REPO:FILE), with size and path.")
    p.set_defaults(func=run)


def run(args) -> int:
    models = hub.cached_models()
    if not models:
        print("no models cached yet: oxillama pull NAME or oxillama pull hf://ORG/REPO[:QUANT]")
        return 0
    width = max(len(m.name) for m in models)
    print(f"{'NAME':{width}s}  {'SIZE':>10s}  PATH")
    for m in models:
        print(f"{m.name:{width}s}  {m.size / 1e6:7.1f} MB  {m.path}")
    return 0
