"""Gemma, Gemma 2 and Gemma 3.

Common to all three: embeddings scaled by sqrt(n_embd), GELU(tanh)-gated FFN, RoPE over halves,
tied output embeddings. (The GGUF converter already stores RMSNorm weights as 1 + w.)
Gemma 2 adds post-attention/post-FFN norms, attention and final logit soft-capping and sliding
window attention on every other layer. Gemma 3 drops soft-capping, adds Q/K norms, and has five
local (sliding window, RoPE base 10k) layers for every global one.
"""
import math

from oxillama.models.base import MAX_LAYERS, Architecture


class Gemma(Architecture):
    arch_names = ("gemma",)
    act = "gelu_tanh"
    rope_mode = "neox"

    def embd_scale(self) -> float:
        return math.sqrt(self.config.n_embd)

    def attn_scale(self, il: int) -> float:
        scale = self.hp_float("attention.scale", 0.0, lo=0.0)
        return scale if scale else 1.0 / math.sqrt(self.config.head_dim)


class Gemma2(Gemma):
    arch_names = ("gemma2",)
    swa_pattern = 2    # layer il is local unless il % pattern == pattern - 1

    def is_local(self, il: int) -> bool:
        n = self.hp_int("attention.sliding_window_pattern", self.swa_pattern, lo=0, hi=MAX_LAYERS) or self.swa_pattern
        return il % n < n - 1

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 4096) if self.is_local(il) else 0

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        d["attn_softcap"] = self.hp_float("attn_logit_softcapping", 0.0, lo=0.0)
        return d

    def final_softcap(self) -> float:
        return self.hp_float("final_logit_softcapping", 0.0, lo=0.0)


class Gemma3(Gemma2):
    arch_names = ("gemma3",)
    swa_pattern = 6
    rope_base_local = 10000.0

    def layer(self, il: int) -> dict:
        d = Gemma.layer(self, il)   # no soft-capping in Gemma 3
        return d

    def final_softcap(self) -> float:
        return 0.0

    def rope(self, il: int) -> dict:
        spec = super().rope(il)
        if self.is_local(il):   # local layers: their own base, no scaling
            spec = {"mode": self.rope_mode, "base": self.hp_float("rope.freq_base_swa", self.rope_base_local, lo=0.0, lo_open=True),
                    "n_rot": self.config.n_rot}
        return spec
