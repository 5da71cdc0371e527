"""Tiny random hybrid (recurrent + attention) GGUF files in llama.cpp's layout, written at test time (no torch).

lfm2: LFM2's gated short-convolution layers and GQA attention layers (per-head Q/K RMS norms, NeoX RoPE), the
layer kinds given by `lfm2.attention.head_count_kv` (0 = conv), the final norm as token_embd_norm.
The same weights, mapped to Hugging Face names (`lfm2_hf_tensors`), make make_hybrid_goldens.py's transformers
model, whose logits are committed in data/hybrid_goldens.npz.
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


def write_tiny_lfm2(path, *, seed: int = 11, qtype: str = "F32", overrides: dict | None = None,
                    drop: tuple[str, ...] = (), reshape: dict | None = None, vocab: dict | None = None) -> str:
    """Write the tiny LFM2 to path. overrides: full metadata keys to set (None removes one); drop: tensor names
    to leave out; reshape: tensor name -> a replacement array (bad files); vocab: the tokenizer's keys (default
    the minimal byte-level one)."""
    md = lfm2_metadata()
    for k, v in (overrides or {}).items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    t = lfm2_tensors(seed)
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
        # norms and the conv taps stay F32, as llama.cpp's quantize keeps them
        keep = v.ndim < 2 or k.endswith("shortconv.conv.weight") or k == "token_embd.weight"
        w.add_tensor(k, v, qtype="F32" if keep else qtype)
    w.write()
    return str(path)


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
