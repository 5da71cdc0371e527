"""`oxillama tokenize -m MODEL TEXT`: token ids and pieces, as llama-tokenize prints them.

Only the tokenizer is read from the GGUF file (no weights). `--json` prints one object
{"ids": [...], "pieces": [...], "count": N}; `--ids` only the list of ids.
"""
from __future__ import annotations

import argparse
import json
import sys

from oxillama.cli._options import formatter


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("tokenize", help="text -> token ids and pieces", formatter_class=formatter,
                              description="Tokenize a text with a model's tokenizer (read from its GGUF file).")
    p.add_argument("-m", "--model", required=True, help="GGUF model file (or a known model name)")
    p.add_argument("text", help="the text, or - to read it from stdin")
    p.add_argument("--no-bos", action="store_true", help="do not add the BOS/EOS the vocabulary asks for")
    p.add_argument("--parse-special", action="store_true", help="turn special-token text into its ids")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object: ids, pieces, count")
    out.add_argument("--ids", action="store_true", help="only the ids, as a list")
    p.set_defaults(func=run)


def load_tokenizer(model: str):
    import os

    from oxillama import hub
    from oxillama.tokenizer import Tokenizer
    path = hub.resolve_model(model) if not os.path.exists(model) else model
    return Tokenizer.from_gguf(path)


def piece(tok, token_id: int) -> str:
    return tok.token_to_bytes(token_id).decode("utf-8", errors="replace")


def run(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.model)
    text = sys.stdin.read() if args.text == "-" else args.text
    ids = tok.encode(text, add_special=not args.no_bos, parse_special=args.parse_special)
    if args.json:
        print(json.dumps({"ids": ids, "pieces": [piece(tok, i) for i in ids], "count": len(ids)}))
    elif args.ids:
        print(json.dumps(ids))
    else:
        for i in ids:
            print(f"{i:6d} -> '{piece(tok, i)}'")
        print(f"Total number of tokens: {len(ids)}")
    return 0
