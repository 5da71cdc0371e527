"""Phi-3: fused QKV and fused gate|up matrices, RoPE over halves, optional sliding window."""
from oxillama.models.base import Architecture


class Phi3(Architecture):
    arch_names = ("phi3",)
    rope_mode = "neox"

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 0)
