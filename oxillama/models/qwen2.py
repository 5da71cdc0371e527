"""Qwen2 / Qwen2.5: the llama block with biases on Q, K, V and RoPE over halves (NeoX)."""
from oxillama.models.base import Architecture


class Qwen2(Architecture):
    arch_names = ("qwen2",)
    rope_mode = "neox"
