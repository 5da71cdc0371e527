"""OLMo 2: the llama block with its norms moved after each sublayer (x + norm(attn(x)), x + norm(ffn(x)): no
pre-norm), Q and K RMS-normed over all heads at once before NeoX RoPE."""
from oxillama.models.base import Architecture


class OLMo2(Architecture):
    arch_names = ("olmo2",)
    rope_mode = "neox"
    qk_norm_full = True
    pre_norms = False
