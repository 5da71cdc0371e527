"""Collect an importance matrix over a text, as llama-imatrix does.

The text is tokenized once and cut into chunks of n_ctx tokens (BOS replacing each chunk's first
token when the vocabulary adds one); for every weight matrix of the layers (`blk.*`, and
output.weight with process_output) the squares of the activations it multiplies are summed per
input column over every token, and the rows counted.

The activations come from a float32 NumPy forward over the model's plan spec (the same spec the C
forward runs: oxillama.models), with each weight dequantized as it is used: no activation
quantization, so the figures match llama.cpp's to its own rounding, not bit for bit. It is a tool,
not a hot path: a chunk of 512 tokens of a 135M model takes seconds.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from oxillama.errors import InvalidArgumentError, ModelError
from oxillama.quant import dequantize
from oxillama.quant.imatrix import ImportanceMatrix

log = logging.getLogger("oxillama")


def _norm(x, w, b, kind, eps):
    if kind == "layer":
        mu = x.mean(-1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    else:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    if w is not None:
        y = y * np.asarray(w, dtype=np.float32)
    if b is not None:
        y = y + np.asarray(b, dtype=np.float32)
    return y.astype(np.float32)


def _act(kind, g):
    if kind == "silu":
        return g / (1.0 + np.exp(-g))
    if kind in ("gelu_tanh", "gelu"):
        return 0.5 * g * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
    from math import erf
    return (0.5 * g * (1.0 + np.vectorize(erf)(g / math.sqrt(2)))).astype(np.float32)


def _rope(x, rope, pos):
    """x: (n, n_heads, head_dim) rotated by positions pos (YaRN and frequency factors included)."""
    if rope is None or rope.get("mode", "none") == "none":
        return x
    n_rot = rope.get("n_rot", x.shape[-1])
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = rope["base"] ** (-2.0 * i / n_rot)
    if rope.get("freq_factors") is not None:
        inv_freq = inv_freq / np.asarray(rope["freq_factors"], dtype=np.float64)
    freq_scale, ext, mscale = rope.get("freq_scale", 1.0), rope.get("ext_factor", 0.0), rope.get("attn_factor", 1.0)
    extrap = np.outer(pos, inv_freq)
    theta = freq_scale * extrap
    if ext:
        lo, hi = rope["corr_dims"]
        mix = (1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)) * ext
        theta = theta * (1 - mix) + extrap * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    cos = (np.cos(theta) * mscale)[:, None, :].astype(np.float32)
    sin = (np.sin(theta) * mscale)[:, None, :].astype(np.float32)
    x = x.copy()
    if rope["mode"] == "neox":
        a, b = x[..., :n_rot // 2].copy(), x[..., n_rot // 2:n_rot].copy()
        x[..., :n_rot // 2], x[..., n_rot // 2:n_rot] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2], x[..., 1:n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return x


class _Recorder:
    """x @ W.T that also adds x's squares to the importance matrix under W's tensor name."""

    def __init__(self, gguf, imx: ImportanceMatrix, process_output: bool):
        self.names = {t.data.ctypes.data: t.name for t in gguf.tensors.values() if t.nbytes}
        self.imx, self.process_output = imx, process_output

    def __call__(self, x: np.ndarray, w) -> np.ndarray:
        data, qtype, rows, cols = w
        name = self.names.get(data.ctypes.data)
        if name is not None and x.shape[0] >= 16 and (name.startswith("blk.") or
                                                       (self.process_output and name == "output.weight")):
            self.imx.add(name, x)
        W = dequantize(data, qtype, rows * cols).reshape(rows, cols)
        return x @ W.T


_UNSUPPORTED = ("experts", "moe", "ssm", "recurrent")


def _forward(spec: dict, tokens: np.ndarray, mm: _Recorder) -> np.ndarray:
    """The forward of reference shape (no KV cache) for the activations it records; returns the
    logits (n, n_vocab), which tests compare with the C forward's."""
    if spec.get("non_causal"):
        raise ModelError("imatrix collection does not handle encoders (bert, nomic-bert) yet")
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    kind, eps = spec.get("norm_type", "rms"), spec["norm_eps"]
    data, qtype, rows, cols = spec["tok_embd"]
    row_bytes = len(data) // rows
    x = np.stack([dequantize(data[t * row_bytes:(t + 1) * row_bytes], qtype, cols) for t in tokens])
    x = (x * spec.get("embd_scale", 1.0)).astype(np.float32)                 # (n, n_embd)
    if spec.get("pos_embd") is not None:                                     # learned positions (gpt2)
        pdata, ptype, prows, pcols = spec["pos_embd"]
        x = x + dequantize(pdata[:n * (len(pdata) // prows)], ptype, n * pcols).reshape(n, pcols)
    if spec.get("embd_norm") is not None:                                    # bloom
        x = _norm(x, spec["embd_norm"], spec.get("embd_norm_b"), kind, eps)
    causal = np.arange(n)[None, :] <= np.arange(n)[:, None]
    for L in spec["layers"]:
        if L.get("kind", "attention") != "attention" or L.get("n_expert") or any(k in L for k in _UNSUPPORTED):
            raise ModelError("imatrix collection does not handle expert or recurrent layers yet")
        nh, nkv, hd = L["n_head"], L["n_head_kv"], L["head_dim"]
        rs = np.float32(L.get("residual_scale", 1.0) or 1.0)                 # granite
        # no pre-norm (olmo2): the block reads x itself
        h = x if L["attn_norm"] is None else _norm(x, L["attn_norm"], L.get("attn_norm_b"), kind, eps)
        if L.get("wk") is None:
            q, k, v = np.split(mm(h, L["wq"]), [nh * hd, nh * hd + nkv * hd], axis=-1)
        else:
            q, k, v = mm(h, L["wq"]), mm(h, L["wk"]), mm(h, L["wv"])
        q = q + L["bq"] if L.get("bq") is not None else q
        k = k + L["bk"] if L.get("bk") is not None else k
        v = v + L["bv"] if L.get("bv") is not None else v
        if L.get("qk_norm_full"):   # over all heads at once (olmo2)
            q = _norm(q, L["q_norm"], None, "rms", eps) if L.get("q_norm") is not None else q
            k = _norm(k, L["k_norm"], None, "rms", eps) if L.get("k_norm") is not None else k
        q, k, v = q.reshape(n, nh, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, hd)
        if not L.get("qk_norm_full"):   # per head: RMS, or LayerNorm (stablelm), with a weight vector per head
            qk_kind, per_head = L.get("qk_norm_type", "rms"), L.get("qk_norm_head_weights", False)
            if L.get("q_norm") is not None:
                q = _norm(q, L["q_norm"].reshape(nh, hd) if per_head else L["q_norm"], None, qk_kind, eps)
            if L.get("k_norm") is not None:
                k = _norm(k, L["k_norm"].reshape(nkv, hd) if per_head else L["k_norm"], None, qk_kind, eps)
        q, k = _rope(q, L.get("rope"), pos), _rope(k, L.get("rope"), pos)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * np.float32(L["attn_scale"])   # (n_head, n, n)
        cap = L.get("attn_softcap", 0.0)
        if cap:
            scores = cap * np.tanh(scores / cap)
        if L.get("alibi_slopes") is not None:                                # bloom: slope_h * (key - query)
            scores = scores + L["alibi_slopes"][:, None, None] * (np.arange(n)[None, :] - np.arange(n)[:, None])
        allowed = causal.copy()
        if L.get("sliding_window", 0):
            allowed &= (np.arange(n)[:, None] - np.arange(n)[None, :]) < L["sliding_window"]
        scores = np.where(allowed[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", scores, v).reshape(n, nh * hd).astype(np.float32)
        out = mm(attn, L["wo"])
        if L.get("bo") is not None:
            out = out + L["bo"]
        if L.get("post_attn_norm") is not None:
            out = _norm(out, L["post_attn_norm"], None, kind, eps)
        out = out * rs
        if L.get("parallel_residual"):   # the FFN's own norm of x (gptneox), else attention's normed input
            f_in = h if L.get("ffn_norm") is None else _norm(x, L["ffn_norm"], L.get("ffn_norm_b"), kind, eps)
        else:
            x = x + out
            f_in = x if L.get("ffn_norm") is None else _norm(x, L["ffn_norm"], L.get("ffn_norm_b"), kind, eps)
        up = mm(f_in, L["w_up"])
        gate = None
        if L.get("fused_gate_up"):
            gate, up = np.split(up, 2, axis=-1)
            if L.get("b_up") is not None:
                up = up + L["b_up"]
        else:
            if L.get("b_up") is not None:
                up = up + L["b_up"]
            if L.get("w_gate") is not None:
                gate = mm(f_in, L["w_gate"])
                if L.get("b_gate") is not None:
                    gate = gate + L["b_gate"]
        act = L.get("act", "silu")
        hdn = (_act(act, gate) * up if gate is not None else _act(act, up)).astype(np.float32)
        f = mm(hdn, L["w_down"])
        if L.get("b_down") is not None:
            f = f + L["b_down"]
        if L.get("post_ffn_norm") is not None:
            f = _norm(f, L["post_ffn_norm"], None, kind, eps)
        f = f * rs
        x = (x + f + (out if L.get("parallel_residual") else 0.0)).astype(np.float32)
    logits = mm(_norm(x, spec["out_norm"], spec.get("out_norm_b"), kind, eps), spec["output"])
    logits = logits * np.float32(spec.get("logit_scale", 1.0))
    cap = spec.get("final_softcap", 0.0)
    return cap * np.tanh(logits / cap) if cap else logits


def collect_imatrix(engine, text: str, *, n_ctx: int = 512, n_chunks: int | None = None,
                    process_output: bool = False, dataset: str = "", progress=None) -> ImportanceMatrix:
    """The importance matrix of engine's model over text (llama-imatrix's chunks and counts)."""
    tokens = engine.tokenize(text, add_special=True, parse_special=False)
    if n_ctx < 16:
        raise InvalidArgumentError(f"-c {n_ctx}: llama-imatrix ignores batches under 16 tokens")
    if len(tokens) < 2 * n_ctx:
        raise InvalidArgumentError(f"you need at least {2 * n_ctx} tokens for a context of {n_ctx} tokens; the "
                                   f"text tokenizes to only {len(tokens)}")
    n_max = len(tokens) // n_ctx
    n = n_max if n_chunks is None or n_chunks < 0 else min(n_chunks, n_max)
    spec = engine.arch.build()
    imx = ImportanceMatrix(datasets=[dataset] if dataset else [], chunk_size=n_ctx)
    mm = _Recorder(engine.gguf, imx, process_output)
    bos, add_bos = engine.tokenizer.bos_id, engine.tokenizer.add_bos
    for i in range(n):
        t0 = time.perf_counter()
        chunk = np.asarray(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos and bos is not None:
            chunk = chunk.copy()
            chunk[0] = bos
        _forward(spec, chunk, mm)
        imx.chunk_count = i + 1
        if progress is not None:
            progress(i, n, time.perf_counter() - t0)
    return imx
