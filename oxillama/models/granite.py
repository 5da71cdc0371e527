"""IBM Granite 3.x (dense): the llama block with four multipliers: embeddings times embedding_scale, each
sublayer's output times residual_scale before the residual add, attention scores times attention.scale
(instead of 1/sqrt(head_dim)), logits divided by logit_scale."""
from oxillama.models.base import Architecture


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
