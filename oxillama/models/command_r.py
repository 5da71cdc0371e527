"""Command-R (Cohere): LayerNorm without bias, attention and FFN in parallel from the same normed
input, RoPE on adjacent pairs, tied embeddings and a logit scale."""
from oxillama.models.base import Architecture


class CommandR(Architecture):
    arch_names = ("command-r",)
    norm_type = "layer"
    parallel_residual = True
    norm_eps_key = "attention.layer_norm_epsilon"

    def logit_scale(self) -> float:
        return self.hp_float("logit_scale", 1.0)
