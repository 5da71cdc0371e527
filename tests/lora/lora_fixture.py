"""A deterministic rank-8 adapter on every projection of a model (no random generator: values from a formula,
the same on every numpy and platform), written as a GGUF adapter. Shared by the llama.cpp golden maker and the
test that compares with those goldens."""
import numpy as np

from oxillama.gguf import GGUFWriter

PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
RANK = 8
ALPHA = 16.0


def formula_lora(gguf, rank=RANK):
    """base tensor -> (A (rank, n_in), B (n_out, rank)), float32, smooth in the indices"""
    out = {}
    for name, t in gguf.tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in PROJECTIONS:
            rows, cols = t.shape
            il, k = int(parts[1]), PROJECTIONS.index(parts[2])
            r = np.arange(rank, dtype=np.float64)[:, None]
            a = np.sin(0.37 * r + 0.011 * np.arange(cols)[None, :] + 0.5 * il + k) / np.sqrt(cols)
            b = np.cos(0.23 * np.arange(rows)[:, None] + 0.61 * r.T + 0.3 * il - k) * 0.06
            out[name] = (a.astype(np.float32), b.astype(np.float32))
    return out


def write_formula_adapter(gguf, path, qtype="F16", alpha=ALPHA):
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", gguf.architecture)
    w.add_metadata("general.type", "adapter")
    w.add_metadata("adapter.type", "lora")
    w.add_metadata("adapter.lora.alpha", alpha)
    for base, (a, b) in formula_lora(gguf).items():
        w.add_tensor(base + ".lora_a", a, qtype)
        w.add_tensor(base + ".lora_b", b, qtype)
    w.write()
    return path
