"""Falcon: attention and an ungated GELU MLP in parallel, x + attn(n(x)) + mlp(n(x)); a fused QKV without
biases; NeoX RoPE; LayerNorm with bias. Falcon-7B has one K/V head (multi-query) and one norm; Falcon-40B
(new_decoder_architecture) has K/V groups and two norms: attn_norm_2 for attention, attn_norm for the MLP.
The GELU is the exact (erf) one of the released models; llama.cpp runs its tanh approximation."""
from oxillama.models.base import Architecture


class Falcon(Architecture):
    arch_names = ("falcon",)
    norm_type = "layer"
    act = "gelu_erf"
    rope_mode = "neox"
    gated_ffn = False
    parallel_residual = True
    norm_eps_key = "attention.layer_norm_epsilon"

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        p = f"blk.{il}."
        if self.has(p + "attn_norm_2.weight"):   # attention reads attn_norm_2, the MLP attn_norm
            d["ffn_norm"], d["ffn_norm_b"] = d["attn_norm"], d["attn_norm_b"]
            d["attn_norm"] = self.vector(p + "attn_norm_2.weight")
            d["attn_norm_b"] = self.vector(p + "attn_norm_2.bias")
        return d
