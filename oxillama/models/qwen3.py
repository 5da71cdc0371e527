"""Qwen3: per-head RMSNorm of Q and K before RoPE (NeoX), no QKV biases."""
from oxillama.models.base import Architecture


class Qwen3(Architecture):
    arch_names = ("qwen3",)
    rope_mode = "neox"
