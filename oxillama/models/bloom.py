"""BLOOM: no positional embedding but ALiBi (a per-head linear penalty on distance added to the attention
scores; slopes from 8 / n_head as llama.cpp's max_alibi_bias 8), a LayerNorm of the embeddings, LayerNorm with
bias, a fused QKV with bias, an ungated GELU (tanh) MLP with biases, tied output embeddings."""
import math

import numpy as np

from oxillama.models.base import Architecture

MAX_ALIBI_BIAS = 8.0


def alibi_slopes(n_head: int, max_bias: float = MAX_ALIBI_BIAS) -> np.ndarray:
    """Head h's slope: m0^(h+1) for the first 2^floor(log2 n_head) heads, then m1^(1, 3, 5, ...), as ggml's
    soft_max and transformers' build_alibi_tensor compute them."""
    n_pow2 = 2 ** math.floor(math.log2(n_head))
    m0 = 2.0 ** (-max_bias / n_pow2)
    m1 = 2.0 ** (-max_bias / 2.0 / n_pow2)
    slopes = [m0 ** (h + 1) if h < n_pow2 else m1 ** (2 * (h - n_pow2) + 1) for h in range(n_head)]
    return np.array(slopes, dtype=np.float32)


class Bloom(Architecture):
    arch_names = ("bloom",)
    norm_type = "layer"
    act = "gelu_tanh"
    rope_mode = "none"
    gated_ffn = False
    norm_eps_key = "attention.layer_norm_epsilon"

    def rope(self, il: int) -> dict:
        return {"mode": "none"}

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        d["alibi_slopes"] = alibi_slopes(self.config.n_head)
        return d

    def build(self) -> dict:
        spec = super().build()
        spec["embd_norm"] = self.vector("token_embd_norm.weight", optional=False)
        return spec
