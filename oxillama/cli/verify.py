"""`oxillama verify FILE.gguf`: is this GGUF file whole and usable?

Checks, in order: the structure (header, metadata, tensor table, alignment of every tensor, data
inside the file: the reader refuses anything else), that every tensor decodes to finite values,
that the architecture's hyper-parameters are there, and that the tokenizer is present and
consistent (it builds; its size matches the embedding matrix and `<arch>.vocab_size`; special ids
are inside it). Prints the problems, one per line, and exits 1 if there are any; else prints one
"ok" line (`--json`: one object with "ok", "problems" and "notes").
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from oxillama.cli._options import formatter

_CHUNK_VALUES = 1 << 22     # values decoded at a time


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("verify", help="check a GGUF file: structure, finite tensors, tokenizer",
                              formatter_class=formatter,
                              description="Check that a GGUF file is whole and usable: structure and alignment, "
                                          "every tensor decodes to finite values, tokenizer present and "
                                          "consistent. Exit status 1 with the reasons if not.")
    p.add_argument("file", metavar="FILE.gguf")
    p.add_argument("--no-tensors", action="store_true", help="skip decoding the tensors (fast)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _check_tensors(f, problems: list[str], notes: list[str]) -> None:
    from oxillama import _core
    for t in f.tensors.values():
        info = t.type_info
        if t.n_elements == 0:
            continue
        if info.name in ("I8", "I16", "I32", "I64"):
            continue
        if info.name not in ("F32", "F16", "F64") and not _core.can_dequantize(int(info.qtype)):
            notes.append(f"{t.name}: type {info.name} not decoded (oxillama has no kernels for it)")
            continue
        ne0 = t.ggml_shape[0] if t.ggml_shape else 1
        rows = t.n_elements // ne0
        row_bytes = info.row_bytes(ne0)
        step = max(1, _CHUNK_VALUES // ne0)
        raw = t.data
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            chunk = raw[r0 * row_bytes:r1 * row_bytes]
            if info.name == "F32":
                x = chunk.view("<f4")
            elif info.name == "F16":
                x = chunk.view("<f2")
            elif info.name == "F64":
                x = chunk.view("<f8")
            else:
                x = np.frombuffer(_core.dequantize(chunk, int(info.qtype), (r1 - r0) * ne0, None), np.float32)
            bad = ~np.isfinite(x)
            if bad.any():
                first = int(np.argmax(bad)) + r0 * ne0
                problems.append(f"{t.name}: {int(bad.sum())} non-finite values in rows {r0}..{r1 - 1} "
                                f"(first at element {first})")
                break


def _check_tokenizer(f, problems: list[str], notes: list[str]) -> None:
    from oxillama.errors import OxillamaError
    from oxillama.tokenizer import Tokenizer
    md = f.metadata
    if "tokenizer.ggml.model" not in md:
        problems.append("no tokenizer: tokenizer.ggml.model is missing")
        return
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is None:
        problems.append("no tokenizer: tokenizer.ggml.tokens is missing")
        return
    n_vocab = len(tokens)
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key in md and len(md[key]) != n_vocab:
            problems.append(f"{key} has {len(md[key])} entries, the vocabulary {n_vocab}")
    for key, value in md.items():
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id") and isinstance(value, int):
            if not 0 <= value < n_vocab:
                problems.append(f"{key} = {value} is outside the vocabulary (0..{n_vocab - 1})")
    emb = f.tensors.get("token_embd.weight")
    if emb is not None and len(emb.ggml_shape) >= 2 and emb.ggml_shape[1] != n_vocab:
        # llama.cpp accepts an embedding padded past the vocabulary, never a shorter one
        (problems if emb.ggml_shape[1] < n_vocab else notes).append(
            f"token_embd.weight has {emb.ggml_shape[1]} rows, the vocabulary {n_vocab} tokens")
    arch = f.architecture
    vs = md.get(f"{arch}.vocab_size") if arch else None
    if isinstance(vs, int) and vs != n_vocab:
        problems.append(f"{arch}.vocab_size = {vs}, the tokenizer has {n_vocab} tokens")
    try:
        tok = Tokenizer.from_metadata(dict(md))
        ids = tok.encode("Hello world 123", add_special=False)
        if not ids:
            problems.append("the tokenizer turns 'Hello world 123' into no tokens")
    except OxillamaError as e:
        problems.append(f"the tokenizer cannot be built: {e}")


def verify(path: str, *, tensors: bool = True) -> dict:
    """{"ok": bool, "problems": [...], "notes": [...], "summary": str} for the GGUF file at path."""
    from oxillama.errors import GGUFError
    from oxillama.gguf import GGUFFile
    problems: list[str] = []
    notes: list[str] = []
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        return {"ok": False, "problems": [str(e)], "notes": [], "summary": ""}
    with f:
        arch = f.architecture
        if arch is None:
            problems.append("general.architecture is missing")
        elif not any(k.startswith(arch + ".") for k in f.metadata):
            problems.append(f"no {arch}.* hyper-parameters")
        else:
            from oxillama.models import ARCHITECTURES
            if arch not in ARCHITECTURES:
                notes.append(f"architecture {arch!r} is not one oxillama runs")
        if f.metadata.get("general.type") not in (None, "model"):
            notes.append(f"general.type = {f.metadata['general.type']!r}: not a model file, tokenizer not checked")
        else:
            _check_tokenizer(f, problems, notes)
        if tensors:
            _check_tensors(f, problems, notes)
        size = sum(t.nbytes for t in f.tensors.values())
        summary = (f"GGUF v{f.version}, {arch or '?'}, {len(f.metadata)} keys, {len(f.tensors)} tensors "
                   f"({size / 2**20:.1f} MiB), alignment {f.alignment}")
    return {"ok": not problems, "problems": problems, "notes": notes, "summary": summary}


def run(args: argparse.Namespace) -> int:
    result = verify(args.file, tensors=not args.no_tensors)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for note in result["notes"]:
            print(f"note: {note}", file=sys.stderr)
        if result["ok"]:
            print(f"ok: {args.file}: {result['summary']}")
        else:
            for p in result["problems"]:
                print(p if p.startswith(args.file) else f"{args.file}: {p}", file=sys.stderr)
    return 0 if result["ok"] else 1
