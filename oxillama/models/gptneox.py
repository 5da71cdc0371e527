"""GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorm with bias, a fused QKV with bias, NeoX RoPE over the first
rope.dimension_count dims of each head (rotary_pct), an ungated GELU MLP with biases, and (use_parallel_residual,
the default) x + attn(ln1(x)) + mlp(ln2(x)). The MLP's GELU is the exact (erf) one of the released configs
(hidden_act "gelu"); llama.cpp runs its tanh approximation."""
from oxillama.errors import ModelError
from oxillama.models.base import Architecture


class GPTNeoX(Architecture):
    arch_names = ("gptneox",)
    norm_type = "layer"
    act = "gelu_erf"
    rope_mode = "neox"
    gated_ffn = False
    norm_eps_key = "attention.layer_norm_epsilon"

    def __init__(self, gguf):
        par = gguf.metadata.get("gptneox.use_parallel_residual", True)
        if not isinstance(par, (bool, int)):
            raise ModelError(f"gptneox.use_parallel_residual must be a bool, got {par!r}")
        self.parallel_residual = bool(par)
        super().__init__(gguf)
