"""Llama 2/3/3.x, SmolLM, TinyLlama, Mistral and other llama-style files.

The reference block: RMSNorm, RoPE on adjacent pairs (the GGUF converter permutes Q/K for it),
grouped-query attention, SwiGLU. Llama 3's RoPE scaling arrives as the `rope_freqs` tensor.
"""
from oxillama.models.base import Architecture


class Llama(Architecture):
    arch_names = ("llama", "mistral")
