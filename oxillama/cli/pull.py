"""`oxillama pull NAME`: fetch a known model into the cache."""
from __future__ import annotations

from oxillama import hub


def add_parser(sub) -> None:
    p = sub.add_parser("pull", help="fetch a known model into the local cache",
                       description="Fetch a known model into the local cache. Known models: "
                       + ", ".join(f"{m.name} ({m.description})" for m in hub.KNOWN_MODELS.values()))
    p.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL, choices=sorted(hub.KNOWN_MODELS))
    p.add_argument("--force", action="store_true", help="fetch again even if cached")
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
    print(hub.pull(args.name, force=args.force, progress=None))
    return 0
