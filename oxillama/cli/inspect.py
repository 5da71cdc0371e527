"""`oxillama inspect FILE.gguf`: what a GGUF file holds, without loading the weights.

Prints the architecture, its hyper-parameters (the `<arch>.*` keys), a tokenizer summary, the
other metadata (arrays and long strings summarized) and the tensor table; `--json` prints the
same as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

import numpy as np

from oxillama.gguf import GGUFFile, GGUFValueType, StringArray

# keys shown in the tokenizer summary (never the arrays themselves)
_TOKEN_ID_KEYS = ("bos", "eos", "eot", "unknown", "padding", "separator", "mask")
_STRING_PREVIEW = 60
_ARRAY_PREVIEW = 8


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="show a GGUF file's metadata and tensors",
                              description="Show a GGUF file's architecture, hyper-parameters, tokenizer "
                                          "and tensor table without loading the weights.")
    p.add_argument("file", metavar="FILE.gguf",
                   help="the GGUF file, a known model name or hf://ORG/REPO[:QUANT] (as `run -m` takes)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-tensors", action="store_true", help="leave out the tensor table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxillama import hub
    path = args.file
    if hub.is_hf(path) or (not os.path.exists(path) and path in hub.KNOWN_MODELS):
        path = hub.resolve_model(path)
    with GGUFFile(path) as f:
        report = summarize(f, tensors=not args.no_tensors)
    # ASCII-escaped JSON is valid whatever the terminal's encoding, and so are strings that were
    # not UTF-8 in the file (kept with surrogate escapes by the reader)
    text = json.dumps(report, indent=2) + "\n" if args.json else format_text(report)
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(text.encode(enc, "backslashreplace").decode(enc))
    return 0


def _plain(value):
    """A metadata value as JSON-ready data; arrays of numbers become lists."""
    if isinstance(value, (np.ndarray, StringArray)):
        return value.tolist()
    return value


def _type_name(vtype: GGUFValueType, etype: GGUFValueType | None) -> str:
    return f"array[{etype.name}]" if vtype == GGUFValueType.ARRAY else vtype.name


def _tokenizer(f: GGUFFile) -> dict:
    md = f.metadata
    tokens = md.get("tokenizer.ggml.tokens")
    tok = {"model": md.get("tokenizer.ggml.model"), "pre": md.get("tokenizer.ggml.pre"),
           "vocab_size": len(tokens) if isinstance(tokens, (list, StringArray)) else None}
    merges = md.get("tokenizer.ggml.merges")
    if merges is not None:
        tok["n_merges"] = len(merges)
    for name in _TOKEN_ID_KEYS:
        tid = md.get(f"tokenizer.ggml.{name}_token_id")
        if isinstance(tid, int):
            tok[f"{name}_token_id"] = tid
            if isinstance(tokens, (list, StringArray)) and 0 <= tid < len(tokens):
                tok[f"{name}_token"] = tokens[tid]
    for flag in ("add_bos_token", "add_eos_token", "add_space_prefix"):
        if f"tokenizer.ggml.{flag}" in md:
            tok[flag] = md[f"tokenizer.ggml.{flag}"]
    template = md.get("tokenizer.chat_template")
    tok["chat_template_chars"] = len(template) if isinstance(template, str) else None
    return tok


def _summary_of(value, vtype: GGUFValueType, etype: GGUFValueType | None):
    """Short form for the 'other metadata' section: long strings and arrays are summarized."""
    if vtype == GGUFValueType.ARRAY:
        if len(value) <= _ARRAY_PREVIEW:
            return _plain(value)
        return {"type": _type_name(vtype, etype), "length": len(value)}
    if isinstance(value, str) and len(value) > _STRING_PREVIEW:
        return {"type": "STRING", "length": len(value)}
    return value


def _experts(f: GGUFFile, hparams: dict) -> dict | None:
    """A mixture of experts' sizes: experts, used per token, bytes of one expert (gate, up and down in one
    layer), and the parameters and bytes a token reads (the other tensors whole, n_used / n_expert of the
    experts'; the embedding table counted whole, as the file holds it)."""
    n_expert, n_used = hparams.get("expert_count"), hparams.get("expert_used_count")
    if not isinstance(n_expert, int) or n_expert <= 0:
        return None
    stacked = [t for t in f.tensors.values() if t.name.endswith(("_exps.weight", "_exps.bias"))]
    exp_params = sum(t.n_elements for t in stacked)
    exp_bytes = sum(t.nbytes for t in stacked)
    n_layers = len({t.name.split(".")[1] for t in stacked}) or 1
    all_params = sum(t.n_elements for t in f.tensors.values())
    all_bytes = sum(t.nbytes for t in f.tensors.values())
    used = n_used if isinstance(n_used, int) and 0 < n_used <= n_expert else 0
    return {"n_expert": n_expert, "n_expert_used": n_used,
            "shared_expert": any(n.endswith("ffn_up_shexp.weight") for n in f.tensors),
            "expert_nbytes": exp_bytes // (n_expert * n_layers),
            "active_params": all_params - exp_params + exp_params * used // n_expert,
            "active_nbytes": all_bytes - exp_bytes + exp_bytes * used // n_expert}


def _repack(f: GGUFFile) -> dict:
    """What loading this file copies into this CPU's repacked layouts (the default; --no-repack skips it):
    the matrices the products read, not the embedding table, and the stacked experts where each expert's rows
    are whole groups of the layouts' rows (the others stay in the file's layout). A decoder without an
    output.weight reads its embedding table as the output matrix (tied): that one is repacked, its embedding
    rows still read from the file. The copies' pages replace the file's in memory, so resident memory stays
    about the file's size."""
    from oxillama import _core
    from oxillama.models import ARCHITECTURES
    from oxillama.quant import GGMLType
    layouts = _core.repacked_layouts()
    arch = ARCHITECTURES.get(f.architecture or "")
    tied = "output.weight" not in f.tensors and arch is not None and not arch.is_encoder
    used, nbytes = {}, 0
    for t in f.tensors.values():
        if t.qtype not in layouts or (t.name.startswith("token_embd") and not (tied and t.name == "token_embd.weight")):
            continue
        if len(t.shape) == 3 and "_exps" in t.name:   # (n_expert, rows per expert, cols)
            if t.shape[1] % _core.REPACK_ROW_ALIGN:
                continue
        elif len(t.shape) != 2 or "_exps" in t.name:
            continue
        row = _core.repacked_row_size(int(GGMLType[t.qtype]), t.shape[-1])
        if row > 0:
            used[t.qtype] = layouts[t.qtype]
            nbytes += row * int(np.prod(t.shape[:-1]))
    return {"tier": _core.active_tier(), "layouts": used, "nbytes": nbytes}


def summarize(f: GGUFFile, tensors: bool = True) -> dict:
    arch = f.architecture
    prefix = f"{arch}." if arch else None
    hparams, other = {}, {}
    for key, value in f.metadata.items():
        vtype, etype = f.metadata_types[key]
        if prefix and key.startswith(prefix):
            hparams[key[len(prefix):]] = _plain(value)
        elif key.startswith("tokenizer.") or key in ("general.architecture", "general.alignment"):
            continue
        else:
            other[key] = _summary_of(value, vtype, etype)
    types = Counter()
    type_bytes = Counter()
    for t in f.tensors.values():
        types[t.qtype] += 1
        type_bytes[t.qtype] += t.nbytes
    report = {
        "path": f.path, "version": f.version, "file_size": f.file_size, "alignment": f.alignment,
        "data_offset": f.data_offset, "architecture": arch, "name": f.metadata.get("general.name"),
        "n_tensors": len(f.tensors), "n_params": sum(t.n_elements for t in f.tensors.values()),
        "tensor_types": {q: {"count": types[q], "nbytes": type_bytes[q]} for q in sorted(types)},
        "hparams": hparams, "tokenizer": _tokenizer(f), "metadata": other,
    }
    from oxillama.models import ARCHITECTURES
    family = ARCHITECTURES.get(arch or "")
    report["family"] = None if family is None else {"class": family.__name__, "module": family.__module__}
    experts = _experts(f, hparams)
    if experts:
        report["experts"] = experts
    report["repack"] = _repack(f)
    if tensors:
        report["tensors"] = [{"name": t.name, "type": t.qtype, "shape": list(t.shape), "nbytes": t.nbytes,
                              "offset": t.offset} for t in f.tensors.values()]
    return report


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else str(n)


def _show(value) -> str:
    if isinstance(value, dict) and "length" in value:
        return f"<{value['type']}, {value['length']} {'chars' if value['type'] == 'STRING' else 'values'}>"
    if isinstance(value, list) and len(value) > _ARRAY_PREVIEW:
        head = ", ".join(map(repr, value[:_ARRAY_PREVIEW]))
        return f"[{head}, ...] ({len(value)} values)"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def format_text(r: dict) -> str:
    lines = [
        f"file           {r['path']}",
        f"format         GGUF v{r['version']}, {_size(r['file_size'])}, alignment {r['alignment']}, "
        f"data at {r['data_offset']}",
        f"architecture   {r['architecture'] or '(none)'}",
    ]
    fam = r.get("family")
    if fam:
        lines.append(f"runs           yes: family {fam['class']} ({fam['module']})")
    else:
        lines.append("runs           no: " + (f"oxillama has no family for {r['architecture']!r}" if r["architecture"]
                                          else "the file names no general.architecture"))
    if r["name"]:
        lines.append(f"name           {r['name']}")
    types = ", ".join(f"{q} x{v['count']} ({_size(v['nbytes'])})" for q, v in r["tensor_types"].items())
    lines.append(f"parameters     {_count(r['n_params'])} in {r['n_tensors']} tensors: {types or '-'}")
    e = r.get("experts")
    if e:
        lines.append(f"experts        {e['n_expert']}, {e['n_expert_used']} used per token"
                     + (" + a shared expert" if e["shared_expert"] else "")
                     + f", {_size(e['expert_nbytes'])} per expert per layer; per token "
                       f"{_count(e['active_params'])} parameters active ({_size(e['active_nbytes'])} read)")
    rp = r.get("repack")
    if rp and rp["layouts"]:
        lines.append(f"repacked       {_size(rp['nbytes'])} at load on the {rp['tier']} tier ("
                     + ", ".join(f"{q} as {lay}" for q, lay in rp["layouts"].items())
                     + "; in place of the file's pages, --no-repack: none)")
    if r["hparams"]:
        lines.append("")
        lines.append(f"hyper-parameters ({r['architecture']}.*)")
        width = max(map(len, r["hparams"]))
        lines += [f"  {k:<{width}}  {_show(v)}" for k, v in sorted(r["hparams"].items())]
    tok = r["tokenizer"]
    if tok.get("model") or tok.get("vocab_size"):
        lines.append("")
        lines.append("tokenizer")
        lines.append(f"  model {tok.get('model')}, pre {tok.get('pre')}, vocab size {tok.get('vocab_size')}"
                     + (f", {tok['n_merges']} merges" if "n_merges" in tok else ""))
        ids = [f"{n} {tok[n + '_token_id']}" + (f" {tok[n + '_token']!r}" if n + "_token" in tok else "")
               for n in _TOKEN_ID_KEYS if n + "_token_id" in tok]
        if ids:
            lines.append("  " + ", ".join(ids))
        flags = [f"{k} {tok[k]}" for k in ("add_bos_token", "add_eos_token", "add_space_prefix") if k in tok]
        if flags:
            lines.append("  " + ", ".join(flags))
        chars = tok.get("chat_template_chars")
        lines.append(f"  chat template: {f'{chars} chars' if chars is not None else 'none'}")
    if r["metadata"]:
        lines.append("")
        lines.append("other metadata")
        width = max(map(len, r["metadata"]))
        lines += [f"  {k:<{width}}  {_show(v)}" for k, v in r["metadata"].items()]
    if "tensors" in r:
        lines.append("")
        lines.append(f"tensors ({r['n_tensors']})")
        rows = [(t["name"], t["type"], " x ".join(map(str, t["shape"])) or "scalar", _size(t["nbytes"]))
                for t in r["tensors"]]
        if rows:
            w = [max(len(row[i]) for row in rows + [("name", "type", "shape", "size")]) for i in range(4)]
            lines.append(f"  {'name':<{w[0]}}  {'type':<{w[1]}}  {'shape':<{w[2]}}  {'size':>{w[3]}}")
            lines += [f"  {a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d:>{w[3]}}" for a, b, c, d in rows]
    return "\n".join(lines) + "\n"
