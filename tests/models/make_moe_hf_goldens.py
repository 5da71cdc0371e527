"""Tiny random mixture-of-experts checkpoints of Hugging Face transformers and their goldens (run once; needs
torch and transformers):

    python tests/models/make_moe_hf_goldens.py             # every family
    python tests/models/make_moe_hf_goldens.py olmoe       # some of them

For each family, written to data/hf_moe/: <name>.config.json and <name>.npz (the state dict as transformers
holds it, float32: what test_moe_transformers.py converts with oxillama.convert, so the suite needs no torch),
and <name>.golden.npz: the token ids, transformers' float32 logits (eager attention) and, per MoE layer, the
router's choices (experts, best first) and their weights, taken from the router module's own output.

The routers are drawn at 3x the scale of the other matrices (as tiny_moe.py does) so that the k-th and the
(k+1)-th expert of a token are well apart; the smallest such gap in probability is saved too, so the test can
tell a tie from a wrong choice.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "hf_moe")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from make_tiny_models import N_VOCAB, SEED, randomize, tokens  # noqa: E402

COMMON = dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1, pad_token_id=0,
              tie_word_embeddings=False, rms_norm_eps=1e-6)
ROUTER_SCALE = 3.0

# name -> (transformers config class, overrides): the features each family is known by
MODELS = {
    # Qwen3-30B-A3B's router: softmax, top-k renormalised (norm_topk_prob true in its config); per-head Q/K norms
    "qwen3moe": ("Qwen3MoeConfig", dict(head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_experts=8,
                                         num_experts_per_tok=2, norm_topk_prob=True,
                                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen1.5-MoE: QKV biases, top-k weights as they are, a shared expert gated by sigmoid(w . x)
    "qwen2moe": ("Qwen2MoeConfig", dict(intermediate_size=96, moe_intermediate_size=32, num_experts=8,
                                         num_experts_per_tok=2, shared_expert_intermediate_size=64,
                                         norm_topk_prob=False)),
    # OLMoE-1B-7B: Q/K RMS norms over all heads, no GQA (as the real model and llama.cpp's olmoe), 3 of 8 experts
    "olmoe": ("OlmoeConfig", dict(num_key_value_heads=4, intermediate_size=32, num_experts=8, num_experts_per_tok=3,
                                   norm_topk_prob=False, rms_norm_eps=1e-5)),
    # Mixtral: the llama block with GQA; softmax, top-2 renormalised
    "mixtral": ("MixtralConfig", dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                       rms_norm_eps=1e-5,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # gpt-oss: attention sinks, sliding/full layers (window 8 of 32 tokens), Q/K/V/O biases, YaRN without
    # truncation, router bias, top-4 logits then softmax, per-expert biases, the clamped SwiGLU (the experts'
    # gate/up drawn at 4x scale so that some pre-activations pass the clamp at 7)
    "gpt-oss": ("GptOssConfig", dict(num_hidden_layers=2, head_dim=16, intermediate_size=32, num_local_experts=8,
                                      num_experts_per_tok=4, sliding_window=8, attention_bias=True,
                                      layer_types=["sliding_attention", "full_attention"], rms_norm_eps=1e-5,
                                      rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                                       "beta_slow": 1.0, "truncate": False,
                                                       "original_max_position_embeddings": 64,
                                                       "rope_theta": 150000.0})),
    # Phi-3.5-MoE: LayerNorms with biases, Q/K/V/O and logit biases, the sparsemixer router (top-2)
    "phimoe": ("PhimoeConfig", dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                     attention_bias=True, lm_head_bias=True, rms_norm_eps=1e-5,
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # DeepSeek-V2-Lite's shape: latent attention without a q LoRA (kv_lora_rank 24 + rope 8: a 32-value cache row),
    # a leading dense block, then softmax top-2 of 8 experts scaled by 1.5, one shared expert
    "deepseek_v2": ("DeepseekV2Config", dict(num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
                                             kv_lora_rank=24, q_lora_rank=None, qk_nope_head_dim=16,
                                             qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                                             n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                                             moe_intermediate_size=32, routed_scaling_factor=1.5,
                                             topk_method="greedy", norm_topk_prob=False,
                                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # DeepSeek-V2 (the full model's router): softmax scores, 4 groups of 2 experts ranked by their best expert
    # ("group_limited_greedy"), the experts of the 2 best groups only; llama.cpp ranks groups by their two best
    "deepseek_v2_groups": ("DeepseekV2Config", dict(num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
                                                    kv_lora_rank=24, q_lora_rank=None, qk_nope_head_dim=16,
                                                    qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                                                    n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                                                    moe_intermediate_size=32, routed_scaling_factor=1.0,
                                                    topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                                    norm_topk_prob=False,
                                                    rope_parameters={"rope_type": "default",
                                                                     "rope_theta": 10000.0})),
    # DeepSeek-V3's: a q LoRA, the sigmoid router with a selection bias over 4 groups (2 used), renormalised and
    # scaled by 2.5, two shared experts, YaRN with mscale = mscale_all_dim (the scores' mscale^2)
    "deepseek_v3": ("DeepseekV3Config", dict(num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
                                             kv_lora_rank=24, q_lora_rank=48, qk_nope_head_dim=16,
                                             qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                                             n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2,
                                             moe_intermediate_size=32, routed_scaling_factor=2.5, n_group=4,
                                             topk_group=2, norm_topk_prob=True,
                                             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                              "factor": 4.0, "mscale": 0.707,
                                                              "mscale_all_dim": 0.707, "beta_fast": 32.0,
                                                              "beta_slow": 1.0,
                                                              "original_max_position_embeddings": 64})),
}
GATE_UP_SCALE = {"gpt-oss": 4.0}
# phimoe: expert 1's router row 0.5% from expert 0's, so that the sparsemixer's softmax over the logits within
# 2% of the chosen one has more than one term whenever expert 0 or 1 leads
NEAR_TWIN_ROUTER = {"phimoe": 0.995}


def router_modules(model):
    """(layer index, router module) for every MoE layer."""
    out = []
    for il, layer in enumerate(model.model.layers):
        mlp = layer.mlp
        r = getattr(mlp, "gate", None) or getattr(mlp, "router", None)
        if r is not None and not hasattr(r, "out_features"):   # a dense block's MLP has a gate_proj, no router
            out.append((il, r))
    return out


def selection_scores(name, router, logits):
    """What a router ranks its experts by: DeepSeek-V3's sigmoid plus the selection bias, else the softmax."""
    if name == "deepseek_v3":
        return (torch_sigmoid(logits) + router.e_score_correction_bias.double()).numpy()
    import torch
    return torch.softmax(logits, -1).numpy()


def torch_sigmoid(x):
    import torch
    return torch.sigmoid(x)


def make(name: str) -> None:
    import torch
    import transformers

    cls_name, overrides = MODELS[name]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **overrides})
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    randomize(model, torch, SEED + sum(map(ord, name)), gemma_norms=False)
    routers = router_modules(model)
    with torch.no_grad():
        for p_name, p in model.named_parameters():
            if p.ndim == 3:     # stacked experts: N(0, 1/fan_in) as the 2-D matrices
                fan_in = p.shape[1] if name == "gpt-oss" else p.shape[2]   # gpt-oss: (n_expert, cols, rows)
                scale = GATE_UP_SCALE.get(name, 1.0) if "gate_up" in p_name else 1.0
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(SEED + len(p_name))) *
                        scale * fan_in ** -0.5)
            elif p_name.endswith("sinks"):   # sink logits of the scores' own size
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(SEED + len(p_name))))
        for il, r in routers:
            r.weight.mul_(ROUTER_SCALE)
            if hasattr(r, "e_score_correction_bias"):   # V3's selection bias: enough to change some choices
                r.e_score_correction_bias.copy_(torch.randn(r.e_score_correction_bias.shape,
                                                            generator=torch.Generator().manual_seed(SEED + il)) * 0.1)
            if name in NEAR_TWIN_ROUTER:
                r.weight[1] = r.weight[0] * NEAR_TWIN_ROUTER[name]
    seen: dict[int, tuple] = {}

    def hook(il):
        def f(_module, _inputs, output):
            logits, scores, idx = output
            seen[il] = (logits.detach().double(), scores.detach().float().numpy(), idx.detach().numpy())
        return f

    handles = [r.register_forward_hook(hook(il)) for il, r in routers]
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    for h in handles:
        h.remove()
    k = overrides.get("num_experts_per_tok")
    gaps = []
    by_layer = dict(routers)
    for il in sorted(seen):
        probs = selection_scores(name, by_layer[il], seen[il][0])
        top = np.sort(probs, axis=-1)[:, ::-1]
        gaps.append((top[:, k - 1] - top[:, k]).min())
        if name.startswith("deepseek"):   # its top-k is unsorted: best first, by what the router ranks them by
            order = np.argsort(-np.take_along_axis(probs, seen[il][2], -1), axis=-1, kind="stable")
            seen[il] = (seen[il][0], np.take_along_axis(seen[il][1], order, -1),
                        np.take_along_axis(seen[il][2], order, -1))
    os.makedirs(OUT, exist_ok=True)
    state = {k_: v.detach().float().numpy() for k_, v in model.state_dict().items()}
    np.savez_compressed(os.path.join(OUT, f"{name}.npz"), **state)
    config = model.config.to_dict()
    with open(os.path.join(OUT, f"{name}.config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, sort_keys=True, default=str)
    np.savez_compressed(
        os.path.join(OUT, f"{name}.golden.npz"), tokens=ids.astype(np.int32), logits=logits.astype(np.float32),
        router_experts=np.stack([seen[il][2] for il in sorted(seen)]).astype(np.int32),
        router_weights=np.stack([seen[il][1] for il in sorted(seen)]).astype(np.float32),
        min_router_gap=np.float64(min(gaps)), transformers=np.array(transformers.__version__),
        torch=np.array(torch.__version__))
    print(f"{name}: logits {logits.shape} std {logits.std():.3f}; experts used "
          f"{len(np.unique(seen[min(seen)][2]))}/"
          f"{overrides.get('num_experts', overrides.get('num_local_experts', overrides.get('n_routed_experts')))}; "
          f"smallest k-th/(k+1)-th router gap {min(gaps):.3g}")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(MODELS):
        make(n)
