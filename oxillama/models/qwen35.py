"""Qwen3.5 (qwen35: Qwen3.5-0.8B .. 27B; qwen35moe: Qwen3.5-35B-A3B ...): Qwen3-Next's block (qwen3next.py: gated
DeltaNet layers, a gated full-attention layer every few, post_attention_norm before the FFN) with a dense SwiGLU
FFN (qwen35) or Qwen3-Next's mixture with a sigmoid-gated shared expert (qwen35moe). What the files do otherwise:

- b and a come from two matrices, ssm_beta and ssm_alpha (n_v_heads rows each), not one ssm_ba;
- llama.cpp's converter reorders the value heads (of attn_qkv's v rows, attn_gate, ssm_beta, ssm_alpha, ssm_a,
  ssm_dt, the conv's v channels and ssm_out's columns) from transformers' grouped order to a tiled one, so value
  head h reads key head h % n_k_heads (the plan's dn_heads_tiled); the rows of b and a are gathered per key head
  into the [b (r) | a (r)] layout the DeltaNet reads (a copy of 2 n_v_heads rows);
- the attention's RoPE is interleaved multi-section RoPE (rope.dimension_sections); for text, every section has the
  token's position, which is NeoX RoPE over rope.dimension_count dims.
"""
from __future__ import annotations

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.qwen3next import Qwen3Next


class Qwen35(Qwen3Next):
    arch_names = ("qwen35",)
    ba_tensors = ("ssm_beta.weight", "ssm_alpha.weight")
    heads_tiled = True

    def dn_w_ba(self, il: int):
        """[b (r) | a (r)] per key head g from ssm_beta and ssm_alpha, whose row h is value head h (key head
        h % n_k): the rows of g's value heads g, g + n_k, ... (same type: their bytes; else both as float32)."""
        p, e = f"blk.{il}.", self.config.extra
        n_k, n_v = e["dn_n_k_heads"], e["dn_n_v_heads"]
        beta, alpha = self.tensor(p + "ssm_beta.weight"), self.tensor(p + "ssm_alpha.weight")
        for t in (beta, alpha):
            if len(t.shape) != 2 or t.shape[0] != n_v or t.shape[1] != self.config.n_embd:
                raise ModelError(f"{t.name} has shape {tuple(t.shape)}; {self.arch}.ssm.time_step_rank {n_v} and "
                                 f"n_embd {self.config.n_embd} give ({n_v}, {self.config.n_embd})")
        if beta.qtype_id == alpha.qtype_id:
            rows = np.concatenate([np.asarray(beta.data).reshape(n_v, -1), np.asarray(alpha.data).reshape(n_v, -1)])
            qtype = beta.qtype_id
        else:
            rows = np.concatenate([beta.numpy(), alpha.numpy()]).astype(np.float32).view(np.uint8)
            qtype = 0   # F32
        heads = np.arange(n_v).reshape(n_v // n_k, n_k).T          # (n_k, r): key head g's value heads
        order = np.concatenate([np.concatenate([heads[g], n_v + heads[g]]) for g in range(n_k)])
        return (np.ascontiguousarray(rows[order]).reshape(-1), qtype, 2 * n_v, self.config.n_embd)


class Qwen35Moe(Qwen35):
    arch_names = ("qwen35moe",)
