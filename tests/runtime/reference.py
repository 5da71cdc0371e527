"""A plain NumPy transformer forward: slow, obvious, float64 — the oracle the C forward is checked against.

It reads the same plan spec the engine builds (oxillama.models), dequantizes every weight with
oxillama.quant.dequantize (itself tested bit-exact against gguf.quants), and does the math one step
at a time with no activation quantization, no KV cache and no threading.
"""
from __future__ import annotations

import math

import numpy as np

from oxillama.quant import dequantize


def _mat(w) -> np.ndarray | None:
    if w is None:
        return None
    data, qtype, rows, cols = w
    return dequantize(data, qtype, rows * cols).reshape(rows, cols).astype(np.float64)


_VEC_DOT_TYPE = {"F32": None, "F16": None, "BF16": None, "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0",
                 "IQ4_NL": "Q8_0", "MXFP4": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1", "Q8_1": "Q8_1"}


def _round_act(x, qtype_id: int):
    """x rounded to the activation type the C kernels use for weights of qtype_id (Q8_0/Q8_1 for 32-blocks,
    Q8_K for K-quants), so only summation order differs."""
    from oxillama.quant import GGMLType, quantize
    act = _VEC_DOT_TYPE.get(GGMLType(qtype_id).name, "Q8_K")
    if act is None:
        return x
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    return dequantize(quantize(x32, act), act, x32.size).reshape(x.shape).astype(np.float64)


def _matmul(x, w, emulate: bool):
    """x @ W.T; with emulate, x first rounded as the kernels round it (_round_act)."""
    W = _mat(w)
    if emulate:
        x = _round_act(x, w[1])
    return x @ W.T


def _softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def route(logits, L):
    """The router: (n, k) chosen experts, best first, and their weights, as transformers' MoE blocks compute
    them (softmax | sigmoid | top-k logits then softmax; renormalised; scaled)."""
    k, gating = L["n_expert_used"], L.get("gating", "softmax")
    if gating == "sparsemixer":
        return _sparsemixer(logits, L["router_eps"])
    p = _softmax(logits) if gating == "softmax" else 1.0 / (1.0 + np.exp(-logits)) if gating == "sigmoid" else logits
    sc = p if L.get("sel_bias") is None else p + _vec(L["sel_bias"])   # DeepSeek-V3, lfm2moe: choose by p + bias
    if L.get("n_group", 0) > 1:   # only within the n_group_used best groups: DeepSeek-V3's (sigmoid) rank a
        ng = L["n_group"]         # group by its two best scores' sum, V2's (softmax) by its best score
        groups = np.sort(sc.reshape(len(sc), ng, -1), axis=-1)[..., ::-1]
        top2 = groups[..., :2].sum(-1) if gating == "sigmoid" else groups[..., 0]
        keep = np.argsort(-top2, axis=-1, kind="stable")[:, :L["n_group_used"]]
        mask = np.zeros(top2.shape, bool)
        np.put_along_axis(mask, keep, True, -1)
        sc = np.where(np.repeat(mask, groups.shape[-1], axis=-1), sc, -np.inf)
    sel = np.argsort(-sc, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, sel, -1)
    if gating == "softmax_weight":
        w = _softmax(w)
    if L.get("norm_topk"):
        w = w / w.sum(-1, keepdims=True)
    return sel, w * L.get("expert_scale", 1.0)


def _sparsemixer(logits, eps):
    """Phi-3.5-MoE's router in eval mode (transformers' sparsemixer): the best expert, then the best of the
    others, each weighted by a softmax over the logits within 2 eps (relative) of it."""
    sel, w = np.zeros((len(logits), 2), np.int64), np.zeros((len(logits), 2))
    for j in range(2):
        best = logits.argmax(-1)
        top = np.take_along_axis(logits, best[:, None], -1)
        with np.errstate(invalid="ignore"):     # taken experts: -inf / inf, not close
            close = (top - logits) / np.maximum(np.abs(logits), top) <= 2 * eps
        masked = np.where(close, logits, -np.inf)
        sel[:, j] = best
        w[:, j] = 1.0 / np.exp(masked - top).sum(-1)
        logits = logits.copy()
        logits[np.arange(len(logits)), best] = -np.inf
    return sel, w


def _dense_ffn(f_in, L, em):
    up = _matmul(f_in, L["w_up"], em)
    if L.get("b_up") is not None and not L.get("fused_gate_up"):
        up = up + L["b_up"]
    if L.get("fused_gate_up"):
        gate, up = np.split(up, 2, axis=-1)
        if L.get("b_up") is not None:
            up = up + L["b_up"]
    elif L.get("w_gate") is not None:
        gate = _matmul(f_in, L["w_gate"], em)
        if L.get("b_gate") is not None:
            gate = gate + L["b_gate"]
    else:
        gate = None
    act = L.get("act", "silu")
    hdn = _act(act, gate) * up if gate is not None else _act(act, up)
    f = _matmul(hdn, L["w_down"], em)
    if L.get("b_down") is not None:
        f = f + L["b_down"]
    return f


def _moe_ffn(x, L, em, trace):
    """Each token's chosen experts, weighted and summed expert by expert (as transformers' loop over experts);
    the shared expert, gated by sigmoid(shexp_gate . x) where there is one, added."""
    ne, ff, n_embd = L["n_expert"], L["n_ff_exp"], x.shape[1]
    logits = _matmul(x, L["router"], em)
    if L.get("router_b") is not None:
        logits = logits + _vec(L["router_b"])
    sel, w = route(logits, L)
    if trace is not None:
        trace.append((sel, w))
    G, U, D = (_mat(L[k]).reshape(ne, -1, _mat(L[k]).shape[1]) for k in ("exp_gate", "exp_up", "exp_down"))
    out = np.zeros_like(x)
    for e in range(ne):
        rows, slot = np.nonzero(sel == e)
        if rows.size == 0:
            continue
        xe = x[rows]
        xg = _round_act(xe, L["exp_gate"][1]) if em else xe
        xu = _round_act(xe, L["exp_up"][1]) if em else xe
        g, u = xg @ G[e].T, xu @ U[e].T
        if L.get("exp_gate_b") is not None:
            g = g + _vec(L["exp_gate_b"]).reshape(ne, ff)[e]
            u = u + _vec(L["exp_up_b"]).reshape(ne, ff)[e]
        if L.get("act") == "swiglu_oai":
            h = _swiglu_oai(g, u, L["act_alpha"], L["act_limit"])
        else:
            h = _act(L.get("act", "silu"), g) * u
        if em:
            h = _round_act(h, L["exp_down"][1])
        d = h @ D[e].T
        if L.get("exp_down_b") is not None:
            d = d + _vec(L["exp_down_b"]).reshape(ne, n_embd)[e]
        out[rows] += w[rows, slot][:, None] * d
    if L.get("w_up") is not None:
        shared = _dense_ffn(x, L, em)
        if L.get("shexp_gate") is not None:
            shared = shared / (1.0 + np.exp(-(x @ _vec(L["shexp_gate"]))))[:, None]
        out = out + shared
    return out


def _swiglu_oai(g, u, alpha, limit):
    """gpt-oss's clamped SwiGLU, as transformers' GptOssExperts._apply_gate."""
    g = np.minimum(g, limit)
    u = np.clip(u, -limit, limit)
    return (u + 1.0) * g / (1.0 + np.exp(-alpha * g))


def _vec(v):
    return None if v is None else np.asarray(v, dtype=np.float64)


def _norm(x, w, b, kind, eps):
    if kind == "layer":
        mu = x.mean(-1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    else:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _act(kind, g):
    if kind == "silu":
        return g / (1.0 + np.exp(-g))
    if kind in ("gelu_tanh", "gelu"):
        return 0.5 * g * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
    from math import erf
    return 0.5 * g * (1.0 + np.vectorize(erf)(g / math.sqrt(2)))


def _rope_angles(rope, pos, n_rot):
    """(n_pos, n_rot/2) angles and the magnitude scale, YaRN included, by the textbook formula."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = rope["base"] ** (-2.0 * i / n_rot)
    ff = rope.get("freq_factors")
    if ff is not None:
        inv_freq = inv_freq / np.asarray(ff, dtype=np.float64)
    freq_scale = rope.get("freq_scale", 1.0)
    ext = rope.get("ext_factor", 0.0)
    mscale = rope.get("attn_factor", 1.0)
    theta_extrap = np.outer(pos, inv_freq)
    theta_interp = freq_scale * theta_extrap
    if ext:
        lo, hi = rope["corr_dims"]
        ramp = 1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)
        mix = ramp * ext
        theta = theta_interp * (1 - mix) + theta_extrap * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    else:
        theta = theta_interp
    return theta, mscale


def _apply_rope(x, rope, pos):
    """x: (n_pos, n_heads, head_dim)."""
    if rope is None or rope.get("mode", "none") == "none":
        return x
    n_rot = rope.get("n_rot", x.shape[-1])
    theta, mscale = _rope_angles(rope, pos, n_rot)
    cos = (np.cos(theta) * mscale)[:, None, :]
    sin = (np.sin(theta) * mscale)[:, None, :]
    x = x.copy()
    if rope["mode"] == "neox":
        a, b = x[..., : n_rot // 2].copy(), x[..., n_rot // 2: n_rot].copy()
        x[..., : n_rot // 2] = a * cos - b * sin
        x[..., n_rot // 2: n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2] = a * cos - b * sin
        x[..., 1:n_rot:2] = a * sin + b * cos
    return x


def _mla(h, L, pos, eps, em):
    """DeepSeek's multi-head latent attention in its expanded form (as transformers runs it): the latent c and the
    shared k_pe per token, keys [W_kb_h^T c | k_pe] and values W_vb_h c per head, plain causal attention."""
    n, nh = len(h), L["n_head"]
    r, dn, dr, dv = L["mla_kv_lora_rank"], L["mla_d_nope"], L["mla_d_rope"], L["mla_d_v"]
    if L["mla_q_lora_rank"]:
        qa = _norm(_matmul(h, L["mla_wq_a"], em), _vec(L["mla_q_a_norm"]), None, "rms", eps)
        q = _matmul(qa, L["mla_wq_b"], em)
    else:
        q = _matmul(h, L["mla_wq"], em)
    q = q.reshape(n, nh, dn + dr)
    ckv = _matmul(h, L["mla_wkv_a"], em)
    c = _norm(ckv[:, :r], _vec(L["mla_kv_a_norm"]), None, "rms", eps)              # (n, r)
    k_pe = _apply_rope(ckv[:, None, r:], L["rope"], pos)                          # (n, 1, dr)
    q_pe = _apply_rope(q[..., dn:], L["rope"], pos)                               # (n, nh, dr)
    if em:   # the cache stores [c | k_pe] as float16
        c = c.astype(np.float16).astype(np.float64)
        k_pe = k_pe.astype(np.float16).astype(np.float64)
    k_b = _mat(L["mla_wk_b"]).reshape(nh, r, dn)                                  # per head (r, nope)
    v_b = _mat(L["mla_wv_b"]).reshape(nh, dv, r)                                  # per head (v_dim, r)
    k_nope = np.einsum("tr,hrd->thd", c, k_b)                                     # (n, nh, nope)
    v = np.einsum("tr,hvr->thv", c, v_b)                                          # (n, nh, v_dim)
    scores = (np.einsum("qhd,khd->hqk", q[..., :dn], k_nope) +
              np.einsum("qhd,kd->hqk", q_pe, k_pe[:, 0])) * L["attn_scale"]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    scores = np.where((j <= i)[None], scores, -np.inf)
    p = _softmax(scores)
    attn = np.einsum("hqk,khv->qhv", p, v).reshape(n, nh * dv)
    return _matmul(attn, L["wo"], em)


def reference_forward(spec: dict, tokens: list[int], *, emulate_kernels: bool = False,
                      router_trace: list | None = None) -> np.ndarray:
    """Logits (n_tokens, n_vocab) for tokens at positions 0..n-1.

    emulate_kernels: round activations to the kernels' activation types and K/V to float16, as the
    engine does; what remains is summation order, so the comparison can be tight.
    router_trace: a list that gets each MoE layer's (chosen experts, weights).
    """
    em = emulate_kernels
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    kind, eps = spec.get("norm_type", "rms"), spec["norm_eps"]
    emb = _mat(spec["tok_embd"])
    x = emb[np.asarray(tokens)] * spec.get("embd_scale", 1.0)          # (n, n_embd)
    if spec.get("pos_embd") is not None:                                 # learned positions (gpt2)
        x = x + _mat(spec["pos_embd"])[:n]
    if spec.get("embd_norm") is not None:                                # bloom
        x = _norm(x, _vec(spec["embd_norm"]), _vec(spec.get("embd_norm_b")), kind, eps)
    for L in spec["layers"]:
        nh, nkv, hd = L["n_head"], L["n_head_kv"], L["head_dim"]
        rs = L.get("residual_scale", 1.0) or 1.0                         # granite
        # no pre-norm (olmo2): the block reads x itself
        h = x if L["attn_norm"] is None else _norm(x, _vec(L["attn_norm"]), _vec(L.get("attn_norm_b")), kind, eps)
        if L.get("kind") == "mla":
            x = x + _mla(h, L, pos, eps, em)
            f_in = _norm(x, _vec(L["ffn_norm"]), None, kind, eps)
            x = x + (_moe_ffn(f_in, L, em, router_trace) if L.get("n_expert") else _dense_ffn(f_in, L, em))
            continue
        if L.get("wk") is None:                                          # fused QKV
            qkv = _matmul(h, L["wq"], em)
            q, k, v = np.split(qkv, [nh * hd, nh * hd + nkv * hd], axis=-1)
        else:
            q, k, v = _matmul(h, L["wq"], em), _matmul(h, L["wk"], em), _matmul(h, L["wv"], em)
        for name, t in (("bq", "q"), ("bk", "k"), ("bv", "v")):
            if L.get(name) is not None:
                if t == "q":
                    q = q + L[name]
                elif t == "k":
                    k = k + L[name]
                else:
                    v = v + L[name]
        q = q.reshape(n, nh, hd)                                         # (n, n_head, head_dim)
        k = k.reshape(n, nkv, hd)
        v = v.reshape(n, nkv, hd)
        if L.get("qk_norm_full"):   # over all heads at once (olmoe)
            q = _norm(q.reshape(n, -1), _vec(L["q_norm"]), None, "rms", eps).reshape(q.shape)
            k = _norm(k.reshape(n, -1), _vec(L["k_norm"]), None, "rms", eps).reshape(k.shape)
        else:   # per head: RMS, or LayerNorm (stablelm) with one weight vector per head where given
            qk_kind = L.get("qk_norm_type", "rms")
            per_head = L.get("qk_norm_head_weights", False)
            if L.get("q_norm") is not None:
                q = _norm(q, _vec(L["q_norm"]).reshape(nh, hd) if per_head else _vec(L["q_norm"]), None, qk_kind, eps)
            if L.get("k_norm") is not None:
                k = _norm(k, _vec(L["k_norm"]).reshape(nkv, hd) if per_head else _vec(L["k_norm"]), None, qk_kind,
                          eps)
        q = _apply_rope(q, L.get("rope"), pos)
        k = _apply_rope(k, L.get("rope"), pos)
        if em:   # the cache stores K and V as float16
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        group = nh // nkv
        k = np.repeat(k, group, axis=1)
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * L["attn_scale"]      # (n_head, n, n)
        cap = L.get("attn_softcap", 0.0)
        if cap:
            scores = cap * np.tanh(scores / cap)
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        if L.get("alibi_slopes") is not None:                            # bloom: slope_h * (key - query)
            scores = scores + _vec(L["alibi_slopes"])[:, None, None] * (j - i)[None]
        allowed = j <= i
        win = L.get("sliding_window", 0)
        if win:
            allowed &= (i - j) < win
        scores = np.where(allowed[None], scores, -np.inf)
        sinks = L.get("attn_sinks")
        if sinks is not None:   # one more logit per head in the softmax, with no value (gpt-oss)
            sink = np.broadcast_to(_vec(sinks)[:, None, None], (nh, n, 1))
            scores = np.concatenate([scores, sink], axis=-1)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        if sinks is not None:
            scores = scores[..., :-1]
        attn = np.einsum("hqk,khd->qhd", scores, v).reshape(n, nh * hd)
        out = _matmul(attn, L["wo"], em)
        if L.get("bo") is not None:
            out = out + L["bo"]
        if L.get("post_attn_norm") is not None:
            out = _norm(out, _vec(L["post_attn_norm"]), None, kind, eps)
        out = out * rs
        if L.get("parallel_residual"):   # the FFN's own norm of x (gptneox), else attention's normed input
            f_in = h if L.get("ffn_norm") is None else _norm(x, _vec(L["ffn_norm"]), _vec(L.get("ffn_norm_b")),
                                                             kind, eps)
        else:
            x = x + out
            f_in = x if L.get("ffn_norm") is None else _norm(x, _vec(L["ffn_norm"]), _vec(L.get("ffn_norm_b")),
                                                             kind, eps)
        f = _moe_ffn(f_in, L, em, router_trace) if L.get("n_expert") else _dense_ffn(f_in, L, em)
        if L.get("post_ffn_norm") is not None:
            f = _norm(f, _vec(L["post_ffn_norm"]), None, kind, eps)
        f = f * rs
        x = x + f + (out if L.get("parallel_residual") else 0.0)
    x = _norm(x, _vec(spec["out_norm"]), _vec(spec.get("out_norm_b")), kind, eps)
    logits = _matmul(x, spec["output"], em)
    if spec.get("output_b") is not None:
        logits = logits + _vec(spec["output_b"])
    logits = logits * spec.get("logit_scale", 1.0)
    cap = spec.get("final_softcap", 0.0)
    if cap:
        logits = cap * np.tanh(logits / cap)
    return logits
