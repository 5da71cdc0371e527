"""Mamba-2 (llama.cpp's `mamba2`): a stack of selective state-space mixers, no attention and no FFN.

Each block: x += ssm_out(gated_norm(scan(conv(ssm_in(rms_norm(x))))))   (csrc/layers/ssm.h has the kernels and
the order they sum in). The GGUF layout is llama.cpp's (convert_hf_to_gguf.py, Mamba2Model):

    mamba2.ssm.conv_kernel      d_conv      blk.N.ssm_conv1d.weight  (conv_dim, d_conv), .bias (conv_dim)
    mamba2.ssm.inner_size       d_inner     blk.N.ssm_out.weight     (n_embd, d_inner)
    mamba2.ssm.state_size       d_state     conv_dim = d_inner + 2 n_group d_state
    mamba2.ssm.group_count      n_group     blk.N.ssm_norm.weight    (n_group, d_inner / n_group)
    mamba2.ssm.time_step_rank   n_head      blk.N.ssm_a, ssm_d       (n_head, 1); blk.N.ssm_dt.bias (n_head)
                                            blk.N.ssm_in.weight      (2 d_inner + 2 n_group d_state + n_head, n_embd)

ssm_a holds A = -exp(A_log) already. A sequence's state is a fixed size whatever its length: per layer a conv
state (d_conv - 1, conv_dim) and an ssm state (n_head, d_state, head_dim), one slot of the recurrent-state pool
(oxillama/runtime/recurrent_state.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import MAX_LAYERS, Architecture, ModelConfig

# attention-free models still get a (tiny, unused) KV cache of this layout: one KV head of 32 values, which every
# KV type (q8_0 included) can hold
TOKEN_KV_HEADS, TOKEN_KV_HEAD_DIM = 1, 32
MAX_SSM_SIZE = 1 << 20


@dataclass(frozen=True)
class SsmConfig:
    """A Mamba-2 mixer's sizes (the `<arch>.ssm.*` metadata)."""
    d_conv: int
    d_inner: int
    d_state: int
    n_group: int
    n_head: int

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_group * self.d_state

    @property
    def d_in_proj(self) -> int:
        return 2 * self.d_inner + 2 * self.n_group * self.d_state + self.n_head

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.n_head


class Mamba2(Architecture):
    arch_names = ("mamba2",)

    def read_config(self) -> ModelConfig:
        emb = self.tensor("token_embd.weight")
        if len(emb.shape) != 2 or min(emb.shape) < 1:
            raise ModelError(f"token_embd.weight has shape {emb.shape}; expected (n_vocab, n_embd)")
        n_vocab, n_embd = (int(d) for d in emb.shape)
        n_embd = self.hp_int("embedding_length", n_embd, lo=1)
        if n_embd != emb.shape[1]:
            raise ModelError(f"{self.arch}.embedding_length = {n_embd} but token_embd.weight has {emb.shape[1]} "
                             f"columns")
        eps_key = "attention.layer_norm_rms_epsilon"
        config = ModelConfig(
            arch=self.arch, n_vocab=n_vocab, n_embd=n_embd,
            n_layer=self.hp_int("block_count", required=True, lo=1, hi=MAX_LAYERS),
            n_head=TOKEN_KV_HEADS, n_head_kv=TOKEN_KV_HEADS, head_dim=TOKEN_KV_HEAD_DIM, n_ff=0,
            n_ctx_train=self.hp_int("context_length", 2048, lo=1),
            norm_eps=self.hp_float(eps_key, 1e-5, lo=0.0, hi=1.0), rope_base=10000.0, n_rot=0,
            extra={"ssm": self.read_ssm(n_embd)})
        return config

    def read_ssm(self, n_embd: int, il: int = 0) -> SsmConfig:
        """The `<arch>.ssm.*` sizes, each checked against block il's tensors (ModelError naming the key)."""
        a = self.arch
        s = SsmConfig(d_conv=self.hp_int("ssm.conv_kernel", required=True, lo=1, hi=64),
                      d_inner=self.hp_int("ssm.inner_size", required=True, lo=1, hi=MAX_SSM_SIZE),
                      d_state=self.hp_int("ssm.state_size", required=True, lo=1, hi=MAX_SSM_SIZE),
                      n_group=self.hp_int("ssm.group_count", 1, lo=1, hi=MAX_SSM_SIZE),
                      n_head=self.hp_int("ssm.time_step_rank", required=True, lo=1, hi=MAX_SSM_SIZE))
        p = f"blk.{il}."
        if s.d_inner % s.n_head:
            raise ModelError(f"{a}.ssm.inner_size {s.d_inner} is not a multiple of {a}.ssm.time_step_rank (the head "
                             f"count) {s.n_head}")
        if s.n_head % s.n_group:
            raise ModelError(f"{a}.ssm.time_step_rank (the head count) {s.n_head} is not a multiple of "
                             f"{a}.ssm.group_count {s.n_group}")
        out = self.tensor(p + "ssm_out.weight")
        if out.shape != (n_embd, s.d_inner):
            raise ModelError(f"{p}ssm_out.weight has shape {out.shape}; {a}.ssm.inner_size {s.d_inner} and n_embd "
                             f"{n_embd} give ({n_embd}, {s.d_inner})")
        a_t = self.tensor(p + "ssm_a")
        if int(np.prod(a_t.shape)) != s.n_head:
            raise ModelError(f"{p}ssm_a has shape {a_t.shape}; {a}.ssm.time_step_rank gives {s.n_head} heads")
        conv = self.tensor(p + "ssm_conv1d.weight")
        if len(conv.shape) != 2 or conv.shape[1] != s.d_conv:
            raise ModelError(f"{p}ssm_conv1d.weight has shape {conv.shape}; {a}.ssm.conv_kernel is {s.d_conv}")
        norm = self.tensors.get(p + "ssm_norm.weight")
        # (n_group, d_inner / n_group); a single group's may be stored 1-D
        if norm is not None and (int(np.prod(norm.shape)) != s.d_inner or len(norm.shape) > 2
                                 or (len(norm.shape) == 2 and norm.shape[0] != s.n_group)
                                 or (len(norm.shape) == 1 and s.n_group != 1)):
            raise ModelError(f"{p}ssm_norm.weight has shape {norm.shape}; {a}.ssm.group_count {s.n_group} gives "
                             f"({s.n_group}, {s.d_inner // s.n_group})")
        if conv.shape[0] != s.conv_dim:
            raise ModelError(f"{p}ssm_conv1d.weight has {conv.shape[0]} channels; {a}.ssm.inner_size {s.d_inner} + "
                             f"2 x {a}.ssm.group_count {s.n_group} x {a}.ssm.state_size {s.d_state} = {s.conv_dim}")
        w_in = self.tensor(p + "ssm_in.weight")
        if w_in.shape != (s.d_in_proj, n_embd):
            raise ModelError(f"{p}ssm_in.weight has shape {w_in.shape}; the {a}.ssm.* sizes give ({s.d_in_proj}, "
                             f"{n_embd})")
        return s

    def validate(self, c: ModelConfig) -> None:
        pass

    def mamba2_layer(self, il: int, s: SsmConfig) -> dict:
        """Block il's Mamba-2 mixer as the plan describes it."""
        p = f"blk.{il}."
        conv = self.vector(p + "ssm_conv1d.weight", optional=False)
        if conv.size != s.conv_dim * s.d_conv:
            raise ModelError(f"{p}ssm_conv1d.weight has {conv.size} values; expected {s.conv_dim} x {s.d_conv}")
        return {
            "kind": "mamba2", "attn_norm": self.vector(p + "attn_norm.weight", optional=False),
            "ssm_in": self.weight(p + "ssm_in.weight"), "ssm_out": self.weight(p + "ssm_out.weight"),
            "ssm_conv1d": conv, "ssm_conv1d_b": self.vector(p + "ssm_conv1d.bias"),
            "ssm_a": self.vector(p + "ssm_a", optional=False), "ssm_d": self.vector(p + "ssm_d", optional=False),
            "ssm_dt_b": self.vector(p + "ssm_dt.bias", optional=False), "ssm_norm": self.vector(p + "ssm_norm.weight"),
            "ssm_d_conv": s.d_conv, "ssm_d_inner": s.d_inner, "ssm_d_state": s.d_state, "ssm_n_group": s.n_group,
            "ssm_n_head": s.n_head,
        }

    def layer(self, il: int) -> dict:
        return self.mamba2_layer(il, self.config.extra["ssm"])

    def build(self) -> dict:
        spec = super().build()
        spec["n_head_kv"], spec["head_dim"] = TOKEN_KV_HEADS, TOKEN_KV_HEAD_DIM
        return spec
