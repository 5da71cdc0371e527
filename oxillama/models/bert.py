"""Encoders for embeddings: BERT (bge, MiniLM, e5 ...) and nomic-bert (nomic-embed-text), by llama.cpp's names.

What differs from the decoder block: attention is bidirectional (no causal mask; each input runs in one call,
layers/encoder.h), blocks are post-norm (x = LN(x + attn(x)); x = LN(x + ffn(x)), every norm a LayerNorm with
bias), the embeddings add the token-type-0 row and, for bert, learned absolute positions, then a LayerNorm.
bert: separate Q, K, V with biases, FFN up -> GELU -> down with biases. nomic-bert: fused QKV, RoPE over
halves (neox), SwiGLU FFN (silu(gate) * up). GELU is the exact (erf) one of the models' definitions
(transformers' BertModel), where llama.cpp uses its tanh approximation (differences ~1e-4).
No output head: the final hidden states are pooled as `<arch>.pooling_type` declares (runtime/embeddings.py);
asking for logits or generation is an error.
"""
from __future__ import annotations

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import Architecture, ModelConfig

# llama.cpp's llama_pooling_type values
POOLING_TYPES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


class Bert(Architecture):
    arch_names = ("bert",)
    norm_type = "layer"
    act = "gelu_erf"
    rope_mode = "none"
    gated_ffn = False
    norm_eps_key = "attention.layer_norm_epsilon"
    is_encoder = True

    def validate(self, c: ModelConfig) -> None:
        super().validate(c)
        if c.n_head_kv != c.n_head:
            raise ModelError(f"{self.arch}: attention.head_count_kv {c.n_head_kv} must equal head_count {c.n_head}")
        pooling = self.hp("pooling_type")
        if pooling is not None:
            pid = self.hp_int("pooling_type")
            if pid not in POOLING_TYPES:
                raise ModelError(f"{self.arch}.pooling_type = {pid} is not a pooling type llama.cpp defines "
                                 f"({', '.join(f'{k}: {v}' for k, v in POOLING_TYPES.items())})")

    @property
    def pooling(self) -> str:
        """The pooling the file declares (mean if it says nothing, as llama.cpp's bert converter writes)."""
        pid = self.hp("pooling_type")
        return "mean" if pid is None else POOLING_TYPES[self.hp_int("pooling_type")]

    def layer(self, il: int) -> dict:
        c = self.config
        p = f"blk.{il}."
        fused_qkv = self.has(p + "attn_qkv.weight")
        return {
            "n_head": c.n_head, "n_head_kv": c.n_head_kv, "head_dim": c.head_dim, "n_ff": c.n_ff,
            "attn_norm": None, "ffn_norm": None,      # post-norm: the branches read x itself
            "wq": self.weight(p + ("attn_qkv.weight" if fused_qkv else "attn_q.weight")),
            "wk": None if fused_qkv else self.weight(p + "attn_k.weight"),
            "wv": None if fused_qkv else self.weight(p + "attn_v.weight"),
            "wo": self.weight(p + "attn_output.weight"),
            "bq": None if fused_qkv else self.vector(p + "attn_q.bias"),
            "bk": None if fused_qkv else self.vector(p + "attn_k.bias"),
            "bv": None if fused_qkv else self.vector(p + "attn_v.bias"),
            "bo": self.vector(p + "attn_output.bias"),
            "attn_out_norm": self.vector(p + "attn_output_norm.weight", optional=False),
            "attn_out_norm_b": self.vector(p + "attn_output_norm.bias", optional=False),
            "w_gate": self.weight(p + "ffn_gate.weight") if self.gated_ffn else None,
            "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight"),
            "b_up": self.vector(p + "ffn_up.bias"), "b_down": self.vector(p + "ffn_down.bias"),
            "layer_out_norm": self.vector(p + "layer_output_norm.weight", optional=False),
            "layer_out_norm_b": self.vector(p + "layer_output_norm.bias", optional=False),
            "act": self.act, "attn_scale": self.attn_scale(il), "sliding_window": 0,
            "rope": self.rope(il) if self.rope_mode != "none" else None,
        }

    def build(self) -> dict:
        c = self.config
        emb = self.weight("token_embd.weight")
        type_embd = None
        if self.has("token_types.weight"):
            types = self.tensor("token_types.weight")
            if len(types.shape) != 2 or types.shape[1] != c.n_embd:
                raise ModelError(f"token_types.weight has shape {types.shape}; expected (n_token_types, {c.n_embd})")
            type_embd = np.ascontiguousarray(types.numpy().reshape(types.shape)[0], dtype=np.float32)
        spec = {
            "arch": self.arch, "n_embd": c.n_embd, "n_vocab": c.n_vocab, "norm_type": self.norm_type,
            "norm_eps": c.norm_eps, "tok_embd": emb, "output": emb,   # no head; logits are refused upstream
            "out_norm": None, "type_embd": type_embd,
            "embd_norm": self.vector("token_embd_norm.weight", optional=False),
            "embd_norm_b": self.vector("token_embd_norm.bias", optional=False),
            "non_causal": True,
            "layers": [self.layer(il) for il in range(c.n_layer)],
        }
        if self.use_positions:
            spec["pos_embd"] = self.weight("position_embd.weight")
        return spec

    use_positions = True


class NomicBert(Bert):
    arch_names = ("nomic-bert",)
    act = "silu"
    rope_mode = "neox"
    gated_ffn = True
    use_positions = False
