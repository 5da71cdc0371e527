"""Llama 2/3/3.x, SmolLM, TinyLlama, Mistral and other llama-style files.

The reference block: RMSNorm, RoPE on adjacent pairs (the GGUF converter permutes Q/K for it),
grouped-query attention, SwiGLU. Llama 3's RoPE scaling arrives as the `rope_freqs` tensor.
Mistral (converted as llama) may carry `attention.sliding_window`: every layer then attends to
that many positions, itself included, as transformers' Mistral does.
Mixtral is a llama file with expert tensors (ffn_gate_inp, ffn_*_exps): softmax router, top-k renormalised.
"""
from oxillama.models.base import Architecture


class Llama(Architecture):
    arch_names = ("llama", "mistral")
    expert_norm_topk = True   # Mixtral

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 0)
