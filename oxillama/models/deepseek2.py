"""DeepSeek-V2 / V3 (llama.cpp's `deepseek2`: DeepSeek-V2-Lite, V2, V2.5, V3, Kimi-K2 and their kin): multi-head
latent attention (csrc/layers/mla.h) and a mixture of experts with shared experts after a few dense blocks.

Attention, per token: q = attn_q(xn), or attn_q_b(rms_norm(attn_q_a(xn)) * attn_q_a_norm) where the file has a
q_lora_rank, per head [nope | pe]; [c | k_pe] = attn_kv_a_mqa(xn), c RMS-normed (attn_kv_a_norm); q_pe and k_pe
rotated on adjacent pairs. The KV cache keeps only [c | k_pe] (kv_lora_rank + rope dims per token and layer, one
"KV head" for every query head): the query is absorbed through attn_k_b (per head (kv_lora_rank, nope)), the
attention runs over the latent rows, and attn_v_b (per head (v_dim, kv_lora_rank)) turns each head's latent output
into its value before attn_output. Files from before llama.cpp split attn_kv_b into attn_k_b / attn_v_b (the
legacy layout, keys key_length = nope + rope, value_length = v_dim and no *_mla keys) are split here at load time,
into float32 copies of those two small matrices.

Scores are scaled by mscale^2 / sqrt(nope + rope), mscale = 1 without YaRN; with YaRN (factor s, llama.cpp's
rope.scaling.yarn_log_multiplier = 0.1 mscale_all_dim) as llama.cpp computes it: mscale = 0.1 mscale_all_dim ln s + 1,
and RoPE's own magnitude factor cancels to 1 (DeepSeek's mscale = mscale_all_dim; the converter refuses others).

FFN: the first leading_dense_block_count blocks are dense; the others a mixture (softmax router unless
expert_gating_func says sigmoid, V3's selection bias exp_probs_b and group-limited choice over expert_group_count
groups: V3's sigmoid router ranks a group by its two best scores, V2's softmax router by its best, as DeepSeek's
code does; llama.cpp ranks V2's groups by the two best too; expert_weights_norm, expert_weights_scale) plus expert_shared_count shared experts run as one FFN.
Multi-token-prediction blocks after the trunk (nextn_predict_layers) are not run.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import Architecture, ModelConfig, yarn_corr_dims
from oxillama.quant import dequantize

MAX_RANK = 1 << 16


class DeepSeek2(Architecture):
    arch_names = ("deepseek2",)
    rope_mode = "norm"
    expert_gating = "softmax"    # llama.cpp's default for V2 files without expert_gating_func

    # ---- hyper-parameters ----

    def read_extra(self) -> dict:
        """The latent attention's sizes, each checked against the first block's tensors (ModelError naming the
        key that disagrees)."""
        a, p = self.arch, "blk.0."
        n_embd = self.tensor("token_embd.weight").shape[1]
        n_head = self.hp_int("attention.head_count", required=True, lo=1, hi=MAX_RANK)
        r = self.hp_int("attention.kv_lora_rank", required=True, lo=1, hi=MAX_RANK)
        qr = self.hp_int("attention.q_lora_rank", 0, lo=0, hi=MAX_RANK)
        dr = self.hp_int("rope.dimension_count", required=True, lo=2, hi=MAX_RANK)
        if dr % 2:
            raise ModelError(f"{a}.rope.dimension_count = {dr} must be even")
        if self.hp("attention.key_length_mla") is not None:   # current llama.cpp: MQA over the latent
            k_key, v_key = f"{a}.attention.key_length_mla", f"{a}.attention.value_length_mla"
            k_mla = self.hp_int("attention.key_length_mla", lo=1, hi=MAX_RANK)
            dv = self.hp_int("attention.value_length_mla", required=True, lo=1, hi=MAX_RANK)
            for key, want in (("attention.key_length", r + dr), ("attention.value_length", r)):
                got = self.hp_int(key, want, lo=1)
                if got != want:
                    raise ModelError(f"{a}.{key} = {got}, but the latent cache row is attention.kv_lora_rank {r}"
                                     f"{' + rope.dimension_count ' + str(dr) if key.endswith('key_length') else ''}"
                                     f" = {want}")
            legacy = False
        else:   # legacy files: the per-head sizes in key_length / value_length, attn_kv_b unsplit
            k_key, v_key = f"{a}.attention.key_length", f"{a}.attention.value_length"
            k_mla = self.hp_int("attention.key_length", required=True, lo=1, hi=MAX_RANK)
            dv = self.hp_int("attention.value_length", required=True, lo=1, hi=MAX_RANK)
            legacy = not self.has(p + "attn_k_b.weight")
        dn = k_mla - dr
        if dn < 1:
            raise ModelError(f"{k_key} {k_mla} must exceed {a}.rope.dimension_count {dr}")
        checks = [  # (tensor, expected shape, what gives it)
            ("attn_kv_a_mqa.weight", (r + dr, n_embd), f"{a}.attention.kv_lora_rank {r} + rope.dimension_count {dr}"),
            ("attn_kv_a_norm.weight", (r,), f"{a}.attention.kv_lora_rank {r}"),
            ("attn_output.weight", (n_embd, n_head * dv), f"{a}.attention.head_count {n_head} x {v_key} {dv}"),
        ]
        if qr:
            checks += [("attn_q_a.weight", (qr, n_embd), f"{a}.attention.q_lora_rank {qr}"),
                       ("attn_q_a_norm.weight", (qr,), f"{a}.attention.q_lora_rank {qr}"),
                       ("attn_q_b.weight", (n_head * k_mla, qr), f"{a}.attention.head_count {n_head} x {k_key} "
                                                                f"{k_mla}, q_lora_rank {qr}")]
        else:
            if self.has(p + "attn_q_a.weight"):
                raise ModelError(f"{p}attn_q_a.weight is present but {a}.attention.q_lora_rank is missing or 0")
            checks.append(("attn_q.weight", (n_head * k_mla, n_embd), f"{a}.attention.head_count {n_head} x "
                                                                     f"{k_key} {k_mla}"))
        if legacy:
            checks.append(("attn_kv_b.weight", (n_head * (dn + dv), r), f"{a}.attention.head_count {n_head} x "
                                                                       f"({k_key} {k_mla} - rope.dimension_count "
                                                                       f"{dr} + {v_key} {dv}), kv_lora_rank {r}"))
        else:
            checks += [("attn_k_b.weight", (n_head, r, dn), f"{a}.attention.head_count {n_head}, kv_lora_rank {r}, "
                                                            f"{k_key} {k_mla} - rope.dimension_count {dr}"),
                       ("attn_v_b.weight", (n_head, dv, r), f"{a}.attention.head_count {n_head}, {v_key} {dv}, "
                                                            f"kv_lora_rank {r}")]
        for name, want, why in checks:
            t = self.tensor(p + name)
            if tuple(t.shape) != want:
                raise ModelError(f"{p}{name} has shape {tuple(t.shape)}; {why} give {want}")
        n_layer = self.hp_int("block_count", required=True, lo=1)
        n_dense = self.hp_int("leading_dense_block_count", 0, lo=0, hi=n_layer)
        return {"mla": {"n_head": n_head, "r": r, "q_lora_rank": qr, "d_nope": dn, "d_rope": dr, "d_v": dv,
                        "legacy_kv_b": legacy}, "n_dense": n_dense}

    def read_config(self) -> ModelConfig:
        c = super().read_config()
        m = c.extra["mla"]
        # the cache's layout: one KV head of the latent row (llama.cpp writes head_count_kv 1 too)
        return dataclasses.replace(c, n_head_kv=1, head_dim=m["r"] + m["d_rope"], n_rot=m["d_rope"])

    def run_layers(self) -> int:
        """The trunk: not the multi-token-prediction blocks block_count counts after it (GLM-4.7's; llama.cpp's
        n_layer_nextn), a draft head."""
        return self.config.n_layer - self.hp_int("nextn_predict_layers", 0, lo=0, hi=self.config.n_layer - 1)

    def first_moe_block(self) -> int:
        return self.hp_int("leading_dense_block_count", 0, lo=0)

    def validate(self, c: ModelConfig) -> None:
        if c.n_embd != self.tensor("token_embd.weight").shape[1]:
            raise ModelError(f"{self.arch}.embedding_length = {c.n_embd} but token_embd.weight has "
                             f"{self.tensor('token_embd.weight').shape[1]} columns")
        if c.rope_scaling.kind == "yarn" and c.rope_base <= 1.0:
            raise ModelError(f"YaRN needs rope.freq_base > 1, got {c.rope_base}")
        n_dense = c.extra["n_dense"]
        if n_dense < c.n_layer and c.experts is None:
            raise ModelError(f"{self.arch}.leading_dense_block_count = {n_dense} of {c.n_layer} blocks, but the "
                             f"model has no experts ({self.arch}.expert_count)")
        if n_dense > 0:
            t = self.tensor("blk.0.ffn_down.weight")
            if tuple(t.shape) != (c.n_embd, c.n_ff):
                raise ModelError(f"blk.0.ffn_down.weight has shape {tuple(t.shape)}; feed_forward_length {c.n_ff} "
                                 f"gives ({c.n_embd}, {c.n_ff})")

    # ---- the block description ----

    def _yarn_mscale(self) -> tuple[float, float]:
        """(RoPE's magnitude factor, the scores' mscale) as llama.cpp's deepseek2 computes them."""
        sc = self.config.rope_scaling
        if sc.kind != "yarn" or sc.factor <= 1.0:
            return sc.attn_factor if sc.kind == "yarn" else 1.0, 1.0
        f = sc.factor
        log_mul = self.hp_float("rope.scaling.yarn_log_multiplier", 0.0) / 0.1   # mscale_all_dim

        def get_mscale(m: float) -> float:
            return 0.1 * m * math.log(f) + 1.0
        if log_mul != 0.0:
            factor = get_mscale(log_mul if log_mul != 1.0 else 1.0) / get_mscale(log_mul)
        else:
            factor = get_mscale(1.0)
        attn_factor = factor / (1.0 + 0.1 * math.log(f)) * sc.attn_factor
        mscale = attn_factor * (1.0 + 0.1 * math.log(f)) * (1.0 + 0.1 * log_mul * math.log(f))
        return attn_factor, mscale

    def rope(self, il: int) -> dict:
        spec = super().rope(il)
        if self.config.rope_scaling.kind == "yarn":
            spec["attn_factor"] = self._yarn_mscale()[0]
        return spec

    def attn_scale(self, il: int) -> float:
        m = self.config.extra["mla"]
        return self._yarn_mscale()[1] ** 2 / math.sqrt(m["d_nope"] + m["d_rope"])

    def _kb_vb(self, il: int):
        """(wk_b, wv_b) as (bytes, type, rows, cols) matrices: the file's (n_head, r, nope) / (n_head, v_dim, r),
        or split from a legacy attn_kv_b (n_head (nope + v_dim), r) into float32 copies."""
        m, p = self.config.extra["mla"], f"blk.{il}."
        nh, r, dn, dv = m["n_head"], m["r"], m["d_nope"], m["d_v"]
        if not m["legacy_kv_b"]:
            return self.experts_weight(p + "attn_k_b.weight", nh), self.experts_weight(p + "attn_v_b.weight", nh)
        t = self.tensor(p + "attn_kv_b.weight")
        if tuple(t.shape) != (nh * (dn + dv), r):
            raise ModelError(f"{p}attn_kv_b.weight has shape {tuple(t.shape)}; expected ({nh * (dn + dv)}, {r})")
        kv_b = dequantize(t.data, t.qtype_id, nh * (dn + dv) * r).reshape(nh, dn + dv, r)
        k_b = np.ascontiguousarray(kv_b[:, :dn].transpose(0, 2, 1), dtype=np.float32)   # (nh, r, dn)
        v_b = np.ascontiguousarray(kv_b[:, dn:], dtype=np.float32)                       # (nh, dv, r)
        return (k_b.reshape(-1).view(np.uint8), 0, nh * r, dn), (v_b.reshape(-1).view(np.uint8), 0, nh * dv, r)

    def layer(self, il: int) -> dict:
        c, m, p = self.config, self.config.extra["mla"], f"blk.{il}."
        qr = m["q_lora_rank"]
        wk_b, wv_b = self._kb_vb(il)
        d = {"kind": "mla", "n_head": m["n_head"], "n_head_kv": 1, "head_dim": m["r"] + m["d_rope"],
             "mla_kv_lora_rank": m["r"], "mla_q_lora_rank": qr, "mla_d_nope": m["d_nope"],
             "mla_d_rope": m["d_rope"], "mla_d_v": m["d_v"],
             "attn_norm": self.vector(p + "attn_norm.weight", optional=False),
             "mla_wq": None if qr else self.weight(p + "attn_q.weight"),
             "mla_wq_a": self.weight(p + "attn_q_a.weight") if qr else None,
             "mla_wq_b": self.weight(p + "attn_q_b.weight") if qr else None,
             "mla_q_a_norm": self.vector(p + "attn_q_a_norm.weight", optional=not qr),
             "mla_wkv_a": self.weight(p + "attn_kv_a_mqa.weight"),
             "mla_kv_a_norm": self.vector(p + "attn_kv_a_norm.weight", optional=False),
             "mla_wk_b": wk_b, "mla_wv_b": wv_b, "wo": self.weight(p + "attn_output.weight"),
             "attn_scale": self.attn_scale(il), "rope": self.rope(il), "act": self.act,
             "ffn_norm": self.vector(p + "ffn_norm.weight", optional=False)}
        if il < c.extra["n_dense"]:
            d.update({"n_ff": c.n_ff, "w_gate": self.weight(p + "ffn_gate.weight"),
                      "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight")})
        else:
            d.update(self.moe_ffn(il))
        return d
