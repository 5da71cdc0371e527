"""A Hugging Face PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) to llama.cpp's GGUF
adapter format, without torch: safetensors are read here (F32, F16, BF16 by bit conversion).

    oxillama convert-lora PEFT_DIR --base BASE.gguf -o OUT.gguf

Names map as the model converter maps them (`model.layers.N.self_attn.q_proj` -> `blk.N.attn_q.weight`), B is
row-permuted for llama-family Q and K as the converter permutes those weights (GGUF rotates adjacent pairs,
Hugging Face halves), and rsLoRA (use_rslora: scale alpha / sqrt(r)) is written as the alpha that gives that
scale under llama.cpp's alpha / r.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct

import numpy as np

from oxillama.errors import LoraError

_ST_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_PEFT_RE = re.compile(r"^(?:base_model\.model\.)?(model\.layers\.\d+\..+)\.lora_([AB])(?:\.default)?\.weight$")
_MAX_HEADER = 100 << 20


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """name -> float32 array of a .safetensors file (F32, F16 and BF16 tensors)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LoraError(f"cannot read {path!r}: {e}") from e
    if len(data) < 8:
        raise LoraError(f"{path!r} is not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(len(data) - 8, _MAX_HEADER):
        raise LoraError(f"{path!r}: header of {n} bytes does not fit the file")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoraError(f"{path!r}: the safetensors header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise LoraError(f"{path!r}: the safetensors header is not an object")
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = _ST_DTYPES[info["dtype"]], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError) as err:
            raise LoraError(f"{path!r}: tensor {name!r} has an unsupported or malformed entry {info!r}") from err
        count = math.prod(shape)
        if not (0 <= b <= e <= len(body)) or e - b != count * dtype.itemsize or min(shape, default=1) < 0:
            raise LoraError(f"{path!r}: tensor {name!r} has bad offsets {b}..{e} for shape {shape}")
        raw = np.frombuffer(body[b:e], dtype=dtype)
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float32).reshape(shape)
    return out


def _permute_rows(b: np.ndarray, n_head: int) -> np.ndarray:
    from oxillama.convert.hf import permute_rope_rows
    return permute_rope_rows(b, n_head)


def convert_peft(peft_dir: str | os.PathLike, base: str | os.PathLike, out_path: str | os.PathLike, *,
                 outtype: str = "f32") -> str:
    """Write the GGUF adapter of a PEFT directory for the base GGUF model; returns out_path."""
    from oxillama.convert.hf import _GEMMA2_LAYER_MAP, _LAYER_MAP
    from oxillama.gguf import GGUFFile, GGUFWriter
    peft_dir = os.fspath(peft_dir)
    if outtype not in ("f32", "f16"):
        raise LoraError(f"outtype must be f32 or f16, got {outtype!r}")
    cfg_path = os.path.join(peft_dir, "adapter_config.json")
    st_path = os.path.join(peft_dir, "adapter_model.safetensors")
    for p in (cfg_path, st_path):
        if not os.path.isfile(p):
            raise LoraError(f"{peft_dir!r} is not a PEFT adapter folder: {os.path.basename(p)} is missing")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoraError(f"cannot read {cfg_path!r}: {e}") from e
    if not isinstance(cfg, dict) or cfg.get("peft_type", "LORA") != "LORA":
        raise LoraError(f"{cfg_path!r} does not describe a LoRA adapter")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha", cfg.get("r"))
    if isinstance(r, bool) or not isinstance(r, int) or r < 1 or not isinstance(alpha, (int, float)):
        raise LoraError(f"{cfg_path!r}: r must be an int >= 1 and lora_alpha a number, got {r!r}, {alpha!r}")
    if cfg.get("fan_in_fan_out"):
        raise LoraError("adapters with fan_in_fan_out (GPT-2 style Conv1D layers) are not supported")
    if cfg.get("use_rslora"):
        alpha = alpha * math.sqrt(r)   # llama.cpp scales by alpha / r; rsLoRA means alpha / sqrt(r)
    tensors = read_safetensors(st_path)

    with GGUFFile(base) as g:
        arch = g.architecture
        n_head = g.metadata.get(f"{arch}.attention.head_count")
        n_head_kv = g.metadata.get(f"{arch}.attention.head_count_kv", n_head)
        base_shapes = {name: t.shape for name, t in g.tensors.items()}
    table = _GEMMA2_LAYER_MAP if arch in ("gemma2", "gemma3") else _LAYER_MAP
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, arr in tensors.items():
        m = _PEFT_RE.match(name)
        if not m:
            raise LoraError(f"{st_path!r}: tensor {name!r} is not a LoRA A or B weight")
        hf_mod, which = m.groups()
        lm = re.match(r"^model\.layers\.(\d+)\.(.+)$", hf_mod)
        if not lm or table.get(lm.group(2)) is None:
            raise LoraError(f"no GGUF tensor for the adapted module {hf_mod!r}")
        gname = f"blk.{lm.group(1)}.{table[lm.group(2)]}.weight"
        pairs.setdefault(gname, {})[which] = arr
    if not pairs:
        raise LoraError(f"{st_path!r} holds no LoRA tensors")

    w = GGUFWriter(out_path)
    w.add_metadata("general.architecture", arch)
    w.add_metadata("general.type", "adapter")
    w.add_metadata("general.name", os.path.basename(peft_dir.rstrip("/")))
    w.add_metadata("adapter.type", "lora")
    w.add_metadata("adapter.lora.alpha", float(alpha))
    qtype = "F16" if outtype == "f16" else "F32"
    for gname, p in sorted(pairs.items()):
        if set(p) != {"A", "B"}:
            raise LoraError(f"{gname}: the adapter has lora_{''.join(p)} without its pair")
        a, b = p["A"], p["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != r or b.shape[1] != r:
            raise LoraError(f"{gname}: lora_A {a.shape} and lora_B {b.shape} do not have rank r={r}")
        if gname not in base_shapes or base_shapes[gname] != (b.shape[0], a.shape[1]):
            raise LoraError(f"{gname}: ({b.shape[0]}, {a.shape[1]}) does not fit the base model's "
                            f"{base_shapes.get(gname)}")
        if arch == "llama" and gname.endswith("attn_q.weight"):
            b = _permute_rows(b, n_head)
        elif arch == "llama" and gname.endswith("attn_k.weight"):
            b = _permute_rows(b, n_head_kv)
        w.add_tensor(gname + ".lora_a", np.ascontiguousarray(a), qtype)
        w.add_tensor(gname + ".lora_b", np.ascontiguousarray(b), qtype)
    w.write()
    return os.fspath(out_path)
