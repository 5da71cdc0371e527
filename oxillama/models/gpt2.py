"""GPT-2: learned absolute position embeddings added to the token embeddings (positions up to context_length),
no RoPE, LayerNorm with bias, a fused QKV with bias, an ungated GELU (tanh) MLP with biases, tied output."""
from oxillama.models.base import Architecture


class GPT2(Architecture):
    arch_names = ("gpt2",)
    norm_type = "layer"
    act = "gelu_tanh"
    rope_mode = "none"
    gated_ffn = False
    norm_eps_key = "attention.layer_norm_epsilon"

    def read_extra(self) -> dict:
        pos = self.tensor("position_embd.weight")
        return {"learned_positions": int(pos.shape[0])}

    def rope(self, il: int) -> dict:
        return {"mode": "none"}

    def build(self) -> dict:
        spec = super().build()
        if spec["pos_embd"] is None:
            spec["pos_embd"] = self.weight("position_embd.weight")   # the error names the tensor
        return spec
