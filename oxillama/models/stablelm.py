"""StableLM (StableLM-2, StableLM-3B-4E1T): LayerNorm with bias, SwiGLU, NeoX RoPE over the first
rope.dimension_count dims of each head (partial_rotary_factor, 25% in the released models), Q/K/V biases in
StableLM-2 1.6B. StableLM-2 12B runs attention and FFN in parallel from one norm (its blocks have no ffn_norm,
as llama.cpp decides) and LayerNorms each Q and K head with that head's own weights."""
from oxillama.models.base import Architecture


class StableLM(Architecture):
    arch_names = ("stablelm",)
    norm_type = "layer"
    rope_mode = "neox"
    norm_eps_key = "attention.layer_norm_epsilon"
    qk_norm_type = "layer"

    def __init__(self, gguf):
        self.parallel_residual = "blk.0.ffn_norm.weight" not in gguf.tensors
        super().__init__(gguf)

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        d["qk_norm_head_weights"] = d["q_norm"] is not None   # (n_head, head_dim): a weight vector per head
        return d
