"""Tiny random mixture-of-experts GGUF files in llama.cpp's layout, written at test time (no torch needed).

Each family's file carries what distinguishes it: qwen3moe per-head Q/K norms and renormalised top-k,
qwen2moe QKV biases and a sigmoid-gated shared expert, olmoe Q/K norms over all heads, llama (Mixtral) adjacent-
pair RoPE; plus variants of the router (sigmoid gating, top-k then softmax, a weights scale). Weights are drawn
with a fixed seed at a scale where the router's choices are clear-cut (see router_margin in test_moe.py).
"""
from __future__ import annotations

import numpy as np

from oxillama.convert.hf import _minimal_vocab
from oxillama.gguf import GGUFWriter

N_VOCAB = 288
N_EMBD = 64
N_HEAD, N_HEAD_KV, HEAD_DIM = 4, 2, 16
N_LAYER = 2
N_EXPERT, N_USED, N_FF_EXP, N_FF_SHARED = 8, 2, 32, 64
GPT_OSS_WINDOW = 24

# name -> (GGUF architecture, extra metadata, block features)
FAMILIES = {
    "qwen3moe": ("qwen3moe", {}, {"qk_norm": "head"}),
    "qwen2moe": ("qwen2moe", {}, {"qkv_bias": True, "shared": True}),
    "olmoe": ("olmoe", {}, {"qk_norm": "full", "mha": True}),   # llama.cpp's olmoe has no GQA
    "mixtral": ("llama", {}, {}),
    "qwen3moe-sigmoid": ("qwen3moe", {"expert_gating_func": 2, "expert_weights_scale": 2.5}, {"qk_norm": "head"}),
    "qwen3moe-topk-softmax": ("qwen3moe", {"expert_gating_func": 3, "expert_weights_norm": False},
                              {"qk_norm": "head"}),
    # attention sinks, the even layers sliding over 24 positions (across a KV page and an attention chunk of the
    # invariance tests' 150 tokens), Q/K/V/O, router and expert biases; post_attention_norm as the FFN's norm.
    # No YaRN: llama.cpp truncates its blend range where gpt-oss does not (test_moe_transformers.py checks it)
    "gpt-oss": ("gpt-oss", {"attention.sliding_window": GPT_OSS_WINDOW}, {"gpt_oss": True}),
    # LayerNorms with biases, Q/K/V/O and logit biases, the sparsemixer router (expert 1's row 0.5% from expert
    # 0's, so that its softmax over the logits near the chosen one has several terms)
    "phimoe": ("phimoe", {}, {"phimoe": True}),
}


def write_tiny_moe(path, name: str, *, seed: int = 7, qtype: str = "F32", overrides: dict | None = None,
                   drop: tuple[str, ...] = (), reshape: dict | None = None) -> str:
    """Write the tiny model `name` to path. overrides: metadata keys (without the arch prefix) to set (None
    removes one); drop: tensor names to leave out; reshape: tensor name -> a replacement array (bad files)."""
    arch, meta, feat = FAMILIES[name]
    rng = np.random.default_rng(seed)

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    n_head_kv = N_HEAD if feat.get("mha") else N_HEAD_KV
    oss = feat.get("gpt_oss", False)
    phimoe = feat.get("phimoe", False)
    q_dim, kv_dim = N_HEAD * HEAD_DIM, n_head_kv * HEAD_DIM
    md = {"general.architecture": arch, "general.name": f"tiny-{name}", "general.alignment": 32,
          f"{arch}.context_length": 256, f"{arch}.embedding_length": N_EMBD, f"{arch}.block_count": N_LAYER,
          # llama.cpp's llama (Mixtral) reads the experts' width here
          f"{arch}.feed_forward_length": N_FF_EXP, f"{arch}.attention.head_count": N_HEAD,
          f"{arch}.attention.head_count_kv": n_head_kv, f"{arch}.attention.key_length": HEAD_DIM,
          f"{arch}.attention.value_length": HEAD_DIM, f"{arch}.rope.freq_base": 10000.0,
          f"{arch}.attention.layer_norm_rms_epsilon": 1e-6, f"{arch}.expert_count": N_EXPERT,
          f"{arch}.expert_used_count": N_USED, f"{arch}.expert_feed_forward_length": N_FF_EXP}
    if feat.get("shared"):
        md[f"{arch}.expert_shared_feed_forward_length"] = N_FF_SHARED
    md.update({f"{arch}.{k}": v for k, v in meta.items()})
    for k, v in (overrides or {}).items():
        if v is None:
            md.pop(f"{arch}.{k}", None)
        else:
            md[f"{arch}.{k}"] = v
    t = {"token_embd.weight": rng.standard_normal((N_VOCAB, N_EMBD)).astype(np.float32),
         "output_norm.weight": norm(N_EMBD), "output.weight": mat(N_VOCAB, N_EMBD)}
    if phimoe:
        t.update({"output_norm.bias": (0.1 * rng.standard_normal(N_EMBD)).astype(np.float32),
                  "output.bias": (0.1 * rng.standard_normal(N_VOCAB)).astype(np.float32)})
    for il in range(N_LAYER):
        p = f"blk.{il}."
        t.update({p + "attn_norm.weight": norm(N_EMBD), p + "attn_q.weight": mat(q_dim, N_EMBD),
                  p + "attn_k.weight": mat(kv_dim, N_EMBD), p + "attn_v.weight": mat(kv_dim, N_EMBD),
                  p + "attn_output.weight": mat(N_EMBD, q_dim),
                  p + ("post_attention_norm.weight" if oss else "ffn_norm.weight"): norm(N_EMBD),
                  # a router of scale 3: its choices are well separated, so tests see a wrong choice
                  p + "ffn_gate_inp.weight": 3.0 * mat(N_EXPERT, N_EMBD),
                  p + "ffn_gate_exps.weight": mat(N_EXPERT, N_FF_EXP, N_EMBD),
                  p + "ffn_up_exps.weight": mat(N_EXPERT, N_FF_EXP, N_EMBD),
                  p + "ffn_down_exps.weight": mat(N_EXPERT, N_EMBD, N_FF_EXP)})
        if feat.get("qk_norm") == "head":
            t[p + "attn_q_norm.weight"], t[p + "attn_k_norm.weight"] = norm(HEAD_DIM), norm(HEAD_DIM)
        elif feat.get("qk_norm") == "full":
            t[p + "attn_q_norm.weight"], t[p + "attn_k_norm.weight"] = norm(q_dim), norm(kv_dim)
        if feat.get("qkv_bias"):
            for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                t[p + f"attn_{n}.bias"] = (0.1 * rng.standard_normal(d)).astype(np.float32)
        if oss:
            def bias(*shape):
                return (0.1 * rng.standard_normal(shape)).astype(np.float32)
            t[p + "attn_sinks.weight"] = rng.standard_normal(N_HEAD).astype(np.float32)
            for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim), ("output", N_EMBD)):
                t[p + f"attn_{n}.bias"] = bias(d)
            t[p + "ffn_gate_inp.bias"] = bias(N_EXPERT)
            # gate/up at 4x: some pre-activations pass the clamped SwiGLU's limit of 7
            t[p + "ffn_gate_exps.weight"] *= 4.0
            t[p + "ffn_up_exps.weight"] *= 4.0
            t.update({p + "ffn_gate_exps.bias": bias(N_EXPERT, N_FF_EXP), p + "ffn_up_exps.bias": bias(N_EXPERT, N_FF_EXP),
                      p + "ffn_down_exps.bias": bias(N_EXPERT, N_EMBD)})
        if phimoe:
            for n, d in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim), ("attn_output", N_EMBD),
                         ("attn_norm", N_EMBD), ("ffn_norm", N_EMBD)):
                t[p + f"{n}.bias"] = (0.1 * rng.standard_normal(d)).astype(np.float32)
            t[p + "ffn_gate_inp.weight"][1] = t[p + "ffn_gate_inp.weight"][0] * 0.995
        if feat.get("shared"):
            t.update({p + "ffn_gate_shexp.weight": mat(N_FF_SHARED, N_EMBD),
                      p + "ffn_up_shexp.weight": mat(N_FF_SHARED, N_EMBD),
                      p + "ffn_down_shexp.weight": mat(N_EMBD, N_FF_SHARED),
                      p + "ffn_gate_inp_shexp.weight": mat(1, N_EMBD).reshape(N_EMBD)})
    t.update(reshape or {})
    w = GGUFWriter(path)
    for k, v in md.items():
        is_int = isinstance(v, int) and not isinstance(v, bool)
        w.add_metadata(k, v, type="UINT32" if is_int else None)
    for k, v in _minimal_vocab(N_VOCAB).items():
        w.add_metadata(k, v)
    for k, v in t.items():
        if k in drop:
            continue
        # norms, biases and the router stay F32, as llama.cpp's quantize keeps them
        keep = v.ndim < 2 or k.endswith(("ffn_gate_inp.weight", ".bias")) or k == "token_embd.weight"
        w.add_tensor(k, v, qtype="F32" if keep else qtype)
    w.write()
    return str(path)
