"""IBM Granite.

granite: IBM Granite 3.x (dense): the llama block with four multipliers: embeddings times embedding_scale, each
sublayer's output times residual_scale before the residual add, attention scores times attention.scale
(instead of 1/sqrt(head_dim)), logits divided by logit_scale.

granitehybrid (Granite 4.0-H): Mamba-2 mixers with a few attention layers, each block followed
by a mixture of experts with a shared expert (or a dense FFN).

The layer-kind list is `granitehybrid.attention.head_count_kv`, one value per block: 0 marks a Mamba-2 block
(as llama.cpp reads it), anything else an attention block with that many KV heads. Every block:
    x += residual_scale * mixer(rms_norm(x))                  mixer: Mamba-2 (mamba2.py) or attention
    x += residual_scale * (moe(n) + shared(n)),  n = rms_norm(x)
with Granite's multipliers: embeddings times `embedding_scale`, attention scores times `attention.scale` (in place
of 1/sqrt(head_dim)), logits divided by `logit_scale`. The attention has no RoPE unless
`rope.scaling.finetuned` is true (Granite 4.0-H: NoPE; Bamba: RoPE). The router takes the softmax over all
experts, keeps the top k and renormalises them (= a softmax over the top k logits, transformers' form).
"""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import MAX_HEAD_DIM, MAX_LAYERS, Architecture, ModelConfig
from oxillama.models.mamba2 import Mamba2


class Granite(Architecture):
    arch_names = ("granite",)

    def embd_scale(self) -> float:
        return self.hp_float("embedding_scale", 1.0)

    def attn_scale(self, il: int) -> float:
        scale = self.hp_float("attention.scale", 0.0, lo=0.0)
        return scale if scale else super().attn_scale(il)

    def logit_scale(self) -> float:
        return 1.0 / self.hp_float("logit_scale", 1.0, lo=0.0, lo_open=True)

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        d["residual_scale"] = self.hp_float("residual_scale", 1.0, lo=0.0)
        return d


class GraniteHybrid(Mamba2):
    arch_names = ("granitehybrid",)
    expert_gating = "softmax"
    expert_norm_topk = True

    def __init__(self, gguf):
        self.row_orders: dict[str, np.ndarray] = {}   # tensor name -> the file's row of each plan row
        super().__init__(gguf)

    @property
    def rope_mode(self) -> str:
        """NoPE unless rope.scaling.finetuned (Bamba). llama.cpp's converter permutes each head's Q and K rows for
        adjacent-pair RoPE over the whole head; a partial rotation (rope.dimension_count < head_dim: Bamba rotates
        half of each head, transformers' partial_rotary_factor 0.5) is then run on the rows put back in
        transformers' order (unpermuted_qk) as halves over the first n_rot dims, as transformers computes it.
        (llama.cpp itself rotates adjacent pairs of the permuted rows there, which is another function.)"""
        if not bool(self.hp("rope.scaling.finetuned", True)):
            return "none"
        return "neox" if self.partial_rope() else "norm"

    def partial_rope(self) -> bool:
        n_embd = self.tensor("token_embd.weight").shape[1]
        head_dim = self.hp_int("attention.key_length", 0) or n_embd // self.hp_int("attention.head_count", required=True,
                                                                                   lo=1)
        return self.hp_int("rope.dimension_count", head_dim, lo=0) < head_dim

    def unpermuted_qk(self, w, n_head: int, name: str):
        """A Q or K matrix (bytes, type, rows, cols) whose rows llama.cpp's converter interleaved per head (rows
        i and i + head_dim/2 of transformers' head at 2i and 2i + 1), put back in transformers' order: a copy."""
        data, qtype, rows, cols = w
        head_dim = rows // n_head
        if rows % n_head or head_dim % 2:
            raise ModelError(f"{name} has {rows} rows, not {n_head} heads of an even head_dim")
        half = head_dim // 2
        # transformers' row r of a head is the permuted row 2r (r < half) or 2(r - half) + 1
        order = np.concatenate([2 * np.arange(half), 2 * np.arange(half) + 1])
        order = (np.arange(n_head)[:, None] * head_dim + order[None, :]).reshape(-1)
        arr = np.asarray(data, dtype=np.uint8).reshape(rows, -1)
        self.row_orders[name] = order   # a LoRA's B on this matrix is reordered alike (oxillama/lora)
        return (np.ascontiguousarray(arr[order]).reshape(-1), qtype, rows, cols)

    def read_config(self) -> ModelConfig:
        a = self.arch
        emb = self.tensor("token_embd.weight")
        if len(emb.shape) != 2 or min(emb.shape) < 1:
            raise ModelError(f"token_embd.weight has shape {emb.shape}; expected (n_vocab, n_embd)")
        n_vocab, n_embd = (int(d) for d in emb.shape)
        n_layer = self.hp_int("block_count", required=True, lo=1, hi=MAX_LAYERS)
        kinds, n_head_kv = self.read_layer_kinds(n_layer)
        n_head = self.hp_int("attention.head_count", required=True, lo=1, hi=n_embd)
        head_dim = self.hp_int("attention.key_length", n_embd // n_head, lo=1, hi=MAX_HEAD_DIM)
        if n_head_kv and n_head % n_head_kv:
            raise ModelError(f"{a}.attention.head_count {n_head} is not a multiple of the attention layers' "
                             f"{a}.attention.head_count_kv {n_head_kv}")
        ssm = self.read_ssm(n_embd, kinds.index("mamba2")) if "mamba2" in kinds else None
        config = ModelConfig(
            arch=a, n_vocab=n_vocab, n_embd=self.hp_int("embedding_length", n_embd, lo=n_embd, hi=n_embd),
            n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv or 1, head_dim=head_dim,
            n_ff=self.hp_int("feed_forward_length", required=True, lo=1),
            n_ctx_train=self.hp_int("context_length", 2048, lo=1),
            norm_eps=self.hp_float("attention.layer_norm_rms_epsilon", 1e-5, lo=0.0, hi=1.0),
            rope_base=self.hp_float("rope.freq_base", 10000.0, lo=0.0, lo_open=True),
            n_rot=self.hp_int("rope.dimension_count", head_dim, lo=0, hi=head_dim),
            extra={"ssm": ssm, "kinds": kinds}, experts=self.read_experts())
        Architecture.validate(self, config)
        return config

    def read_layer_kinds(self, n_layer: int) -> tuple[list[str], int]:
        """(each block's kind, the attention blocks' KV head count) from attention.head_count_kv, checked against
        each block's tensors."""
        key = f"{self.arch}.attention.head_count_kv"
        raw = self.hp("attention.head_count_kv", required=True)
        values = [int(v) for v in np.atleast_1d(np.asarray(raw)).tolist()]
        if len(values) == 1:
            values = values * n_layer
        if len(values) != n_layer or min(values) < 0:
            raise ModelError(f"{key} must hold one count >= 0 per block ({n_layer}), got {len(values)} values")
        kinds = ["mamba2" if v == 0 else "attention" for v in values]
        counts = {v for v in values if v}
        if len(counts) > 1:
            raise ModelError(f"{key}: the attention blocks' KV head counts differ ({sorted(counts)}); the KV cache "
                             f"has one layout")
        for il, kind in enumerate(kinds):
            has_ssm, has_attn = self.has(f"blk.{il}.ssm_in.weight"), self.has(f"blk.{il}.attn_q.weight")
            if (kind == "mamba2") != has_ssm or (kind == "attention") != has_attn:
                found = "ssm_in" if has_ssm else "attn_q" if has_attn else "neither ssm_in nor attn_q"
                raise ModelError(f"{key}[{il}] = {values[il]} makes block {il} a {kind} block, but it has {found}")
        return kinds, (counts.pop() if counts else 0)

    def validate(self, c: ModelConfig) -> None:
        pass

    def attn_scale(self, il: int) -> float:
        scale = self.hp_float("attention.scale", 0.0)
        return scale if scale else 1.0 / math.sqrt(self.config.head_dim)

    def embd_scale(self) -> float:
        return self.hp_float("embedding_scale", 1.0, lo=0.0, lo_open=True)

    def logit_scale(self) -> float:
        return 1.0 / self.hp_float("logit_scale", 1.0, lo=0.0, lo_open=True)

    def ffn(self, il: int) -> dict:
        """Block il's FFN: the mixture (router, experts, shared expert) or a dense gated FFN."""
        p = f"blk.{il}."
        d = {"ffn_norm": self.vector(p + "ffn_norm.weight", optional=False), "act": "silu"}
        if self.config.experts is not None:
            d.update(self.moe_ffn(il))
        else:
            d.update({"n_ff": self.config.n_ff, "w_gate": self.weight(p + "ffn_gate.weight"),
                      "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight")})
        return d

    def layer(self, il: int) -> dict:
        c = self.config
        if c.extra["kinds"][il] == "mamba2":
            d = self.mamba2_layer(il, c.extra["ssm"])
            d.update(self.ffn(il))
        else:
            d = Architecture.layer(self, il)
            if d["rope"]["mode"] == "neox":   # a partial rotation over llama.cpp's permuted rows: see rope_mode
                p = f"blk.{il}."
                d["wq"] = self.unpermuted_qk(d["wq"], c.n_head, p + "attn_q.weight")
                d["wk"] = self.unpermuted_qk(d["wk"], c.n_head_kv, p + "attn_k.weight")
        d["residual_scale"] = self.hp_float("residual_scale", 1.0)
        return d

    def build(self) -> dict:
        spec = Architecture.build(self)
        spec["n_head_kv"], spec["head_dim"] = self.config.n_head_kv, self.config.head_dim
        return spec
