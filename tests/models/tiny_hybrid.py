"""Tiny random hybrid (recurrent + attention) GGUF files in llama.cpp's layout, written at test time (no torch).

lfm2: LFM2's gated short-convolution layers and GQA attention layers (per-head Q/K RMS norms, NeoX RoPE), the
layer kinds given by `lfm2.attention.head_count_kv` (0 = conv), the final norm as token_embd_norm; lfm2moe: the same
blocks, the first dense, the others a sigmoid-routed mixture with an expert bias. qwen3next: gated DeltaNet layers,
gated full attention every 4th, experts with a gated shared expert; qwen35 / qwen35moe: Qwen3.5's split b / a
projections and tiled value heads, a dense FFN or Qwen3-Next's experts.
The same weights under Hugging Face names (`*_hf_tensors`) make make_hybrid_goldens.py's transformers models, whose
logits are committed in data/hybrid_goldens.npz.
"""
from __future__ import annotations

import numpy as np

from oxillama.convert.hf import _minimal_vocab
from oxillama.gguf import GGUFWriter

N_VOCAB = 288
N_EMBD = 64
N_HEAD, N_HEAD_KV, HEAD_DIM = 4, 2, 16
N_FF = 96
CONV_L = 3
# conv, conv, attention, conv, attention, conv (LFM2's real files interleave them like this)
LFM2_KINDS = ("shortconv", "shortconv", "attention", "shortconv", "attention", "shortconv")
ROPE_BASE = 1_000_000.0
LFM2_SWA = 24   # the sliding window of the lfm2_swa goldens: far shorter than their 150-token prompt
NORM_EPS = 1e-5


def lfm2_tensors(seed: int = 11) -> dict[str, np.ndarray]:
    """The tiny LFM2's weights by GGUF name (numpy row-major shapes: rows = outputs)."""
    rng = np.random.default_rng(seed)

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    t = {"token_embd.weight": rng.standard_normal((N_VOCAB, N_EMBD)).astype(np.float32),
         "token_embd_norm.weight": norm(N_EMBD)}
    for il, kind in enumerate(LFM2_KINDS):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(N_EMBD)
        if kind == "shortconv":
            t[p + "shortconv.in_proj.weight"] = mat(3 * N_EMBD, N_EMBD)
            # taps of scale ~0.6: the state's two older inputs weigh as much as the new one
            t[p + "shortconv.conv.weight"] = (0.6 * rng.standard_normal((N_EMBD, CONV_L))).astype(np.float32)
            t[p + "shortconv.out_proj.weight"] = mat(N_EMBD, N_EMBD)
        else:
            t[p + "attn_q.weight"] = mat(q_dim, N_EMBD)
            t[p + "attn_k.weight"] = mat(kv_dim, N_EMBD)
            t[p + "attn_v.weight"] = mat(kv_dim, N_EMBD)
            t[p + "attn_output.weight"] = mat(N_EMBD, q_dim)
            t[p + "attn_q_norm.weight"] = norm(HEAD_DIM)
            t[p + "attn_k_norm.weight"] = norm(HEAD_DIM)
        t[p + "ffn_norm.weight"] = norm(N_EMBD)
        t[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD)
        t[p + "ffn_up.weight"] = mat(N_FF, N_EMBD)
        t[p + "ffn_down.weight"] = mat(N_EMBD, N_FF)
    return t


def lfm2_metadata() -> dict:
    a = "lfm2"
    return {"general.architecture": a, "general.name": "tiny-lfm2", "general.alignment": 32,
            f"{a}.context_length": 1024, f"{a}.embedding_length": N_EMBD, f"{a}.block_count": len(LFM2_KINDS),
            f"{a}.feed_forward_length": N_FF, f"{a}.attention.head_count": N_HEAD,
            f"{a}.attention.head_count_kv": np.array([0 if k == "shortconv" else N_HEAD_KV for k in LFM2_KINDS],
                                                     dtype=np.int32),
            f"{a}.rope.freq_base": ROPE_BASE, f"{a}.attention.layer_norm_rms_epsilon": NORM_EPS,
            f"{a}.shortconv.l_cache": CONV_L, f"{a}.vocab_size": N_VOCAB}


def lfm2_chat_vocab(chat_template: str) -> dict:
    """The minimal vocabulary with LFM2's chat tokens (<|startoftext|> the BOS, <|im_start|>, <|im_end|> the EOS,
    at LFM2's ids 1, 6 and 7 they are not: only their texts matter to the template) and its chat template."""
    v = _minimal_vocab(N_VOCAB)
    tokens, types = list(v["tokenizer.ggml.tokens"]), v["tokenizer.ggml.token_type"].copy()
    merges = list(v["tokenizer.ggml.merges"])
    last = merges.pop()   # the last merge's token becomes <|im_start|>
    i = tokens.index(last.replace(" ", ""))
    tokens[i], types[i] = "<|im_start|>", 3
    tokens[-2], tokens[-1] = "<|startoftext|>", "<|im_end|>"
    v.update({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
              "tokenizer.chat_template": chat_template})
    return v


def _write_gguf(path, md: dict, t: dict[str, np.ndarray], *, qtype: str, keep_f32: tuple[str, ...],
                overrides: dict | None = None, drop: tuple[str, ...] = (), reshape: dict | None = None,
                vocab: dict | None = None, qtypes: dict | None = None) -> str:
    """Write metadata md and tensors t to path. overrides: full metadata keys to set (None removes one); drop:
    tensor names to leave out; reshape: tensor name -> a replacement array (bad files); vocab: the tokenizer's keys
    (default the minimal byte-level one); qtypes: a tensor-name ending -> its type, over the defaults. Vectors,
    the token embeddings and the tensors ending in keep_f32 stay F32, as llama.cpp's quantize keeps them; the
    rest are written as qtype."""
    for k, v in (overrides or {}).items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    t.update(reshape or {})
    w = GGUFWriter(path)
    for k, v in md.items():
        is_int = isinstance(v, int) and not isinstance(v, bool)
        w.add_metadata(k, v, type="UINT32" if is_int else None)
    for k, v in (vocab or _minimal_vocab(N_VOCAB)).items():
        w.add_metadata(k, v)
    for k, v in t.items():
        if k in drop:
            continue
        keep = v.ndim < 2 or k.endswith(keep_f32) or k == "token_embd.weight"
        chosen = [ty for end, ty in (qtypes or {}).items() if k.endswith(end)]
        w.add_tensor(k, v, qtype=chosen[0] if chosen else "F32" if keep else qtype)
    w.write()
    return str(path)


def write_tiny_lfm2(path, *, seed: int = 11, qtype: str = "F32", overrides: dict | None = None,
                    drop: tuple[str, ...] = (), reshape: dict | None = None, vocab: dict | None = None) -> str:
    """Write the tiny LFM2 to path. overrides: full metadata keys to set (None removes one); drop: tensor names
    to leave out; reshape: tensor name -> a replacement array (bad files); vocab: the tokenizer's keys (default
    the minimal byte-level one)."""
    return _write_gguf(path, lfm2_metadata(), lfm2_tensors(seed), qtype=qtype, keep_f32=("shortconv.conv.weight",),
                       overrides=overrides, drop=drop, reshape=reshape, vocab=vocab)


def lfm2_hf_tensors(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same weights under transformers' Lfm2ForCausalLM names (tied output)."""
    hf = {"model.embed_tokens.weight": t["token_embd.weight"],
          "model.embedding_norm.weight": t["token_embd_norm.weight"]}
    for il, kind in enumerate(LFM2_KINDS):
        p, q = f"blk.{il}.", f"model.layers.{il}."
        hf[q + "operator_norm.weight"] = t[p + "attn_norm.weight"]
        hf[q + "ffn_norm.weight"] = t[p + "ffn_norm.weight"]
        hf[q + "feed_forward.w1.weight"] = t[p + "ffn_gate.weight"]
        hf[q + "feed_forward.w3.weight"] = t[p + "ffn_up.weight"]
        hf[q + "feed_forward.w2.weight"] = t[p + "ffn_down.weight"]
        if kind == "shortconv":
            hf[q + "conv.in_proj.weight"] = t[p + "shortconv.in_proj.weight"]
            hf[q + "conv.conv.weight"] = t[p + "shortconv.conv.weight"][:, None, :]
            hf[q + "conv.out_proj.weight"] = t[p + "shortconv.out_proj.weight"]
        else:
            for a, b in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                         ("out_proj", "attn_output"), ("q_layernorm", "attn_q_norm"),
                         ("k_layernorm", "attn_k_norm")):
                hf[q + f"self_attn.{a}.weight"] = t[p + f"{b}.weight"]
    return hf


def lfm2_hf_config() -> dict:
    return {"vocab_size": N_VOCAB, "hidden_size": N_EMBD, "intermediate_size": N_FF,
            "num_hidden_layers": len(LFM2_KINDS), "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV,
            "max_position_embeddings": 1024, "norm_eps": NORM_EPS, "conv_bias": False, "conv_L_cache": CONV_L,
            "block_auto_adjust_ff_dim": False, "tie_word_embeddings": True,
            "layer_types": ["conv" if k == "shortconv" else "full_attention" for k in LFM2_KINDS],
            "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE}}


# ---- qwen3next: gated DeltaNet layers, gated full attention every 4th layer, MoE with a gated shared expert ----

Q3N = dict(n_layer=4, n_head=4, n_head_kv=2, head_dim=16, rot=4, conv_l=4, n_k_heads=2, n_v_heads=4, d_k=16, d_v=16,
           n_expert=4, n_used=2, n_ff_exp=32, n_ff_shared=64, n_ff=96, rope_base=10000.0, eps=1e-6)
Q3N_KINDS = ("deltanet", "deltanet", "deltanet", "attention")   # full_attention_interval 4


def qwen3next_hf_tensors(seed: int = 13) -> dict[str, np.ndarray]:
    """The tiny Qwen3-Next's weights under transformers' Qwen3NextForCausalLM names (numpy, float32)."""
    c = Q3N
    rng = np.random.default_rng(seed)

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):   # Qwen3-Next's RMSNorm multiplies by (1 + w)
        return (0.2 * rng.standard_normal(n)).astype(np.float32)

    E, nk, nv, dk, dv = N_EMBD, c["n_k_heads"], c["n_v_heads"], c["d_k"], c["d_v"]
    conv_dim = 2 * nk * dk + nv * dv
    t = {"model.embed_tokens.weight": rng.standard_normal((N_VOCAB, E)).astype(np.float32),
         "model.norm.weight": norm(E), "lm_head.weight": mat(N_VOCAB, E)}
    for il, kind in enumerate(Q3N_KINDS):
        q = f"model.layers.{il}."
        t[q + "input_layernorm.weight"] = norm(E)
        t[q + "post_attention_layernorm.weight"] = norm(E)
        if kind == "deltanet":
            a = q + "linear_attn."
            t[a + "in_proj_qkvz.weight"] = mat(2 * nk * dk + 2 * nv * dv, E)
            t[a + "in_proj_ba.weight"] = mat(2 * nv, E)
            t[a + "conv1d.weight"] = (0.5 * rng.standard_normal((conv_dim, 1, c["conv_l"]))).astype(np.float32)
            # decays exp(-A softplus(a + dt_bias)) of A in [0.05, 1]: the state remembers tens of tokens
            t[a + "A_log"] = np.log(rng.uniform(0.05, 1.0, nv)).astype(np.float32)
            t[a + "dt_bias"] = (0.5 * rng.standard_normal(nv)).astype(np.float32)
            t[a + "norm.weight"] = (1.0 + 0.2 * rng.standard_normal(dv)).astype(np.float32)
            t[a + "out_proj.weight"] = mat(E, nv * dv)
        else:
            a = q + "self_attn."
            qd, kvd = c["n_head"] * c["head_dim"], c["n_head_kv"] * c["head_dim"]
            t[a + "q_proj.weight"] = mat(2 * qd, E)
            t[a + "k_proj.weight"] = mat(kvd, E)
            t[a + "v_proj.weight"] = mat(kvd, E)
            t[a + "o_proj.weight"] = mat(E, qd)
            t[a + "q_norm.weight"] = norm(c["head_dim"])
            t[a + "k_norm.weight"] = norm(c["head_dim"])
        m = q + "mlp."
        t[m + "gate.weight"] = 3.0 * mat(c["n_expert"], E)   # clear-cut router choices
        t[m + "experts.gate_up_proj"] = mat(c["n_expert"], 2 * c["n_ff_exp"], E)
        t[m + "experts.down_proj"] = mat(c["n_expert"], E, c["n_ff_exp"])
        t[m + "shared_expert.gate_proj.weight"] = mat(c["n_ff_shared"], E)
        t[m + "shared_expert.up_proj.weight"] = mat(c["n_ff_shared"], E)
        t[m + "shared_expert.down_proj.weight"] = mat(E, c["n_ff_shared"])
        t[m + "shared_expert_gate.weight"] = mat(1, E)
    return t


def qwen3next_gguf_tensors(hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """transformers' weights as llama.cpp's convert_hf_to_gguf.py writes them for qwen3next: norms + 1 (not the
    DeltaNet's gated norm), A_log -> -exp(A_log), in_proj_qkvz split into attn_qkv ([q | k | v], each over all key
    heads) and attn_gate (z), the conv squeezed, the experts split and stacked."""
    c = Q3N
    nk, nv, dk, dv = c["n_k_heads"], c["n_v_heads"], c["d_k"], c["d_v"]
    r, ff = nv // nk, c["n_ff_exp"]
    t = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"] + 1,
         "output.weight": hf["lm_head.weight"]}
    for il, kind in enumerate(Q3N_KINDS):
        p, q = f"blk.{il}.", f"model.layers.{il}."
        t[p + "attn_norm.weight"] = hf[q + "input_layernorm.weight"] + 1
        t[p + "post_attention_norm.weight"] = hf[q + "post_attention_layernorm.weight"] + 1
        if kind == "deltanet":
            a = q + "linear_attn."
            w = hf[a + "in_proj_qkvz.weight"].reshape(nk, 2 * dk + 2 * r * dv, -1)
            parts = np.split(w, [dk, 2 * dk, 2 * dk + r * dv], axis=1)
            qkv = [x.reshape(-1, w.shape[-1]) for x in parts[:3]]
            t[p + "attn_qkv.weight"] = np.ascontiguousarray(np.concatenate(qkv))
            t[p + "attn_gate.weight"] = np.ascontiguousarray(parts[3].reshape(-1, w.shape[-1]))
            t[p + "ssm_ba.weight"] = hf[a + "in_proj_ba.weight"]
            t[p + "ssm_conv1d.weight"] = np.ascontiguousarray(hf[a + "conv1d.weight"][:, 0, :])
            t[p + "ssm_a"] = -np.exp(hf[a + "A_log"])
            t[p + "ssm_dt.bias"] = hf[a + "dt_bias"]
            t[p + "ssm_norm.weight"] = hf[a + "norm.weight"]
            t[p + "ssm_out.weight"] = hf[a + "out_proj.weight"]
        else:
            a = q + "self_attn."
            t[p + "attn_q.weight"] = hf[a + "q_proj.weight"]
            t[p + "attn_k.weight"] = hf[a + "k_proj.weight"]
            t[p + "attn_v.weight"] = hf[a + "v_proj.weight"]
            t[p + "attn_output.weight"] = hf[a + "o_proj.weight"]
            t[p + "attn_q_norm.weight"] = hf[a + "q_norm.weight"] + 1
            t[p + "attn_k_norm.weight"] = hf[a + "k_norm.weight"] + 1
        m = q + "mlp."
        gu = hf[m + "experts.gate_up_proj"]
        t[p + "ffn_gate_inp.weight"] = hf[m + "gate.weight"]
        t[p + "ffn_gate_exps.weight"] = np.ascontiguousarray(gu[:, :ff])
        t[p + "ffn_up_exps.weight"] = np.ascontiguousarray(gu[:, ff:])
        t[p + "ffn_down_exps.weight"] = hf[m + "experts.down_proj"]
        t[p + "ffn_gate_shexp.weight"] = hf[m + "shared_expert.gate_proj.weight"]
        t[p + "ffn_up_shexp.weight"] = hf[m + "shared_expert.up_proj.weight"]
        t[p + "ffn_down_shexp.weight"] = hf[m + "shared_expert.down_proj.weight"]
        t[p + "ffn_gate_inp_shexp.weight"] = hf[m + "shared_expert_gate.weight"].reshape(-1)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in t.items()}


def qwen3next_metadata() -> dict:
    c, a = Q3N, "qwen3next"
    return {"general.architecture": a, "general.name": "tiny-qwen3next", "general.alignment": 32,
            f"{a}.context_length": 1024, f"{a}.embedding_length": N_EMBD, f"{a}.block_count": c["n_layer"],
            f"{a}.feed_forward_length": c["n_ff"], f"{a}.attention.head_count": c["n_head"],
            f"{a}.attention.head_count_kv": c["n_head_kv"], f"{a}.attention.key_length": c["head_dim"],
            f"{a}.attention.value_length": c["head_dim"], f"{a}.rope.freq_base": c["rope_base"],
            f"{a}.rope.dimension_count": c["rot"], f"{a}.attention.layer_norm_rms_epsilon": c["eps"],
            f"{a}.expert_count": c["n_expert"], f"{a}.expert_used_count": c["n_used"],
            f"{a}.expert_feed_forward_length": c["n_ff_exp"],
            f"{a}.expert_shared_feed_forward_length": c["n_ff_shared"],
            f"{a}.ssm.conv_kernel": c["conv_l"], f"{a}.ssm.state_size": c["d_k"],
            f"{a}.ssm.group_count": c["n_k_heads"], f"{a}.ssm.time_step_rank": c["n_v_heads"],
            f"{a}.ssm.inner_size": c["n_v_heads"] * c["d_v"], f"{a}.full_attention_interval": 4,
            f"{a}.attention.recurrent_layers": [k == "deltanet" for k in Q3N_KINDS]}


def write_tiny_qwen3next(path, *, seed: int = 13, qtype: str = "F32", overrides: dict | None = None,
                         drop: tuple[str, ...] = (), reshape: dict | None = None) -> str:
    """Write the tiny Qwen3-Next to path (overrides / drop / reshape as write_tiny_lfm2)."""
    # the conv, the router and the shared expert's gate stay F32
    return _write_gguf(path, qwen3next_metadata(), qwen3next_gguf_tensors(qwen3next_hf_tensors(seed)), qtype=qtype,
                       keep_f32=("ssm_conv1d.weight", "ffn_gate_inp.weight", "ssm_ba.weight"),
                       overrides=overrides, drop=drop, reshape=reshape)


def qwen3next_hf_config() -> dict:
    c = Q3N
    return {"vocab_size": N_VOCAB, "hidden_size": N_EMBD, "intermediate_size": c["n_ff"],
            "num_hidden_layers": c["n_layer"], "num_attention_heads": c["n_head"],
            "num_key_value_heads": c["n_head_kv"], "head_dim": c["head_dim"], "rms_norm_eps": c["eps"],
            "max_position_embeddings": 1024, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": c["rope_base"],
                                "partial_rotary_factor": c["rot"] / c["head_dim"]},
            "linear_conv_kernel_dim": c["conv_l"], "linear_key_head_dim": c["d_k"], "linear_value_head_dim": c["d_v"],
            "linear_num_key_heads": c["n_k_heads"], "linear_num_value_heads": c["n_v_heads"],
            "num_experts": c["n_expert"], "num_experts_per_tok": c["n_used"], "moe_intermediate_size": c["n_ff_exp"],
            "shared_expert_intermediate_size": c["n_ff_shared"], "decoder_sparse_step": 1, "norm_topk_prob": True,
            "mlp_only_layers": [],
            "layer_types": ["linear_attention" if k == "deltanet" else "full_attention" for k in Q3N_KINDS]}


# ---- lfm2moe (LFM2-8B-A1B): LFM2's blocks, the first dense, the rest a sigmoid-routed mixture with an expert bias ----

L2M = dict(n_dense=1, n_expert=8, n_used=2, n_ff_exp=32)


def lfm2moe_tensors(seed: int = 17) -> dict[str, np.ndarray]:
    """The tiny LFM2-MoE's weights by GGUF name: lfm2_tensors' blocks, the FFN of every block after the first
    n_dense a mixture (router, stacked experts, exp_probs_b: the expert bias that shifts the choice only)."""
    c = L2M
    t = lfm2_tensors(seed)
    rng = np.random.default_rng(seed + 1)
    E, ne, ff = N_EMBD, c["n_expert"], c["n_ff_exp"]
    for il in range(c["n_dense"], len(LFM2_KINDS)):
        p = f"blk.{il}."
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            del t[p + name + ".weight"]
        t[p + "ffn_gate_inp.weight"] = (3.0 * rng.standard_normal((ne, E)) / np.sqrt(E)).astype(np.float32)
        t[p + "ffn_gate_exps.weight"] = (rng.standard_normal((ne, ff, E)) / np.sqrt(E)).astype(np.float32)
        t[p + "ffn_up_exps.weight"] = (rng.standard_normal((ne, ff, E)) / np.sqrt(E)).astype(np.float32)
        t[p + "ffn_down_exps.weight"] = (rng.standard_normal((ne, E, ff)) / np.sqrt(ff)).astype(np.float32)
        # a bias of the sigmoid's scale: it overturns some choices, so a router that ignored it (or weighted by
        # it) would be visibly wrong
        t[p + "exp_probs_b.bias"] = (0.3 * rng.standard_normal(ne)).astype(np.float32)
    return t


def lfm2moe_metadata() -> dict:
    a, c = "lfm2moe", L2M
    md = {k.replace("lfm2.", "lfm2moe."): v for k, v in lfm2_metadata().items()}
    md.update({"general.architecture": a, "general.name": "tiny-lfm2moe", f"{a}.expert_count": c["n_expert"],
               f"{a}.expert_used_count": c["n_used"], f"{a}.expert_feed_forward_length": c["n_ff_exp"],
               f"{a}.leading_dense_block_count": c["n_dense"], f"{a}.expert_gating_func": 2})   # 2: sigmoid
    return md


def write_tiny_lfm2moe(path, *, seed: int = 17, qtype: str = "F32", overrides: dict | None = None,
                       drop: tuple[str, ...] = (), reshape: dict | None = None) -> str:
    """Write the tiny LFM2-MoE to path (overrides / drop / reshape as write_tiny_lfm2)."""
    return _write_gguf(path, lfm2moe_metadata(), lfm2moe_tensors(seed), qtype=qtype,
                       keep_f32=("shortconv.conv.weight", "ffn_gate_inp.weight"),
                       overrides=overrides, drop=drop, reshape=reshape)


def lfm2moe_hf_tensors(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same weights under transformers' Lfm2MoeForCausalLM names (tied output)."""
    dense = {k: v for k, v in t.items() if "_exps" not in k and "ffn_gate_inp" not in k and "exp_probs_b" not in k}
    hf = lfm2_hf_tensors({**lfm2_tensors(), **dense})   # the shared names; the MoE blocks' dense FFN dropped below
    for il in range(L2M["n_dense"], len(LFM2_KINDS)):
        p, q = f"blk.{il}.", f"model.layers.{il}.feed_forward."
        for w in ("w1", "w2", "w3"):
            del hf[q + w + ".weight"]
        hf[q + "gate.weight"] = t[p + "ffn_gate_inp.weight"]
        hf[q + "experts.gate_up_proj"] = np.concatenate([t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"]],
                                                        axis=1)
        hf[q + "experts.down_proj"] = t[p + "ffn_down_exps.weight"]
        hf[q + "expert_bias"] = t[p + "exp_probs_b.bias"]
    return hf


def lfm2moe_hf_config() -> dict:
    c = L2M
    cfg = lfm2_hf_config()
    for k in ("block_auto_adjust_ff_dim",):
        cfg.pop(k)
    cfg.update({"moe_intermediate_size": c["n_ff_exp"], "num_dense_layers": c["n_dense"],
                "num_experts": c["n_expert"], "num_experts_per_tok": c["n_used"], "use_expert_bias": True,
                "norm_topk_prob": True, "routed_scaling_factor": 1.0})
    return cfg


# ---- qwen35 / qwen35moe (Qwen3.5): Qwen3-Next's blocks, in_proj_qkv / z / b / a, value heads tiled in the GGUF ----

# the multi-section RoPE's sections: n_rot / 2 pairs (Qwen3.5's own: [11, 11, 10] of 32); text gives every section
# the same position
Q35_MROPE = [1, 1, 0]


def qwen35_hf_tensors(moe: bool, seed: int = 19) -> dict[str, np.ndarray]:
    """The tiny Qwen3.5's weights under transformers' Qwen3_5ForCausalLM (moe: Qwen3_5MoeForCausalLM) names:
    Qwen3-Next's, its DeltaNet input split into in_proj_qkv ([q | k | v], grouped by key head as transformers reads it),
    in_proj_z, in_proj_b and in_proj_a; a dense FFN unless moe."""
    c = Q3N
    t = qwen3next_hf_tensors(seed)
    rng = np.random.default_rng(seed + 1)
    E, nk, nv, dk, dv = N_EMBD, c["n_k_heads"], c["n_v_heads"], c["d_k"], c["d_v"]
    for il, kind in enumerate(Q3N_KINDS):
        q = f"model.layers.{il}."
        if kind == "deltanet":
            a = q + "linear_attn."
            del t[a + "in_proj_qkvz.weight"], t[a + "in_proj_ba.weight"]
            t[a + "in_proj_qkv.weight"] = (rng.standard_normal((2 * nk * dk + nv * dv, E))
                                           / np.sqrt(E)).astype(np.float32)
            t[a + "in_proj_z.weight"] = (rng.standard_normal((nv * dv, E)) / np.sqrt(E)).astype(np.float32)
            t[a + "in_proj_b.weight"] = (rng.standard_normal((nv, E)) / np.sqrt(E)).astype(np.float32)
            t[a + "in_proj_a.weight"] = (rng.standard_normal((nv, E)) / np.sqrt(E)).astype(np.float32)
        if not moe:
            m = q + "mlp."
            for k in [k for k in t if k.startswith(m)]:
                del t[k]
            t[m + "gate_proj.weight"] = (rng.standard_normal((c["n_ff"], E)) / np.sqrt(E)).astype(np.float32)
            t[m + "up_proj.weight"] = (rng.standard_normal((c["n_ff"], E)) / np.sqrt(E)).astype(np.float32)
            t[m + "down_proj.weight"] = (rng.standard_normal((E, c["n_ff"])) / np.sqrt(c["n_ff"])).astype(np.float32)
    return t


def _tile_v_heads(x: np.ndarray, axis: int, head_dim: int) -> np.ndarray:
    """convert_hf_to_gguf.py's _reorder_v_heads: value heads from grouped by key head [G0v0, G0v1, G1v0, ...] to
    tiled [G0v0, G1v0, G0v1, ...] along axis."""
    nk, nv = Q3N["n_k_heads"], Q3N["n_v_heads"]
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(nk, nv // nk, head_dim, *rest).swapaxes(0, 1).reshape(nv * head_dim, *rest)
    return np.ascontiguousarray(np.moveaxis(x, 0, axis))


def qwen35_gguf_tensors(hf: dict[str, np.ndarray], moe: bool) -> dict[str, np.ndarray]:
    """transformers' weights as llama.cpp's convert_hf_to_gguf.py writes them for qwen35 / qwen35moe: Qwen3-Next's
    conversion (norms + 1 but the DeltaNet's, A -> -exp(A_log), the conv squeezed, the experts split and stacked),
    in_proj_qkv / z / b / a as attn_qkv / attn_gate / ssm_beta / ssm_alpha, and every value-head axis tiled."""
    c = Q3N
    nk, dk, dv = c["n_k_heads"], c["d_k"], c["d_v"]
    base = {k: v for k, v in hf.items() if "linear_attn.in_proj" not in k}
    for il, kind in enumerate(Q3N_KINDS):   # placeholders so qwen3next_gguf_tensors maps the rest
        if kind == "deltanet":
            a = f"model.layers.{il}.linear_attn."
            base[a + "in_proj_qkvz.weight"] = np.zeros((2 * nk * dk + 2 * c["n_v_heads"] * dv, N_EMBD), np.float32)
            base[a + "in_proj_ba.weight"] = np.zeros((2 * c["n_v_heads"], N_EMBD), np.float32)
        if not moe:
            m = f"model.layers.{il}.mlp."
            base.update({m + "gate.weight": np.zeros((1, N_EMBD), np.float32),
                         m + "experts.gate_up_proj": np.zeros((1, 2 * c["n_ff_exp"], N_EMBD), np.float32),
                         m + "experts.down_proj": np.zeros((1, N_EMBD, c["n_ff_exp"]), np.float32),
                         m + "shared_expert.gate_proj.weight": np.zeros((1, N_EMBD), np.float32),
                         m + "shared_expert.up_proj.weight": np.zeros((1, N_EMBD), np.float32),
                         m + "shared_expert.down_proj.weight": np.zeros((N_EMBD, 1), np.float32),
                         m + "shared_expert_gate.weight": np.zeros((1, N_EMBD), np.float32)})
    t = qwen3next_gguf_tensors(base)
    for il, kind in enumerate(Q3N_KINDS):
        p, q = f"blk.{il}.", f"model.layers.{il}."
        if kind == "deltanet":
            a = q + "linear_attn."
            qkv = hf[a + "in_proj_qkv.weight"]
            t[p + "attn_qkv.weight"] = np.concatenate([qkv[:2 * nk * dk], _tile_v_heads(qkv[2 * nk * dk:], 0, dv)])
            t[p + "attn_gate.weight"] = _tile_v_heads(hf[a + "in_proj_z.weight"], 0, dv)
            del t[p + "ssm_ba.weight"]
            t[p + "ssm_beta.weight"] = _tile_v_heads(hf[a + "in_proj_b.weight"], 0, 1)
            t[p + "ssm_alpha.weight"] = _tile_v_heads(hf[a + "in_proj_a.weight"], 0, 1)
            t[p + "ssm_a"] = _tile_v_heads(t[p + "ssm_a"], 0, 1)
            t[p + "ssm_dt.bias"] = _tile_v_heads(t[p + "ssm_dt.bias"], 0, 1)
            conv = t[p + "ssm_conv1d.weight"]
            t[p + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * nk * dk], _tile_v_heads(conv[2 * nk * dk:], 0, dv)])
            t[p + "ssm_out.weight"] = _tile_v_heads(t[p + "ssm_out.weight"], 1, dv)
        if not moe:
            for k in [k for k in t if k.startswith(p) and ("_exps" in k or "shexp" in k or "gate_inp" in k)]:
                del t[k]
            m = q + "mlp."
            t[p + "ffn_gate.weight"] = hf[m + "gate_proj.weight"]
            t[p + "ffn_up.weight"] = hf[m + "up_proj.weight"]
            t[p + "ffn_down.weight"] = hf[m + "down_proj.weight"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in t.items()}


def qwen35_metadata(moe: bool) -> dict:
    a = "qwen35moe" if moe else "qwen35"
    md = {k.replace("qwen3next.", f"{a}."): v for k, v in qwen3next_metadata().items()}
    md.update({"general.architecture": a, "general.name": f"tiny-{a}",
               f"{a}.rope.dimension_sections": np.array(Q35_MROPE + [0], np.int32)})
    if not moe:
        for k in ("expert_count", "expert_used_count", "expert_feed_forward_length",
                  "expert_shared_feed_forward_length"):
            del md[f"{a}.{k}"]
    return md


def write_tiny_qwen35(path, *, moe: bool = False, seed: int = 19, qtype: str = "F32", overrides: dict | None = None,
                      drop: tuple[str, ...] = (), reshape: dict | None = None, qtypes: dict | None = None) -> str:
    """Write the tiny Qwen3.5 (moe: Qwen3.5-MoE) to path (overrides / drop / reshape as write_tiny_lfm2; qtypes: a
    tensor-name ending -> its type, over the defaults)."""
    return _write_gguf(path, qwen35_metadata(moe), qwen35_gguf_tensors(qwen35_hf_tensors(moe, seed), moe),
                       qtype=qtype, keep_f32=("ssm_conv1d.weight", "ffn_gate_inp.weight", "ssm_beta.weight",
                                              "ssm_alpha.weight"),
                       overrides=overrides, drop=drop, reshape=reshape, qtypes=qtypes)


def write_tiny_qwen35moe(path, **kw) -> str:
    return write_tiny_qwen35(path, moe=True, **kw)


def qwen35_hf_config(moe: bool) -> dict:
    cfg = qwen3next_hf_config()
    cfg["rope_parameters"] = {**cfg["rope_parameters"], "mrope_section": Q35_MROPE, "mrope_interleaved": True}
    if not moe:
        for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                  "decoder_sparse_step", "norm_topk_prob", "mlp_only_layers"):
            cfg.pop(k)
    return cfg
