"""StarCoder2: LayerNorm with bias, biases on every projection, an ungated GELU(tanh) MLP, NeoX RoPE."""
from oxillama.models.base import Architecture


class StarCoder2(Architecture):
    arch_names = ("starcoder2",)
    norm_type = "layer"
    act = "gelu_tanh"
    rope_mode = "neox"
    gated_ffn = False
    norm_eps_key = "attention.layer_norm_epsilon"

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 0)
