"""Qwen3-Next (Qwen3-Next-80B-A3B): gated DeltaNet linear-attention layers with a gated full-attention layer
every few, each followed by a mixture of experts with a sigmoid-gated shared expert.

Every block is norm -> mixer -> residual -> norm (post_attention_norm) -> MoE -> residual. The mixer is
- a gated DeltaNet (layers/deltanet.h): q|k|v = attn_qkv(xn) through a causal conv (ssm.conv_kernel) + SiLU,
  q and k L2-normalised, beta = sigmoid(b), g = ssm_a * softplus(a + ssm_dt.bias) from ssm_ba(xn), the gated
  delta rule per value head over a (d_v, d_k) state, then rms_norm(o) * ssm_norm * silu(attn_gate(xn)) and
  ssm_out. Sizes: ssm.state_size = d_k, ssm.group_count = key heads, ssm.time_step_rank = value heads,
  ssm.inner_size = value heads * d_v; or
- full attention whose attn_q rows are per head [q | gate]: per-head Q/K RMS norms, NeoX RoPE over the first
  rope.dimension_count dims (partial rotary), the output times sigmoid(gate) before attn_output.
Which layer is which: `qwen3next.attention.recurrent_layers` (one bool per block) where the file has it, else
every full_attention_interval-th block (default 4) is attention, as llama.cpp reads it; the last
nextn_predict_layers blocks (multi-token prediction) are not run. The router is a softmax
over the experts, the top k renormalised. Files in the legacy layout (a fused ssm_in = in_proj_qkvz) are refused.
"""
from __future__ import annotations

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import MAX_LAYERS, Architecture

MAX_CONV_L = 64      # csrc/kernels.h OXL_CONV_MAX_L
MAX_D_K = 1024       # csrc/layers/deltanet.h OXL_DELTANET_MAX_DK


class Qwen3Next(Architecture):
    arch_names = ("qwen3next",)
    rope_mode = "neox"
    expert_norm_topk = True
    shared_expert_gate = True
    ffn_norm_tensor = "post_attention_norm"
    attn_q_rows_per_head = 2

    def read_extra(self) -> dict:
        a = self.arch
        n_layer = self.hp_int("block_count", required=True, lo=1, hi=MAX_LAYERS)
        key = f"{a}.attention.recurrent_layers"
        raw = self.gguf.metadata.get(key)
        if raw is not None:
            arr = np.asarray(raw)
            if arr.ndim != 1 or arr.shape[0] != n_layer:
                raise ModelError(f"{key} must list {n_layer} booleans (block_count), one per layer, got {arr!r:.80}")
            recurrent = [bool(v) for v in arr]
        else:
            key = f"{a}.full_attention_interval"
            interval = self.hp_int("full_attention_interval", 4, lo=1, hi=MAX_LAYERS)
            recurrent = [(il + 1) % interval != 0 for il in range(n_layer)]
        # the multi-token-prediction blocks after the trunk (llama.cpp's n_layer_nextn) are a draft head: not run
        nextn = self.hp_int("nextn_predict_layers", 0, lo=0, hi=n_layer - 1)
        kinds = tuple("deltanet" if r else "attention" for r in recurrent[:n_layer - nextn])
        for il, kind in enumerate(kinds):
            p = f"blk.{il}."
            if self.has(p + "ssm_in.weight"):
                raise ModelError(f"{p}ssm_in.weight: the legacy Qwen3-Next layout (a fused in_proj_qkvz) is not "
                                 f"supported; convert the model again with a current convert_hf_to_gguf.py")
            is_dn, is_attn = self.has(p + "attn_qkv.weight"), self.has(p + "attn_q.weight")
            if (kind == "deltanet") != is_dn or (kind == "attention") != is_attn:
                raise ModelError(f"{key} makes layer {il} {kind}, but the file has "
                                 f"{'DeltaNet' if is_dn else 'attention' if is_attn else 'no mixer'} tensors there")
        extra = {"layer_kinds": kinds}
        if "deltanet" in kinds:
            extra.update(self._read_deltanet(kinds.index("deltanet")))
        return extra

    ba_tensors = ("ssm_ba.weight",)   # b and a of the value heads, per key head [b (r) | a (r)]
    heads_tiled = False                # value head h reads key head h / r (see csrc/layers/deltanet.h)

    def dn_w_ba(self, il: int):
        return self.weight(f"blk.{il}.ssm_ba.weight")

    def run_layers(self) -> int:
        return len(self.config.extra["layer_kinds"])

    def _read_deltanet(self, il: int) -> dict:
        """The DeltaNet sizes, each checked against the first DeltaNet layer's tensors (ModelError naming the key)."""
        a, p = self.arch, f"blk.{il}."
        width = self.hp_int("ssm.conv_kernel", required=True, lo=2, hi=MAX_CONV_L)
        d_k = self.hp_int("ssm.state_size", required=True, lo=1, hi=MAX_D_K)
        n_k = self.hp_int("ssm.group_count", required=True, lo=1, hi=1 << 16)
        n_v = self.hp_int("ssm.time_step_rank", required=True, lo=1, hi=1 << 16)
        inner = self.hp_int("ssm.inner_size", required=True, lo=1)
        if n_v % n_k:
            raise ModelError(f"{a}.ssm.time_step_rank (value heads) {n_v} must be a multiple of {a}.ssm.group_count "
                             f"(key heads) {n_k}")
        if inner % n_v:
            raise ModelError(f"{a}.ssm.inner_size {inner} must be a multiple of {a}.ssm.time_step_rank {n_v}")
        d_v = inner // n_v
        n_embd = self.tensor("token_embd.weight").shape[1]
        conv_dim = 2 * n_k * d_k + inner
        k = {name: f"{a}.ssm.{name}" for name in ("conv_kernel", "state_size", "group_count", "time_step_rank",
                                                  "inner_size")}
        checks = [  # (tensor, axis, expected size, what gives it), most specific first
            ("ssm_conv1d.weight", 1, width, f"{k['conv_kernel']} {width}"),
            ("ssm_a", 0, n_v, f"{k['time_step_rank']} {n_v}"),
            ("ssm_dt.bias", 0, n_v, f"{k['time_step_rank']} {n_v}"),
            *[(name, 0, 2 * n_v // len(self.ba_tensors),
               f"{'2 x ' if len(self.ba_tensors) == 1 else ''}{k['time_step_rank']} {n_v}")
              for name in self.ba_tensors],
            ("ssm_norm.weight", 0, d_v, f"{k['inner_size']} {inner} / {k['time_step_rank']} {n_v}"),
            ("attn_gate.weight", 0, inner, f"{k['inner_size']} {inner}"),
            ("ssm_out.weight", 1, inner, f"{k['inner_size']} {inner}"),
            ("attn_qkv.weight", 0, conv_dim, f"2 x {k['group_count']} {n_k} x {k['state_size']} {d_k} + "
                                            f"{k['inner_size']} {inner}"),
            ("ssm_conv1d.weight", 0, conv_dim, f"2 x {k['group_count']} {n_k} x {k['state_size']} {d_k} + "
                                               f"{k['inner_size']} {inner}"),
        ]
        for name, axis, want, why in checks:
            t = self.tensor(p + name)
            if len(t.shape) <= axis or t.shape[axis] != want:
                raise ModelError(f"{p}{name} has shape {tuple(t.shape)}; its dimension {axis} should be {want}: {why}")
        for name in ("attn_qkv.weight", "attn_gate.weight", *self.ba_tensors):
            if self.tensor(p + name).shape[1] != n_embd:
                raise ModelError(f"{p}{name} has shape {tuple(self.tensor(p + name).shape)}; expected {n_embd} columns")
        return {"dn_L": width, "dn_d_k": d_k, "dn_n_k_heads": n_k, "dn_n_v_heads": n_v, "dn_d_v": d_v}

    def layer(self, il: int) -> dict:
        c = self.config
        if c.extra["layer_kinds"][il] == "attention":
            d = super().layer(il)
            d["attn_gate"] = True
            return d
        p, e = f"blk.{il}.", c.extra
        d = {"kind": "deltanet", "act": self.act,
             "attn_norm": self.vector(p + "attn_norm.weight", optional=False),
             "ffn_norm": self.vector(p + f"{self.ffn_norm_tensor}.weight", optional=False),
             "dn_wqkv": self.weight(p + "attn_qkv.weight"), "dn_wgate": self.weight(p + "attn_gate.weight"),
             "dn_w_ba": self.dn_w_ba(il), "dn_heads_tiled": self.heads_tiled,
             "dn_w_out": self.weight(p + "ssm_out.weight"),
             "dn_conv": self.vector(p + "ssm_conv1d.weight", optional=False),
             "dn_a": self.vector(p + "ssm_a", optional=False),
             "dn_dt_bias": self.vector(p + "ssm_dt.bias", optional=False),
             "dn_norm": self.vector(p + "ssm_norm.weight", optional=False)}
        d.update({k: e[k] for k in ("dn_L", "dn_d_k", "dn_n_k_heads", "dn_n_v_heads", "dn_d_v")})
        for name in ("dn_conv", "dn_a", "dn_dt_bias", "dn_norm"):   # every layer's, not only the first's
            want = {"dn_conv": (2 * e["dn_n_k_heads"] * e["dn_d_k"] + e["dn_n_v_heads"] * e["dn_d_v"]) * e["dn_L"],
                    "dn_a": e["dn_n_v_heads"], "dn_dt_bias": e["dn_n_v_heads"], "dn_norm": e["dn_d_v"]}[name]
            if d[name].shape[0] != want:
                raise ModelError(f"layer {il}: {name[3:]} has {d[name].shape[0]} values, the ssm.* keys give {want}")
        if c.experts is not None:
            d.update(self.moe_ffn(il))
        else:
            d.update({"n_ff": c.n_ff, "w_gate": self.weight(p + "ffn_gate.weight"),
                      "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight")})
        return d
