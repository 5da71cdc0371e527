"""Nemotron-H (NVIDIA's Nemotron-H 4B .. 56B, Nemotron-Nano-9B-v2; llama.cpp's `nemotron_h`): every block is one
mixer and a residual, x += mixer(rms_norm(x)), the mixer one of
- a Mamba-2 mixer (mamba2.py: conv, scan, gated grouped RMS norm), no FFN after it;
- grouped-query attention without positional encoding (NoPE), scores times 1/sqrt(head_dim), no FFN after it;
- an MLP, down(relu(up(x))^2), not gated, with optional biases (the C plan's mixer-less "ffn" block).

Which block is which: `nemotron_h.attention.head_count_kv` and `nemotron_h.feed_forward_length`, one value per
block (llama.cpp: recurrent where both are 0, attention where only feed_forward_length is 0, else MLP), checked
against each block's tensors. The converter (GraniteHybridModel's) permutes attention's Q and K rows for RoPE;
without RoPE the product is the same. The mixture-of-experts variant (nemotron_h_moe: relu^2 experts without a
gate, a latent projection) is not supported.
"""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import MAX_HEAD_DIM, MAX_LAYERS, Architecture, ModelConfig
from oxillama.models.mamba2 import Mamba2


class NemotronH(Mamba2):
    arch_names = ("nemotron_h",)
    rope_mode = "none"

    def per_block(self, key: str, n_layer: int) -> list[int]:
        """`<arch>.<key>` as one integer >= 0 per block (a scalar: the same for every block)."""
        raw = self.hp(key, required=True)
        values = np.atleast_1d(np.asarray(raw))
        if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer) or values.min() < 0:
            raise ModelError(f"{self.arch}.{key} must hold integers >= 0, got {raw!r:.80}")
        if len(values) == 1:
            values = np.repeat(values, n_layer)
        if len(values) != n_layer:
            raise ModelError(f"{self.arch}.{key} has {len(values)} values; block_count is {n_layer}")
        return [int(v) for v in values]

    def read_config(self) -> ModelConfig:
        a = self.arch
        emb = self.tensor("token_embd.weight")
        if len(emb.shape) != 2 or min(emb.shape) < 1:
            raise ModelError(f"token_embd.weight has shape {emb.shape}; expected (n_vocab, n_embd)")
        n_vocab, n_embd = (int(d) for d in emb.shape)
        n_layer = self.hp_int("block_count", required=True, lo=1, hi=MAX_LAYERS)
        if self.hp("expert_count") is not None:
            raise ModelError(f"{a}.expert_count: the mixture-of-experts Nemotron-H (nemotron_h_moe) is not supported")
        kv = self.per_block("attention.head_count_kv", n_layer)
        ff = self.per_block("feed_forward_length", n_layer)
        kinds = []
        for il, (h, f) in enumerate(zip(kv, ff)):
            kind = "mamba2" if h == 0 and f == 0 else "attention" if f == 0 else "ffn"
            if h and f:
                raise ModelError(f"{a}.attention.head_count_kv[{il}] = {h} and {a}.feed_forward_length[{il}] = {f}: "
                                 f"a block is attention (KV heads) or an MLP (a width), not both")
            p = f"blk.{il}."
            found = ("ssm_in" if self.has(p + "ssm_in.weight") else "attn_q" if self.has(p + "attn_q.weight")
                     else "ffn_up" if self.has(p + "ffn_up.weight") else "no mixer")
            want = {"mamba2": "ssm_in", "attention": "attn_q", "ffn": "ffn_up"}[kind]
            if found != want:
                raise ModelError(f"{a}.attention.head_count_kv[{il}] = {h} and {a}.feed_forward_length[{il}] = {f} "
                                 f"make block {il} {kind}, but it has {found}")
            kinds.append(kind)
        counts = {h for h in kv if h}
        if len(counts) > 1:
            raise ModelError(f"{a}.attention.head_count_kv: the attention blocks' KV head counts differ "
                             f"({sorted(counts)}); the KV cache has one layout")
        n_head_kv = counts.pop() if counts else 0
        n_head = self.hp_int("attention.head_count", 1, lo=1, hi=n_embd) if n_head_kv else 1
        head_dim = self.hp_int("attention.key_length", n_embd // n_head, lo=1, hi=MAX_HEAD_DIM)
        if n_head_kv and n_head % n_head_kv:
            raise ModelError(f"{a}.attention.head_count {n_head} is not a multiple of {a}.attention.head_count_kv "
                             f"{n_head_kv}")
        eps_key = ("attention.layer_norm_rms_epsilon" if self.hp("attention.layer_norm_rms_epsilon") is not None
                   else "attention.layer_norm_epsilon")
        ssm = self.read_ssm(n_embd, kinds.index("mamba2")) if "mamba2" in kinds else None
        for il, kind in enumerate(kinds):
            if kind == "attention":
                for name, rows in (("attn_q", n_head * head_dim), ("attn_k", n_head_kv * head_dim)):
                    t = self.tensor(f"blk.{il}.{name}.weight")
                    if t.shape != (rows, n_embd):
                        raise ModelError(f"blk.{il}.{name}.weight has shape {t.shape}; {a}.attention.head_count "
                                         f"{n_head}, head_count_kv {n_head_kv} and key_length {head_dim} give "
                                         f"({rows}, {n_embd})")
            elif kind == "ffn" and self.tensor(f"blk.{il}.ffn_up.weight").shape != (ff[il], n_embd):
                raise ModelError(f"blk.{il}.ffn_up.weight has shape {self.tensor(f'blk.{il}.ffn_up.weight').shape}; "
                                 f"{a}.feed_forward_length[{il}] = {ff[il]} gives ({ff[il]}, {n_embd})")
        return ModelConfig(
            arch=a, n_vocab=n_vocab, n_embd=self.hp_int("embedding_length", n_embd, lo=n_embd, hi=n_embd),
            n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv or 1, head_dim=head_dim, n_ff=max(ff),
            n_ctx_train=self.hp_int("context_length", 2048, lo=1),
            norm_eps=self.hp_float(eps_key, 1e-5, lo=0.0, hi=1.0), rope_base=10000.0, n_rot=0,
            extra={"ssm": ssm, "kinds": kinds, "n_ff": ff})

    def layer(self, il: int) -> dict:
        c, p = self.config, f"blk.{il}."
        kind = c.extra["kinds"][il]
        if kind == "mamba2":
            return self.mamba2_layer(il, c.extra["ssm"])
        norm = self.vector(p + "attn_norm.weight", optional=False)
        if kind == "ffn":
            return {"kind": "ffn", "ffn_norm": norm, "act": "relu_sqr", "n_ff": c.extra["n_ff"][il],
                    "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight"),
                    "b_up": self.vector(p + "ffn_up.bias"), "b_down": self.vector(p + "ffn_down.bias")}
        bq, bk, bv = self.qkv_biases(il)
        return {"kind": "attention", "no_ffn": True, "n_head": c.n_head, "n_head_kv": c.n_head_kv,
                "head_dim": c.head_dim, "attn_norm": norm, "wq": self.weight(p + "attn_q.weight"),
                "wk": self.weight(p + "attn_k.weight"), "wv": self.weight(p + "attn_v.weight"),
                "wo": self.weight(p + "attn_output.weight"), "bq": bq, "bk": bk, "bv": bv,
                "bo": self.vector(p + "attn_output.bias"), "attn_scale": 1.0 / math.sqrt(c.head_dim),
                "sliding_window": 0, "rope": {"mode": "none"}}

    def build(self) -> dict:
        spec = Architecture.build(self)
        spec["n_head_kv"], spec["head_dim"] = self.config.n_head_kv, self.config.head_dim
        return spec
