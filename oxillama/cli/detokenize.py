"""`oxillama detokenize -m MODEL IDS`: token ids back to text (ids as separate arguments, or one
comma- or space-separated list, or a JSON list; - reads them from stdin)."""
from __future__ import annotations

import argparse
import json
import re
import sys

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("detokenize", help="token ids -> text", formatter_class=formatter,
                              description="Turn token ids back into text with a model's tokenizer.")
    p.add_argument("-m", "--model", required=True, help="GGUF model file (or a known model name)")
    p.add_argument("ids", nargs="+", metavar="IDS", help="token ids (1 2 3, or \"1,2,3\", or \"[1, 2, 3]\", or -)")
    p.add_argument("--skip-special", action="store_true", help="leave out special tokens (BOS, EOS, ...)")
    p.add_argument("--json", action="store_true", help="one JSON object: text, pieces, count")
    p.set_defaults(func=run)


def parse_ids(items: list[str]) -> list[int]:
    from oxillama.errors import InvalidArgumentError
    text = sys.stdin.read() if items == ["-"] else " ".join(items)
    words = [w for w in re.split(r"[\s,\[\]]+", text) if w]
    try:
        return [int(w) for w in words]
    except ValueError:
        bad = next(w for w in words if not re.fullmatch(r"[+-]?\d+", w))
        raise InvalidArgumentError(f"not a token id: {bad!r}") from None


def run(args: argparse.Namespace) -> int:
    from oxillama.cli.tokenize import load_tokenizer, piece
    from oxillama.errors import InvalidArgumentError
    tok = load_tokenizer(args.model)
    ids = parse_ids(args.ids)
    bad = [i for i in ids if not 0 <= i < tok.n_vocab]
    if bad:
        raise InvalidArgumentError(f"token id {bad[0]} is outside the vocabulary (0..{tok.n_vocab - 1})")
    text = tok.decode(ids, skip_special=args.skip_special)
    if args.json:
        print(json.dumps({"text": text, "pieces": [piece(tok, i) for i in ids], "count": len(ids)}))
    else:
        sys.stdout.write(text + "\n")
    return 0
