"""gpt-oss (OpenAI's open-weight MoE, llama.cpp's `gpt-oss`): what differs from the llama block.

- attention: Q/K/V/O biases; per query head a learned sink logit (`attn_sinks`) that joins every softmax's
  denominator; every other layer (the even ones) attends to a sliding window, the odd ones to everything;
  RoPE over halves with YaRN, its blend range not truncated to whole pairs (the config's `truncate: false`);
- the FFN's input norm is stored as `post_attention_norm` (llama.cpp's attn_post_norm);
- experts: the router has a bias and takes the top-k logits, then a softmax over those; every expert's gate,
  up and down have biases; the activation is the clamped SwiGLU (up + 1) * g * sigmoid(1.702 g) with
  g = min(gate, 7) and up clamped to [-7, 7] (transformers' GptOssExperts; llama.cpp's swiglu_oai);
- the experts are stored as MXFP4 in the released checkpoints (any type with kernels works here).
"""
from oxillama.models.base import Architecture, ModelConfig
from oxillama.errors import ModelError

SWIGLU_ALPHA = 1.702    # llama.cpp's constants (transformers: config.swiglu_alpha, swiglu_limit)
SWIGLU_LIMIT = 7.0
SWA_PERIOD = 2          # layer il slides when il % 2 == 0 (llama.cpp's swa pattern 2)


class GptOss(Architecture):
    arch_names = ("gpt-oss",)
    rope_mode = "neox"
    act = "swiglu_oai"
    expert_gating = "softmax_weight"
    ffn_norm_tensor = "post_attention_norm"
    yarn_truncate = False

    def validate(self, c: ModelConfig) -> None:
        super().validate(c)
        if c.experts is None:
            raise ModelError("gpt-oss model has no experts (gpt-oss.expert_count is missing)")
        if self.hp_int("attention.sliding_window", 0, lo=0) <= 0:
            raise ModelError("gpt-oss model needs gpt-oss.attention.sliding_window > 0")

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 0) if il % SWA_PERIOD == 0 else 0

    def layer(self, il: int) -> dict:
        d = super().layer(il)
        if d["attn_sinks"] is None:
            raise ModelError(f"gpt-oss model is missing tensor 'blk.{il}.attn_sinks.weight'")
        d["act_alpha"], d["act_limit"] = SWIGLU_ALPHA, SWIGLU_LIMIT
        return d
