"""LFM2-MoE (Liquid AI's LFM2-8B-A1B, LFM2-24B-A2B): LFM2's blocks (lfm2.py: gated short convolutions and GQA
attention, the kinds given by head_count_kv), the first `leading_dense_block_count` with LFM2's dense SwiGLU FFN,
every later one with a mixture of experts instead:

    p = sigmoid(ffn_gate_inp . xn)                        (n_expert)
    chosen = top-k of p + exp_probs_b                     the expert bias moves the choice only
    w = p[chosen] / sum(p[chosen])                        renormalised, unbiased
    ffn(xn) = sum over chosen of w_e * down_e(silu(gate_e(xn)) * up_e(xn))

as llama.cpp's lfm2moe (and transformers' Lfm2MoeSparseMoeBlock) compute it. No shared expert.
"""
from __future__ import annotations

from oxillama.errors import ModelError
from oxillama.models.lfm2 import Lfm2


class Lfm2Moe(Lfm2):
    arch_names = ("lfm2moe",)
    expert_gating = "sigmoid"
    expert_norm_topk = True

    def n_dense(self) -> int:
        n_layer = self.hp_int("block_count", required=True, lo=1)
        return self.hp_int("leading_dense_block_count", 0, lo=0, hi=n_layer - 1)

    def first_moe_block(self) -> int:
        return self.n_dense()

    def read_extra(self) -> dict:
        extra = super().read_extra()
        if self.hp("expert_count") is None:
            raise ModelError(f"{self.arch} model is missing metadata key '{self.arch}.expert_count'")
        n_dense = self.n_dense()
        for il in range(self.hp_int("block_count")):
            p, dense = f"blk.{il}.", il < n_dense
            if dense != self.has(p + "ffn_up.weight") or dense == self.has(p + "ffn_up_exps.weight"):
                raise ModelError(f"{self.arch}.leading_dense_block_count = {n_dense} makes block {il} "
                                 f"{'dense' if dense else 'a mixture of experts'}, but it has "
                                 f"{'ffn_up_exps' if self.has(p + 'ffn_up_exps.weight') else 'ffn_up'}")
        extra["n_dense"] = n_dense
        return extra

    def ffn(self, il: int) -> dict:
        return self.moe_ffn(il)

    def moe_ffn(self, il: int) -> dict:
        """Block il's FFN, conv or attention block alike: LFM2's dense SwiGLU in the leading dense blocks, else
        the mixture with its expert bias (no shared expert)."""
        if il < self.config.extra["n_dense"]:
            return {"n_expert": 0, **Lfm2.ffn(self, il)}
        return {**super().moe_ffn(il), "w_gate": None, "w_up": None, "w_down": None,
                "sel_bias": self.vector(f"blk.{il}.exp_probs_b.bias", optional=False)}
