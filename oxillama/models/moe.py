"""Sparse mixture-of-experts families. The MoE FFN itself is one variant in base.py (Architecture.moe_ffn and
the Experts config); a family states its block and its router's defaults:

- qwen3moe (Qwen3-30B-A3B ...): the Qwen3 block; softmax, top-k renormalised.
- qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): the Qwen2 block; softmax, top-k as is, plus a shared expert whose
  output is gated by sigmoid(ffn_gate_inp_shexp . x).
- olmoe (OLMoE-1B-7B): NeoX RoPE, Q and K RMS-normed over all heads at once; softmax, top-k as is.
- llama with expert tensors (Mixtral) is the Llama family with Llama.expert_norm_topk.
- phimoe (Phi-3.5-MoE): LayerNorms with biases (also the final one), biases on the output projection and the
  logits, RoPE over halves; the sparsemixer router (top-2, each weight a softmax over the logits within 2%
  of the chosen one), as transformers' PhimoeSparseMoeBlock in eval mode. llama.cpp runs these files with RMS
  norms and a softmax top-2 router instead, so its logits differ from transformers' and ours.
  Phi-3.5-MoE's LongRoPE scaling is read as phi3's (Architecture.long_rope / rope()).
- gpt-oss: oxillama/models/gpt_oss.py.
"""
from oxillama.models.base import Architecture
from oxillama.models.qwen2 import Qwen2
from oxillama.models.qwen3 import Qwen3


class Qwen3Moe(Qwen3):
    arch_names = ("qwen3moe",)
    expert_norm_topk = True


class Qwen2Moe(Qwen2):
    arch_names = ("qwen2moe",)
    shared_expert_gate = True


class PhiMoe(Architecture):
    arch_names = ("phimoe",)
    norm_type = "layer"
    rope_mode = "neox"
    expert_gating = "sparsemixer"
    router_eps = 0.01    # Phi-3.5-MoE's router_jitter_noise (GGUF has no key for it)


class OLMoE(Architecture):
    arch_names = ("olmoe",)
    rope_mode = "neox"
    qk_norm_full = True
