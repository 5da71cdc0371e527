"""Hugging Face (transformers) checkpoint -> GGUF, following llama.cpp's convert_hf_to_gguf.py conventions.

What the conversion does, per family (the GGUF side is what oxillama/models/ and llama.cpp read):
  - tensor names: `model.layers.N.self_attn.q_proj.weight` -> `blk.N.attn_q.weight` etc. (TENSOR_MAP);
  - llama / mistral: Q and K rows permuted so RoPE rotates adjacent pairs (HF rotates halves);
  - gemma, gemma2, gemma3: RMSNorm weights stored as 1 + w (HF's GemmaRMSNorm multiplies by 1 + w);
  - phi3: the fused qkv_proj / gate_up_proj are kept fused (attn_qkv, ffn_up = [gate; up]);
  - the families with their own tensor names (gpt2, bloom, gpt_neox, falcon, internlm2, EXAONE's original
    checkpoints) are first renamed to the llama-style names (_RENAMES), then as above; their fused QKV rows are
    reordered to [Q; K; V] (bloom / gpt_neox: per head [q k v]; falcon / internlm2: per KV group [q.. k v]),
    GPT-2's Conv1D weights transposed, internlm2's wqkv split into Q, K, V, StableLM's per-head q/k LayerNorms
    stacked into one (n_head, head_dim) tensor;
  - granite, smollm3, internlm2: Q/K permuted as llama (llama.cpp's NORM RoPE for them);
  - mixtures of experts (qwen3_moe, qwen2_moe, olmoe, mixtral): the router `mlp.gate` -> `ffn_gate_inp`, the
    experts stacked as (n_expert, rows, cols) `ffn_{gate,up,down}_exps` (from transformers 5's fused
    `experts.gate_up_proj` [gate; up] / `experts.down_proj`, or the hub's one matrix per expert), qwen2moe's
    shared expert `ffn_*_shexp` and its gate `ffn_gate_inp_shexp`; `expert_count`, `expert_used_count`,
    `expert_feed_forward_length`, and `expert_weights_norm` from norm_topk_prob;
  - gpt_oss: `self_attn.sinks` -> `attn_sinks`, the router `mlp.router` with its bias, the experts transposed
    back to (n_expert, rows, cols) with gate/up de-interleaved and their biases; the released MXFP4 experts
    (`*_blocks` / `*_scales`) kept in MXFP4, repacked to ggml's nibble order; phimoe: LayerNorm and logit biases;
  - tied embeddings: no `output.weight`, the engine reuses `token_embd.weight`;
  - metadata: `<arch>.context_length`, `.embedding_length`, `.block_count`, `.feed_forward_length`,
    `.attention.head_count[_kv]`, `.attention.key_length`, `.rope.freq_base`, `.rope.dimension_count`,
    norm epsilon, sliding window, soft-capping, logit scale, RoPE scaling (linear, yarn);
  - a small byte-level gpt2 tokenizer sized to the vocabulary, unless the caller passes one, so the
    file is well-formed (real conversions of real tokenizers are out of scope here).

torch is imported only to turn tensors into numpy arrays and to read checkpoints from disk; numpy
state dicts convert without it.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping

import numpy as np

from oxillama.errors import InvalidArgumentError, ModelError, UnsupportedArchitectureError
from oxillama.gguf import GGUFWriter

log = logging.getLogger("oxillama.convert")

# HF config.model_type -> GGUF general.architecture (llama.cpp converts Mistral as llama)
MODEL_TYPES: dict[str, str] = {
    "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma": "gemma",
    "gemma2": "gemma2", "gemma3": "gemma3", "gemma3_text": "gemma3", "phi3": "phi3",
    "starcoder2": "starcoder2", "cohere": "command-r",
    "stablelm": "stablelm", "gpt_neox": "gptneox", "bloom": "bloom", "falcon": "falcon", "gpt2": "gpt2",
    "olmo2": "olmo2", "granite": "granite", "smollm3": "smollm3", "exaone": "exaone", "internlm2": "internlm2",
    "RefinedWebModel": "falcon", "RefinedWeb": "falcon",   # Falcon-7B / -40B checkpoints before transformers' own
    "qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "olmoe": "olmoe", "mixtral": "llama", "gpt_oss": "gpt-oss",
    "phimoe": "phimoe",
}
# families whose RoPE llama.cpp runs on adjacent pairs: Q and K rows permuted from HF's rotate-half order
_PERMUTE_QK = ("llama", "granite", "smollm3", "internlm2")
# families with LayerNorm (llama.cpp's `attention.layer_norm_epsilon`); the rest use RMSNorm
_LAYER_NORM = ("starcoder2", "command-r", "stablelm", "gptneox", "bloom", "falcon", "gpt2")

# HF names of the families that do not use the llama-style `model.layers.N.self_attn...` names, renamed to those
# (regex, replacement) in order; replacement None drops the tensor (buffers some checkpoints keep)
_RENAMES: dict[str, list[tuple[str, str | None]]] = {
    "gpt2": [(r"\.attn\.(masked_)?bias$", None), (r"^transformer\.wte\.", "model.embed_tokens."),
             (r"^transformer\.wpe\.", "model.embed_positions."), (r"^transformer\.ln_f\.", "model.norm."),
             (r"^transformer\.h\.", "model.layers."), (r"\.ln_1\.", ".input_layernorm."),
             (r"\.attn\.c_attn\.", ".self_attn.qkv_proj."), (r"\.attn\.c_proj\.", ".self_attn.o_proj."),
             (r"\.ln_2\.", ".post_attention_layernorm.")],   # mlp.c_fc / mlp.c_proj as starcoder2's
    "bloom": [(r"^transformer\.word_embeddings_layernorm\.", "model.embed_norm."),
              (r"^transformer\.word_embeddings\.", "model.embed_tokens."), (r"^transformer\.ln_f\.", "model.norm."),
              (r"^transformer\.h\.", "model.layers."), (r"\.self_attention\.query_key_value\.", ".self_attn.qkv_proj."),
              (r"\.self_attention\.dense\.", ".self_attn.o_proj."), (r"\.mlp\.dense_h_to_4h\.", ".mlp.up_proj."),
              (r"\.mlp\.dense_4h_to_h\.", ".mlp.down_proj.")],
    "gpt_neox": [(r"\.attention\.(masked_bias|bias|rotary_emb\.inv_freq)$", None),
                 (r"^gpt_neox\.embed_in\.", "model.embed_tokens."), (r"^gpt_neox\.final_layer_norm\.", "model.norm."),
                 (r"^embed_out\.", "lm_head."), (r"^gpt_neox\.layers\.", "model.layers."),
                 (r"\.attention\.query_key_value\.", ".self_attn.qkv_proj."), (r"\.attention\.dense\.", ".self_attn.o_proj."),
                 (r"\.mlp\.dense_h_to_4h\.", ".mlp.up_proj."), (r"\.mlp\.dense_4h_to_h\.", ".mlp.down_proj.")],
    "falcon": [(r"^transformer\.word_embeddings\.", "model.embed_tokens."), (r"^transformer\.ln_f\.", "model.norm."),
               (r"^transformer\.h\.", "model.layers."), (r"\.self_attention\.query_key_value\.", ".self_attn.qkv_proj."),
               (r"\.self_attention\.dense\.", ".self_attn.o_proj."), (r"\.mlp\.dense_h_to_4h\.", ".mlp.up_proj."),
               (r"\.mlp\.dense_4h_to_h\.", ".mlp.down_proj."),
               # Falcon-40B: attention reads ln_attn (llama.cpp's attn_norm_2), the MLP ln_mlp (attn_norm)
               (r"\.ln_attn\.", ".input_layernorm_2."), (r"\.ln_mlp\.", ".input_layernorm.")],
    "internlm2": [(r"^model\.tok_embeddings\.", "model.embed_tokens."), (r"^output\.", "lm_head."),
                  (r"\.attention_norm\.", ".input_layernorm."), (r"\.attention\.wqkv\.", ".self_attn.wqkv."),
                  (r"\.attention\.wo\.", ".self_attn.o_proj."), (r"\.ffn_norm\.", ".post_attention_layernorm."),
                  (r"\.feed_forward\.w1\.", ".mlp.gate_proj."), (r"\.feed_forward\.w3\.", ".mlp.up_proj."),
                  (r"\.feed_forward\.w2\.", ".mlp.down_proj.")],
    # EXAONE 3.x checkpoints on the Hub (transformers loads them into its llama model with these renames)
    "exaone": [(r"^transformer\.wte\.", "model.embed_tokens."), (r"^transformer\.h\.", "model.layers."),
               (r"^transformer\.ln_f\.", "model.norm."), (r"\.attn\.attention\.", ".self_attn."),
               (r"\.self_attn\.out_proj\.", ".self_attn.o_proj."), (r"\.ln_1\.", ".input_layernorm."),
               (r"\.ln_2\.", ".post_attention_layernorm."), (r"\.mlp\.c_fc_0\.", ".mlp.gate_proj."),
               (r"\.mlp\.c_fc_1\.", ".mlp.up_proj."), (r"\.mlp\.c_proj\.", ".mlp.down_proj.")],
}
_RENAMES_RE = {mt: [(re.compile(a), b) for a, b in rules] for mt, rules in _RENAMES.items()}
# the mixture-of-experts families, and whether the family's router renormalises its top-k weights when the
# config does not say (Mixtral always does and has no norm_topk_prob)
_MOE_NORM_TOPK_DEFAULT = {"qwen3_moe": False, "qwen2_moe": False, "olmoe": False, "mixtral": True,
                          "gpt_oss": None, "phimoe": None}   # None: the family's router is fixed (top-k logits, then softmax)
GPT_OSS_SWIGLU = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}   # the values llama.cpp's swiglu_oai hard-codes

OUT_TYPES = {"f32": ("F32", 0), "f16": ("F16", 1), "bf16": ("BF16", 32), "q8_0": ("Q8_0", 7)}   # name -> (tensor type, general.file_type)

# HF per-layer suffix -> GGUF per-layer name; `None` drops the tensor (buffers HF keeps in the state dict)
_LAYER_MAP = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.gate_up_proj": "ffn_up",            # phi3: [gate; up] in one matrix
    "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down",   # starcoder2
    "self_attn.rotary_emb.inv_freq": None,
    "input_layernorm_2": "attn_norm_2",      # falcon-40b: attention's own norm
    "self_attn.wqkv": "attn_qkv",            # internlm2: split into attn_q / attn_k / attn_v
    # mixture of experts: the router, the shared expert and its gate (qwen2moe); Mixtral's hub names
    "mlp.gate": "ffn_gate_inp", "block_sparse_moe.gate": "ffn_gate_inp", "mlp.router": "ffn_gate_inp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}
# gemma2/gemma3 name the norm after attention differently: it is applied to the attention output
_GEMMA2_LAYER_MAP = {**_LAYER_MAP, "post_attention_layernorm": "post_attention_norm"}
_POST_NORM_ARCHS = ("gemma2", "gemma3", "olmo2")
# gpt-oss: the same name for the FFN's input norm (llama.cpp's attn_post_norm), and the attention sinks
_GPT_OSS_LAYER_MAP = {**_GEMMA2_LAYER_MAP, "self_attn.sinks": "attn_sinks"}
_GLOBAL_MAP = {
    "model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
    "model.embed_positions": "position_embd", "model.embed_norm": "token_embd_norm",
    "model.rotary_emb.inv_freq": None, "model.rotary_emb_local.inv_freq": None,
}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_QK_HEAD_NORM_RE = re.compile(r"^model\.layers\.(\d+)\.self_attn\.([qk])_layernorm\.norms\.(\d+)\.weight$")
# experts as transformers 5 holds them: one (n_expert, 2 n_ff_exp, n_embd) [gate; up] and one (n_expert, n_embd,
# n_ff_exp) down tensor per layer
_FUSED_EXPERTS_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias)?$")
_SINKS_RE = re.compile(r"^model\.layers\.(\d+)\.self_attn\.sinks$")
# gpt-oss as released: experts in MXFP4, (n_expert, rows, cols / 32, 16) nibbles and (n_expert, rows, cols / 32)
# E8M0 scales, rows = outputs (gate and up interleaved in gate_up's)
_MXFP4_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)_(blocks|scales)$")


class RawTensor:
    """Already-quantized bytes for a GGUF tensor (gpt-oss's MXFP4 experts): uint8 data, numpy-order shape."""

    def __init__(self, data: np.ndarray, shape: tuple[int, ...], qtype: str):
        self.data, self.shape, self.qtype, self.ndim = data, shape, qtype, len(shape)


def mxfp4_from_hf(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """ggml's MXFP4 blocks (an E8M0 scale byte, then 16 bytes: value j in the low nibble of byte j, value j + 16
    in its high nibble) from the checkpoint's (value 2i in the low nibble of byte i, 2i + 1 in its high one).
    blocks (..., n_blocks, 16) uint8, scales (..., n_blocks) uint8 -> (..., n_blocks * 17) uint8."""
    if blocks.dtype != np.uint8 or scales.dtype != np.uint8 or blocks.shape[-1] != 16 or \
            blocks.shape[:-1] != scales.shape:
        raise ModelError(f"MXFP4 blocks {blocks.shape} {blocks.dtype} and scales {scales.shape} {scales.dtype} "
                         f"do not pair up as (..., n_blocks, 16) and (..., n_blocks) uint8")
    values = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = values[..., :16] | (values[..., 16:] << 4)
    out = np.concatenate([scales[..., None], qs.astype(np.uint8)], axis=-1)
    return np.ascontiguousarray(out.reshape(*blocks.shape[:-2], -1))
# experts as checkpoints on the hub hold them: one matrix per expert (qwen/olmoe names, Mixtral's w1/w3/w2)
_EXPERT_RE = re.compile(r"^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
                        r"(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$")
_EXPERT_KIND = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up", "down_proj": "down", "w2": "down"}


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t.astype(np.float32, copy=False)
    if hasattr(t, "detach"):   # a torch tensor: float32 on the CPU first (bf16 has no numpy dtype)
        return t.detach().to("cpu").float().numpy()
    raise InvalidArgumentError(f"state dict values must be numpy arrays or torch tensors, got {type(t).__name__}")


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder Q/K rows so adjacent-pair RoPE on the result equals HF's rotate-half RoPE on the original.

    Within each head the rows [0..d/2) and [d/2..d) are interleaved: row 2i <- i, row 2i+1 <- i + d/2.
    Shape (n_head * head_dim, ...) in and out (weights or biases).
    """
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ModelError(f"cannot permute {rows} rows for {n_head} heads of even size")
    head_dim = rows // n_head
    return (w.reshape(n_head, 2, head_dim // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


class _Config:
    """A config.json dict with the lookups every family needs."""

    def __init__(self, cfg: Mapping):
        self.raw = dict(cfg)
        if "text_config" in self.raw and "num_hidden_layers" not in self.raw:   # multimodal wrapper: the text part
            self.raw = {**self.raw["text_config"], "tie_word_embeddings": self.raw.get("tie_word_embeddings", True)}

    def get(self, *keys, default=None):
        for k in keys:
            v = self.raw.get(k)
            if v is not None:
                return v
        return default

    def need(self, *keys):
        v = self.get(*keys)
        if v is None:
            raise ModelError(f"config.json has none of {', '.join(keys)}")
        return v

    def rope_params(self, layer_type: str | None = None) -> dict:
        """RoPE settings as one dict (rope_type, rope_theta, factor, ...), whichever transformers version wrote them."""
        rp = self.raw.get("rope_parameters")
        if isinstance(rp, Mapping) and layer_type is not None and layer_type in rp:
            rp = rp[layer_type]
        out = dict(rp) if isinstance(rp, Mapping) and ("rope_type" in rp or "rope_theta" in rp) else {}
        scaling = self.raw.get("rope_scaling")
        if isinstance(scaling, Mapping):
            if layer_type is not None and layer_type in scaling:
                scaling = scaling[layer_type]
            out = {**dict(scaling), **out}
        if "rope_type" not in out and "type" in out:
            out["rope_type"] = out["type"]
        out.setdefault("rope_type", "default")
        if "rope_theta" not in out:
            out["rope_theta"] = self.get("rope_theta", default=10000.0)
        return out


def _minimal_vocab(n_vocab: int) -> dict:
    """A byte-level gpt2 vocabulary of exactly n_vocab tokens: 256 bytes, letter-pair merges, BOS/EOS.

    It only makes the file self-describing (tokenize/detokenize work); the test models' token ids
    are what matters, not their text."""
    if n_vocab < 258:
        raise ModelError(f"the minimal tokenizer needs n_vocab >= 258, got {n_vocab}")
    # GPT-2's byte -> printable unicode map
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    byte_chars = {}
    extra = 0
    for b in range(256):
        if b in keep:
            byte_chars[b] = chr(b)
        else:
            byte_chars[b] = chr(256 + extra)
            extra += 1
    tokens = [byte_chars[b] for b in range(256)]
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    firsts = [byte_chars[ord(" ")]] + list(letters)
    merges = []
    n_merge = n_vocab - 256 - 2
    for a in firsts:
        for b in letters:
            if len(merges) == n_merge:
                break
            merges.append(f"{a} {b}")
            tokens.append(a + b)
    while len(tokens) < n_vocab - 2:          # vocabularies larger than the pair table: unused fillers
        tokens.append(f"<unused{len(tokens)}>")
    tokens += ["<|bos|>", "<|eos|>"]
    types = [1] * (n_vocab - 2) + [3, 3]
    for i, t in enumerate(tokens):
        if t.startswith("<unused"):
            types[i] = 5
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": np.array(types, dtype=np.int32), "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": n_vocab - 2, "tokenizer.ggml.eos_token_id": n_vocab - 1,
            "tokenizer.ggml.add_bos_token": False}


class HFConverter:
    """One checkpoint's conversion: config -> metadata, state dict -> GGUF tensors."""

    def __init__(self, config: Mapping, state_dict: Mapping, *, outtype: str = "f32", name: str | None = None):
        self.cfg = _Config(config)
        model_type = self.cfg.get("model_type")
        self.arch = MODEL_TYPES.get(model_type or "")
        if self.arch is None:
            raise UnsupportedArchitectureError(
                f"cannot convert model_type {model_type!r}; supported: {', '.join(sorted(MODEL_TYPES))}")
        self.model_type = model_type
        if outtype not in OUT_TYPES:
            raise InvalidArgumentError(f"outtype must be one of {', '.join(OUT_TYPES)}, got {outtype!r}")
        self.outtype = outtype
        self.state_dict = state_dict
        self.name = name or self.cfg.get("_name_or_path") or model_type
        c = self.cfg
        self.n_embd = int(c.need("hidden_size", "n_embd"))
        self.n_layer = int(c.need("num_hidden_layers", "n_layer", "num_layers"))
        self.n_head = int(c.need("num_attention_heads", "n_head"))
        self.n_head_kv = int(c.get("num_key_value_heads", "num_kv_heads", "n_head_kv", default=self.n_head))
        new_falcon = c.get("new_decoder_architecture") or model_type == "RefinedWeb"   # Falcon-40B's layout
        if self.arch == "falcon" and not new_falcon and c.get("multi_query", default=True):
            self.n_head_kv = 1   # Falcon-7B: one K/V head, whatever num_kv_heads says
        self.head_dim = int(c.get("head_dim", default=self.n_embd // self.n_head))
        if self.arch == "granite":
            self.head_dim = self.n_embd // self.n_head   # as llama.cpp's converter: granite's head_dim is ignored
        self.n_vocab = int(c.need("vocab_size"))
        self.check_family()

    def check_family(self) -> None:
        """Refuse the variants of a family the GGUF layout (or oxillama's forward) does not express."""
        c = self.cfg
        refuse = {
            "bloom": c.get("apply_residual_connection_post_layernorm"),
            "gpt2": c.get("scale_attn_by_inverse_layer_idx") or c.get("scale_attn_weights") is False,
            "falcon": c.get("alibi") or c.get("parallel_attn") is False,
        }
        if refuse.get(self.arch):
            raise ModelError(f"{self.model_type}: this variant (alibi / sequential attention / residual after the "
                             f"norm / per-layer attention scaling) is not supported")
        acts = {"gptneox": ("hidden_act", "gelu"), "falcon": ("activation", "gelu"),
                "gpt2": ("activation_function", "gelu_new")}
        if self.arch in acts:
            key, want = acts[self.arch]
            if c.get(key, default=want) != want:
                log.warning("%s: %s = %r, but oxillama runs this family with %r", self.model_type, key, c.get(key),
                            want)
        if self.arch == "smollm3":
            no_rope = c.get("no_rope_layers")
            want = [int((il + 1) % 4 != 0) for il in range(self.n_layer)]
            if no_rope is not None and list(no_rope) != want:
                raise ModelError(f"smollm3: no_rope_layers {no_rope} is not llama.cpp's every-4th-layer pattern")

    # ---- metadata ----

    def metadata(self) -> dict:
        c, a = self.cfg, self.arch
        md = {
            "general.architecture": a, "general.name": str(self.name),
            "general.file_type": OUT_TYPES[self.outtype][1],
            f"{a}.vocab_size": self.n_vocab,
            f"{a}.context_length": int(c.get("max_position_embeddings", "n_positions", "seq_length", default=2048)),
            f"{a}.embedding_length": self.n_embd, f"{a}.block_count": self.n_layer,
            f"{a}.feed_forward_length": int(c.get("intermediate_size", "n_inner", "ffn_hidden_size",
                                                  default=4 * self.n_embd if a in ("gpt2", "bloom", "falcon")
                                                  else None) or c.need("intermediate_size")),
            f"{a}.attention.head_count": self.n_head, f"{a}.attention.head_count_kv": self.n_head_kv,
            f"{a}.attention.key_length": self.head_dim, f"{a}.attention.value_length": self.head_dim,
        }
        rope = c.rope_params("full_attention")
        if a not in ("gpt2", "bloom"):   # learned positions / ALiBi: no RoPE
            md[f"{a}.rope.freq_base"] = float(rope["rope_theta"] if "rope_parameters" in c.raw
                                              else c.get("rope_theta", "rotary_emb_base", default=rope["rope_theta"]))
            partial = float(c.get("partial_rotary_factor", "rotary_pct") or rope.get("partial_rotary_factor") or 1.0)
            md[f"{a}.rope.dimension_count"] = int(self.head_dim * partial)
            md.update(self._rope_scaling(rope))
        if self.arch in _LAYER_NORM:
            md[f"{a}.attention.layer_norm_epsilon"] = float(c.need("norm_epsilon", "layer_norm_eps",
                                                                   "layer_norm_epsilon"))
        else:
            md[f"{a}.attention.layer_norm_rms_epsilon"] = float(c.need("rms_norm_eps", "layer_norm_epsilon"))
        if self.arch in ("gptneox", "stablelm"):
            md[f"{a}.use_parallel_residual"] = bool(c.get("use_parallel_residual", default=True))
        if self.arch == "granite":   # the multipliers, by llama.cpp's names
            for key, gkey in (("attention_multiplier", "attention.scale"), ("embedding_multiplier", "embedding_scale"),
                              ("residual_multiplier", "residual_scale"), ("logits_scaling", "logit_scale")):
                if c.get(key) is not None:
                    md[f"{a}.{gkey}"] = float(c.get(key))
        window = self._sliding_window()
        if window:
            md[f"{a}.attention.sliding_window"] = window
        if self.arch in ("gemma2", "gemma3"):
            md.update(self._gemma_local_global())
        if self.arch.startswith("gemma"):
            scalar = c.get("query_pre_attn_scalar")
            if scalar is not None and int(scalar) != self.head_dim:
                md[f"{a}.attention.scale"] = 1.0 / math.sqrt(float(scalar))
        if self.arch == "gemma2":
            for key in ("attn_logit_softcapping", "final_logit_softcapping"):
                if c.get(key):
                    md[f"{a}.{key}"] = float(c.get(key))
        elif self.arch == "gemma3" and (c.get("attn_logit_softcapping") or c.get("final_logit_softcapping")):
            raise ModelError("gemma3 with logit soft-capping is not supported")
        if self.arch == "command-r":
            md[f"{a}.logit_scale"] = float(c.get("logit_scale", default=1.0))
            if c.get("use_qk_norm"):
                raise ModelError("Cohere models with use_qk_norm (Command R+) are not supported")
        if self.arch in ("qwen2", "qwen2moe", "qwen3moe") and c.get("use_sliding_window"):
            raise ModelError(f"{self.arch} with use_sliding_window is not supported")
        if self.model_type in _MOE_NORM_TOPK_DEFAULT:
            md.update(self._experts())
        if self.arch == "phimoe":
            if float(c.get("router_jitter_noise", default=0.01)) != 0.01:
                raise ModelError(f"phimoe with router_jitter_noise {c.get('router_jitter_noise')} is not supported "
                                 f"(Phi-3.5-MoE's 0.01 is the sparsemixer's epsilon here)")
            if int(c.get("num_experts_per_tok", default=2)) != 2:
                raise ModelError("phimoe's sparsemixer router picks 2 experts; num_experts_per_tok must be 2")
        if self.arch == "gpt-oss":
            for key, want in GPT_OSS_SWIGLU.items():
                if float(c.get(key, default=want)) != want:
                    raise ModelError(f"gpt_oss with {key} {c.get(key)} is not supported (llama.cpp's is {want})")
        return md

    def _experts(self) -> dict:
        """The mixture-of-experts keys llama.cpp's converter writes, plus expert_weights_norm from the config's
        norm_topk_prob (llama.cpp's qwen3moe and qwen2moe assume their checkpoints' values instead)."""
        c, a = self.cfg, self.arch
        n_expert = int(c.need("num_experts", "num_local_experts"))
        n_used = int(c.need("num_experts_per_tok"))
        if c.get("mlp_only_layers") or int(c.get("decoder_sparse_step", default=1)) != 1:
            raise ModelError(f"{self.model_type} with dense layers among the sparse ones (mlp_only_layers "
                             f"{c.get('mlp_only_layers')}, decoder_sparse_step {c.get('decoder_sparse_step')}) "
                             f"is not supported")
        if c.get("clip_qkv"):
            raise ModelError(f"{self.model_type} with clip_qkv is not supported")
        md = {f"{a}.expert_count": n_expert, f"{a}.expert_used_count": n_used,
              f"{a}.expert_feed_forward_length": int(c.get("moe_intermediate_size") or c.need("intermediate_size"))}
        if c.get("shared_expert_intermediate_size"):
            md[f"{a}.expert_shared_feed_forward_length"] = int(c.get("shared_expert_intermediate_size"))
        if _MOE_NORM_TOPK_DEFAULT[self.model_type] is not None:
            md[f"{a}.expert_weights_norm"] = bool(c.get("norm_topk_prob",
                                                        default=_MOE_NORM_TOPK_DEFAULT[self.model_type]))
        return md

    def _rope_scaling(self, rope: dict) -> dict:
        a, kind = self.arch, rope["rope_type"]
        if kind in ("default", None):
            return {}
        factor = float(rope.get("factor", 1.0))
        if kind == "linear":
            return {f"{a}.rope.scaling.type": "linear", f"{a}.rope.scaling.factor": factor}
        if kind == "llama3" and self.arch in ("llama", "exaone"):
            return {}   # carried by the rope_freqs tensor (rope_factors())
        if kind == "yarn":
            n_orig = int(rope.get("original_max_position_embeddings")
                         or self.cfg.get("original_max_position_embeddings", "max_position_embeddings"))
            md = {f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": factor,
                  f"{a}.rope.scaling.original_context_length": n_orig}
            if rope.get("beta_fast") is not None:
                md[f"{a}.rope.scaling.yarn_beta_fast"] = float(rope["beta_fast"])
            if rope.get("beta_slow") is not None:
                md[f"{a}.rope.scaling.yarn_beta_slow"] = float(rope["beta_slow"])
            if rope.get("mscale") or rope.get("mscale_all_dim"):
                raise ModelError("YaRN with mscale/mscale_all_dim (DeepSeek style) is not supported")
            if rope.get("attention_factor") is not None:
                # HF's attention_factor replaces 0.1 ln(s) + 1; ggml multiplies attn_factor by that term
                md[f"{a}.rope.scaling.attn_factor"] = float(rope["attention_factor"]) / (
                    1.0 + 0.1 * math.log(factor))
            if rope.get("truncate") is False and self.arch != "gpt-oss":   # gpt-oss's family knows it has it
                raise ModelError("YaRN with truncate=False is not supported")
            return md
        if kind in ("longrope", "su") and self.arch in ("phi3", "phimoe"):
            # llama.cpp's layout: the factors as rope_factors_long / _short tensors (longrope_factors()), the
            # original context, and the magnitude on Q and K (transformers' attention_factor)
            n_orig = int(rope.get("original_max_position_embeddings")
                         or self.cfg.need("original_max_position_embeddings"))
            scale = float(self.cfg.need("max_position_embeddings")) / n_orig
            attn = rope.get("attention_factor")
            if attn is None:
                attn = math.sqrt(1 + math.log(scale) / math.log(n_orig)) if scale > 1.0 else 1.0
            return {f"{a}.rope.scaling.original_context_length": n_orig,
                    f"{a}.rope.scaling.attn_factor": float(attn)}
        raise ModelError(f"RoPE scaling {kind!r} is not supported (supported: linear, yarn, and longrope for "
                         f"phi3 / phimoe)")

    def _sliding_window(self) -> int:
        c = self.cfg
        window = c.get("sliding_window")
        if not window:
            return 0
        if "use_sliding_window" in c.raw and not c.get("use_sliding_window"):
            return 0   # qwen2 configs carry a window that is off unless use_sliding_window
        layer_types = c.get("layer_types")
        if self.arch == "gpt-oss":   # the even layers slide (llama.cpp's swa pattern 2)
            want = ["sliding_attention" if il % 2 == 0 else "full_attention" for il in range(self.n_layer)]
            if layer_types is not None and list(layer_types) != want:
                raise ModelError(f"gpt_oss: layer_types {layer_types} are not sliding/full alternating")
            return int(window)
        if layer_types is not None and self.arch not in ("gemma2", "gemma3"):
            if any(t != "sliding_attention" for t in layer_types):
                if all(t == "full_attention" for t in layer_types):
                    return 0
                raise ModelError(f"{self.arch}: mixed layer_types {layer_types} are not supported")
        return int(window)

    def _gemma_local_global(self) -> dict:
        """Which layers are local: a period `n` where layer il is local unless il % n == n - 1."""
        c, a = self.cfg, self.arch
        default = 2 if self.arch == "gemma2" else 6
        n = int(c.get("sliding_window_pattern", "_sliding_window_pattern", default=default))
        layer_types = c.get("layer_types")
        if layer_types is not None:
            if "full_attention" in layer_types:   # transformers 5 states the layers; the period is up to a global one
                n = list(layer_types).index("full_attention") + 1
            else:
                n = self.n_layer + 1
            want = ["sliding_attention" if il % n < n - 1 else "full_attention" for il in range(self.n_layer)]
            if list(layer_types) != want:
                raise ModelError(f"{self.arch}: layer_types {layer_types} do not follow a local/global period")
        md = {f"{a}.attention.sliding_window_pattern": n}
        if self.arch == "gemma3":
            local = c.rope_params("sliding_attention")
            theta = c.get("rope_local_base_freq") or (local.get("rope_theta") if "rope_parameters" in c.raw
                                                         else None) or 10000.0
            md[f"{a}.rope.freq_base_swa"] = float(theta)
            if local.get("rope_type", "default") not in ("default", None) and "rope_parameters" in c.raw:
                raise ModelError("gemma3 local layers with RoPE scaling are not supported")
        return md

    # ---- tensors ----

    def gguf_name(self, hf_name: str) -> str | None:
        if _EXPERT_RE.match(hf_name) or _FUSED_EXPERTS_RE.match(hf_name):
            raise ModelError(f"{hf_name!r} is an expert tensor: tensors() stacks those")
        m = _LAYER_RE.match(hf_name)
        if m:
            il, mod, kind = m.groups()
            table = (_GEMMA2_LAYER_MAP if self.arch in _POST_NORM_ARCHS else
                     _GPT_OSS_LAYER_MAP if self.arch == "gpt-oss" else _LAYER_MAP)
            if mod not in table:
                raise ModelError(f"{self.model_type}: no GGUF name for tensor {hf_name!r}")
            base = table[mod]
            return None if base is None else f"blk.{il}.{base}.{kind}"
        stem, _, kind = hf_name.rpartition(".")
        if hf_name in _GLOBAL_MAP or stem in _GLOBAL_MAP and _GLOBAL_MAP[stem] is None:
            return None
        if stem in _GLOBAL_MAP:
            return f"{_GLOBAL_MAP[stem]}.{kind}"
        raise ModelError(f"{self.model_type}: no GGUF name for tensor {hf_name!r}")

    def renamed(self, hf_name: str) -> str | None:
        """The llama-style name of a family's own tensor name (None: dropped)."""
        for pattern, repl in _RENAMES_RE.get(self.model_type) or _RENAMES_RE.get(self.arch, ()):
            if pattern.search(hf_name):
                if repl is None:
                    return None
                hf_name = pattern.sub(repl, hf_name)
        return hf_name

    def qkv_rows(self, data: np.ndarray) -> np.ndarray:
        """A fused QKV (weight or bias) from the family's row order to [Q; K; V]."""
        hd, rest = self.head_dim, data.shape[1:]
        if self.arch in ("bloom", "gptneox"):          # per head: [q k v]
            x = data.reshape(self.n_head, 3, hd, *rest)
            return np.concatenate([x[:, j].reshape(-1, *rest) for j in range(3)])
        if self.arch in ("falcon", "internlm2"):       # per KV group: [q * group, k, v]
            g = self.n_head // self.n_head_kv
            x = data.reshape(self.n_head_kv, g + 2, hd, *rest)
            return np.concatenate([x[:, :g].reshape(-1, *rest), x[:, g].reshape(-1, *rest),
                                   x[:, g + 1].reshape(-1, *rest)])
        return data

    def transform(self, gname: str, data: np.ndarray) -> np.ndarray:
        if self.arch == "gpt2" and data.ndim == 2 and gname.startswith("blk."):
            data = data.T    # Conv1D stores (in, out)
        if gname.endswith(("attn_qkv.weight", "attn_qkv.bias")):
            data = self.qkv_rows(data)
        if self.arch in _PERMUTE_QK and gname.endswith(("attn_q.weight", "attn_q.bias")):
            data = permute_rope_rows(data, self.n_head)
        elif self.arch in _PERMUTE_QK and gname.endswith(("attn_k.weight", "attn_k.bias")):
            data = permute_rope_rows(data, self.n_head_kv)
        if self.arch.startswith("gemma") and gname.endswith("norm.weight"):
            data = data + 1.0
        return data

    def split(self, gname: str, data: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """internlm2's fused wqkv as separate attn_q, attn_k, attn_v (llama.cpp's layout for it); else as is."""
        if self.arch != "internlm2" or not gname.endswith("attn_qkv.weight"):
            return [(gname, data)]
        qkv = self.qkv_rows(data)
        q_dim, kv_dim = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        stem = gname[:-len("attn_qkv.weight")]
        parts = {"attn_q": qkv[:q_dim], "attn_k": qkv[q_dim:q_dim + kv_dim], "attn_v": qkv[q_dim + kv_dim:]}
        return [(f"{stem}{k}.weight", self.transform(f"{stem}{k}.weight", v)) for k, v in parts.items()]

    def tied(self) -> bool:
        if not any(self.renamed(k) == "lm_head.weight" for k in self.state_dict):
            return True
        return bool(self.cfg.get("tie_word_embeddings", default=False))

    def rope_factors(self) -> np.ndarray | None:
        """Llama 3 RoPE scaling as per-pair frequency divisors (the `rope_freqs` tensor, n_rot/2 values).

        Pairs whose wavelength is shorter than n_ctx_orig / high_freq_factor keep their frequency,
        longer than n_ctx_orig / low_freq_factor are divided by factor, and the band between blends
        smoothly: divisor = 1 / ((1 - s) / factor + s), s = (n_ctx_orig / wavelen - low) / (high - low).
        """
        rope = self.cfg.rope_params("full_attention")
        if rope["rope_type"] != "llama3":
            return None
        if self.arch not in ("llama", "exaone"):
            raise ModelError(f"llama3 RoPE scaling on a {self.arch} model is not supported")
        factor = float(rope.get("factor", 8.0))
        low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
        n_orig = float(rope.get("original_max_position_embeddings", 8192))
        n_rot = self.head_dim
        freqs = float(rope["rope_theta"]) ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
        wavelen = 2 * math.pi / freqs
        smooth = (n_orig / wavelen - low) / (high - low)
        out = 1.0 / ((1 - smooth) / factor + smooth)
        out = np.where(wavelen < n_orig / high, 1.0, np.where(wavelen > n_orig / low, factor, out))
        return out.astype(np.float32)

    def longrope_factors(self) -> dict[str, np.ndarray]:
        """LongRoPE's per-pair frequency divisors (Phi-3.5, Phi-4-mini): rope_factors_long / _short, n_rot/2
        values each."""
        rope = self.cfg.rope_params("full_attention")
        if rope["rope_type"] not in ("longrope", "su") or self.arch not in ("phi3", "phimoe"):
            return {}
        partial = float(self.cfg.get("partial_rotary_factor") or rope.get("partial_rotary_factor") or 1.0)
        n_pairs = int(self.head_dim * partial) // 2
        out = {}
        for kind in ("long", "short"):
            f = rope.get(f"{kind}_factor")
            if f is None or len(f) != n_pairs:
                raise ModelError(f"rope_scaling.{kind}_factor must hold {n_pairs} values (half the rotated "
                                 f"dimensions), got {None if f is None else len(f)}")
            out[f"rope_factors_{kind}.weight"] = np.asarray(f, np.float32)
        return out

    def tensors(self):
        """(gguf name, float32 array) in a stable order."""
        factors = self.rope_factors()
        if factors is not None:
            yield "rope_freqs.weight", factors
        yield from self.longrope_factors().items()
        tied = self.tied()
        head_norms: dict[tuple[str, str], dict[int, np.ndarray]] = {}   # stablelm: (layer, q|k) -> head -> weight
        per_expert: dict[tuple[int, str], dict[int, str]] = {}   # (layer, gate|up|down) -> expert -> HF name
        mxfp4: dict[tuple[int, str], dict[str, str]] = {}        # (layer, gate_up_proj|down_proj) -> part -> name
        for hf_name in self.state_dict:
            name = self.renamed(hf_name)
            if name is None:
                continue
            m = _QK_HEAD_NORM_RE.match(name)
            if m:   # one LayerNorm per head: stacked into (n_head, head_dim) once every head is in
                il, qk, h = m.groups()
                heads = head_norms.setdefault((il, qk), {})
                heads[int(h)] = _to_numpy(self.state_dict[hf_name])
                n = self.n_head if qk == "q" else self.n_head_kv
                if len(heads) == n:
                    yield f"blk.{il}.attn_{qk}_norm.weight", np.ascontiguousarray(
                        np.stack([heads[i] for i in range(n)]), dtype=np.float32)
                continue
            m = _EXPERT_RE.match(name)
            if m:
                per_expert.setdefault((int(m[1]), _EXPERT_KIND[m[3]]), {})[int(m[2])] = hf_name
                continue
            m = _FUSED_EXPERTS_RE.match(name)
            if m:
                yield from self._fused_experts(int(m[1]), m[2], bool(m[3]), _to_numpy(self.state_dict[hf_name]))
                continue
            m = _MXFP4_RE.match(name)
            if m:
                mxfp4.setdefault((int(m[1]), m[2]), {})[m[3]] = hf_name
                continue
            m = _SINKS_RE.match(name)
            if m:
                yield f"blk.{m[1]}.attn_sinks.weight", np.ascontiguousarray(_to_numpy(self.state_dict[hf_name]))
                continue
            gname = self.gguf_name(name)
            if gname is None or (tied and gname == "output.weight"):
                continue
            data = _to_numpy(self.state_dict[hf_name])
            if gname.endswith("attn_qkv.weight") and self.arch == "internlm2":
                parts = self.split(gname, data)
            else:
                parts = [(gname, self.transform(gname, data))]
            for gn, d in parts:
                d = np.ascontiguousarray(d, dtype=np.float32)
                if gn.endswith("ffn_gate_inp_shexp.weight"):
                    d = d.reshape(-1)          # (1, n_embd) in HF, a vector in GGUF
                yield gn, d
        for (il, kind), parts in sorted(mxfp4.items()):
            if set(parts) != {"blocks", "scales"}:
                raise ModelError(f"layer {il} experts.{kind}: MXFP4 needs both _blocks and _scales, got {sorted(parts)}")
            yield from self._mxfp4_experts(il, kind, self._raw(parts["blocks"]), self._raw(parts["scales"]))
        for (il, kind), by_expert in sorted(per_expert.items()):
            n_expert = int(self.cfg.need("num_experts", "num_local_experts"))
            if sorted(by_expert) != list(range(n_expert)):
                raise ModelError(f"layer {il} has {kind} matrices for experts {sorted(by_expert)}, expected 0.."
                                 f"{n_expert - 1}")
            yield f"blk.{il}.ffn_{kind}_exps.weight", np.ascontiguousarray(
                np.stack([_to_numpy(self.state_dict[by_expert[e]]) for e in range(n_expert)]), dtype=np.float32)

    def _raw(self, hf_name: str) -> np.ndarray:
        t = self.state_dict[hf_name]
        if hasattr(t, "detach"):
            t = t.detach().to("cpu").numpy()
        return np.asarray(t)

    def _mxfp4_experts(self, il: int, kind: str, blocks: np.ndarray, scales: np.ndarray):
        """gpt-oss's MXFP4 experts kept as they are, repacked to ggml's block layout (llama.cpp's converter does
        the same): gate_up's even rows are gate's, its odd rows up's."""
        if blocks.ndim != 4:
            raise ModelError(f"layer {il} experts.{kind}_blocks should be (n_expert, rows, n_blocks, 16), has "
                             f"shape {blocks.shape}")
        if kind == "down_proj":
            parts = [("down", blocks, scales)]
        else:
            parts = [("gate", blocks[:, 0::2], scales[:, 0::2]), ("up", blocks[:, 1::2], scales[:, 1::2])]
        for name, b, sc in parts:
            n_expert, rows, n_blocks, _ = b.shape
            yield f"blk.{il}.ffn_{name}_exps.weight", RawTensor(mxfp4_from_hf(b, sc), (n_expert, rows, n_blocks * 32),
                                                                "MXFP4")

    def _fused_experts(self, il: int, kind: str, bias: bool, data: np.ndarray):
        """transformers 5's stacked experts as llama.cpp's (n_expert, rows, cols) ffn_{gate,up,down}_exps.

        gpt-oss holds them transposed, (n_expert, cols, rows), with gate and up interleaved (gate the even
        columns of gate_up_proj, up the odd ones), and biases (n_expert, rows) beside them."""
        oss = self.arch == "gpt-oss"
        if data.ndim != (2 if bias else 3) or bias and not oss:
            raise ModelError(f"layer {il} experts.{kind}{'_bias' if bias else ''} has shape {data.shape}: not "
                             f"{'(n_expert, rows)' if bias else '(n_expert, rows, cols)'} of a supported family")
        suffix = "bias" if bias else "weight"
        if oss and not bias:
            data = data.swapaxes(1, 2)
        if kind == "down_proj":
            yield f"blk.{il}.ffn_down_exps.{suffix}", np.ascontiguousarray(data, dtype=np.float32)
            return
        if data.shape[1] % 2:
            raise ModelError(f"layer {il} experts.gate_up_proj has an odd row count {data.shape[1]}")
        if oss:
            gate, up = data[:, 0::2], data[:, 1::2]
        else:
            gate, up = np.split(data, 2, axis=1)      # [gate; up] per expert, as the experts' forward chunks it
        yield f"blk.{il}.ffn_gate_exps.{suffix}", np.ascontiguousarray(gate, dtype=np.float32)
        yield f"blk.{il}.ffn_up_exps.{suffix}", np.ascontiguousarray(up, dtype=np.float32)

    def tensor_type(self, gname: str, data: np.ndarray) -> str:
        """Norms and biases (gpt-oss's per-expert biases are 2-D) stay F32; matrices take the output type."""
        if data.ndim < 2 or gname.endswith(".bias") or self.outtype == "f32":
            return "F32"
        if self.outtype == "q8_0" and data.shape[-1] % 32:
            return "F16"
        return OUT_TYPES[self.outtype][0]

    def write(self, path: str | os.PathLike, *, vocab: dict | None = None) -> str:
        w = GGUFWriter(path)
        for key, value in self.metadata().items():
            # llama.cpp reads every integer hyper-parameter as UINT32 and refuses other widths
            is_int = isinstance(value, int) and not isinstance(value, bool)
            w.add_metadata(key, value, type="UINT32" if is_int else None)
        for key, value in (vocab or _minimal_vocab(self.n_vocab)).items():
            w.add_metadata(key, value)
        n = 0
        for gname, data in self.tensors():
            if isinstance(data, RawTensor):
                w.add_tensor(gname, data.data.reshape(-1), qtype=data.qtype, shape=data.shape)
            else:
                w.add_tensor(gname, data, qtype=self.tensor_type(gname, data))
            n += 1
        w.write()
        log.info("wrote %s: %s, %d tensors, %s", os.fspath(path), self.arch, n, self.outtype)
        return os.fspath(path)


def convert_state_dict(state_dict: Mapping, config: Mapping, out_path: str | os.PathLike, *, outtype: str = "f32",
                       name: str | None = None, vocab: dict | None = None) -> str:
    """Write a GGUF file from a transformers state dict (torch tensors or numpy arrays) and its config dict.

    outtype: "f32", "f16" or "q8_0" for the 2-D weights (norms and biases stay F32). `vocab` may
    give the `tokenizer.ggml.*` keys; by default a minimal byte-level vocabulary of the model's size.
    """
    return HFConverter(config, state_dict, outtype=outtype, name=name).write(out_path, vocab=vocab)


def convert_model(model, out_path: str | os.PathLike, *, outtype: str = "f32", name: str | None = None,
                  vocab: dict | None = None) -> str:
    """Convert an in-memory transformers PreTrainedModel."""
    return convert_state_dict(model.state_dict(), model.config.to_dict(), out_path, outtype=outtype, name=name,
                              vocab=vocab)


def convert_hf_dir(model_dir: str | os.PathLike, out_path: str | os.PathLike, *, outtype: str = "f32",
                   vocab: dict | None = None) -> str:
    """Convert a saved checkpoint folder (config.json + *.safetensors or pytorch_model*.bin); needs torch."""
    model_dir = os.fspath(model_dir)
    cfg_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise InvalidArgumentError(f"{model_dir!r} has no config.json")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    files = sorted(os.listdir(model_dir))
    state: dict = {}
    st = [f for f in files if f.endswith(".safetensors")]
    if st:
        try:
            from safetensors.torch import load_file
        except ImportError as e:
            raise ModelError("reading .safetensors needs the safetensors package (pip install safetensors)") from e
        for f in st:
            state.update(load_file(os.path.join(model_dir, f)))
    else:
        bins = [f for f in files if f.startswith("pytorch_model") and f.endswith(".bin")]
        if not bins:
            raise InvalidArgumentError(f"{model_dir!r} has no .safetensors or pytorch_model*.bin weights")
        try:
            import torch
        except ImportError as e:
            raise ModelError("reading .bin checkpoints needs torch") from e
        for f in bins:
            state.update(torch.load(os.path.join(model_dir, f), map_location="cpu", weights_only=True))
    return convert_state_dict(state, config, out_path, outtype=outtype, name=os.path.basename(model_dir.rstrip("/")),
                              vocab=vocab)
