"""`oxillama pull NAME|hf://ORG/REPO[:QUANT]`: fetch a known model, or a GGUF file from Hugging Face,
into the cache."""
from __future__ import annotations

from oxillama import hub
from oxillama.errors import DownloadError


def add_parser(sub) -> None:
    p = sub.add_parser("pull", help="fetch a known model or a Hugging Face GGUF into the local cache",
                       description="Fetch a model into the local cache and print its path. Known models: "
                       + ", ".join(f"{m.name} ({m.description})" for m in hub.KNOWN_MODELS.values())
                       + ". hf://ORG/REPO[:QUANT] fetches a GGUF file of a Hugging Face repository (QUANT such as "
                         "Q4_K_M, or a file name; default: the only GGUF, else Q4_K_M) into the Hugging Face "
                         "cache, with HF_TOKEN and HF_ENDPOINT as huggingface_hub reads them.")
    p.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL, metavar="NAME",
                   help=f"a known model ({', '.join(sorted(hub.KNOWN_MODELS))}) or hf://ORG/REPO[:QUANT] "
                        f"(default: {hub.DEFAULT_MODEL})")
    p.add_argument("--force", action="store_true", help="fetch a known model again even if cached")
    p.add_argument("--list", action="store_true",
                   help="list the known models, whether they are pulled, and their paths")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.list:
        for m in hub.KNOWN_MODELS.values():
            state = "pulled" if hub.is_pulled(m.name) else "not pulled"
            kind = "" if m.chat else "  (a base model: no chat template; not for chat)"
            print(f"{m.name:14s} {m.size / 1e6:8.1f} MB  {state:10s}  {m.description}{kind}\n"
                  f"{'':14s} {hub.model_path(m.name)}")
        return 0
    if hub.is_hf(args.name):
        print(hub.pull_hf(args.name))
        return 0
    if args.name not in hub.KNOWN_MODELS:
        raise DownloadError(f"unknown model {args.name!r}: give a known model ({', '.join(hub.KNOWN_MODELS)}) "
                            "or hf://ORG/REPO[:QUANT]")
    print(hub.pull(args.name, force=args.force, progress=None))
    return 0
