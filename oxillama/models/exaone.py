"""EXAONE 3.0 / 3.5: the llama block with NeoX RoPE (llama.cpp keeps HF's Q/K order for it); Llama 3 RoPE
scaling arrives as the rope_freqs tensor."""
from oxillama.models.base import Architecture


class Exaone(Architecture):
    arch_names = ("exaone",)
    rope_mode = "neox"
