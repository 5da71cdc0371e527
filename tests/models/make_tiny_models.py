"""Make the tiny random models and their transformers goldens in tests/models/data/ (run once; needs torch).

    pip install torch==2.13.0 transformers
    python tests/models/make_tiny_models.py            # every model
    python tests/models/make_tiny_models.py gemma2     # some of them

For each architecture: a transformers config with small dims and the features that matter for it
(GQA, sliding windows shorter than the test sequence, local/global layer mixes, soft-capping,
biases, RoPE scaling), weights drawn with a fixed seed (norm weights and biases too, so that the
converter's transforms of them are tested), converted to GGUF with oxillama.convert, and the
float32 logits of transformers' eager attention for TOKENS saved as <name>.npz. The test suite
(test_architectures.py) only reads these files.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

N_VOCAB = 288
N_TOKENS = 32
WINDOW = 8          # sliding windows well inside N_TOKENS
SEED = 1234

COMMON = dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1, pad_token_id=0)

# name -> (transformers config class, overrides, output types). The first type is the one tested tightly.
MODELS = {
    "llama": ("LlamaConfig", dict(rms_norm_eps=1e-5, tie_word_embeddings=False,
                                   rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
              ("f32", "q8_0")),
    # Llama 3 RoPE scaling: with head_dim 16 and a trained context of 64, pairs fall in all three bands
    "llama3": ("LlamaConfig", dict(rms_norm_eps=1e-5, tie_word_embeddings=True,
                                    rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0,
                                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 64}), ("f32",)),
    "mistral": ("MistralConfig", dict(sliding_window=WINDOW, rms_norm_eps=1e-6, tie_word_embeddings=False), ("f32",)),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=True, rms_norm_eps=1e-6,
                                   rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                    "original_max_position_embeddings": 64}), ("f32",)),
    "qwen3": ("Qwen3Config", dict(head_dim=32, tie_word_embeddings=False, rms_norm_eps=1e-6,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              ("f32", "f16")),
    "gemma": ("GemmaConfig", dict(head_dim=16, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6)
              , ("f32",)),
    "gemma2": ("Gemma2Config", dict(num_hidden_layers=4, head_dim=16, sliding_window=WINDOW,
                                     query_pre_attn_scalar=24, attn_logit_softcapping=3.0,
                                     final_logit_softcapping=15.0, rms_norm_eps=1e-6), ("f32",)),
    "gemma3": ("Gemma3TextConfig", dict(num_hidden_layers=4, head_dim=16, sliding_window=WINDOW,
                                         query_pre_attn_scalar=16, rms_norm_eps=1e-6,
                                         layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention"],
                                         rope_parameters={
                                             "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                                "rope_theta": 1000000.0},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
               ("f32",)),
    "phi3": ("Phi3Config", dict(sliding_window=WINDOW, rms_norm_eps=1e-5, original_max_position_embeddings=256,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.5}), ("f32",)),
    # LongRoPE (Phi-3.5, Phi-4-mini): a trained context of 16 stretched to 256; 32 tokens run the long factors
    # (transformers switches past 16 positions), their first 16 alone the short ones (saved as logits_short)
    "phi3-longrope": ("Phi3Config", dict(rms_norm_eps=1e-5, original_max_position_embeddings=16,
                                          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                           "short_factor": [1.0, 1.3, 1.9, 2.6, 3.1, 4.7, 6.2, 8.5],
                                                           "long_factor": [1.1, 2.0, 3.5, 5.0, 8.0, 12.0, 17.0,
                                                                           24.0],
                                                           "original_max_position_embeddings": 16}), ("f32",)),
    "starcoder2": ("Starcoder2Config", dict(sliding_window=WINDOW, norm_epsilon=1e-5, use_bias=True,
                                             tie_word_embeddings=False, hidden_act="gelu_pytorch_tanh"), ("f32",)),
    "command-r": ("CohereConfig", dict(layer_norm_eps=1e-5, logit_scale=0.5, tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), ("f32",)),
}


# families whose transformers configs name their sizes their own way: no COMMON, these instead
GPT2_LIKE = dict(vocab_size=N_VOCAB, n_embd=64, n_layer=2, n_head=4, bos_token_id=N_VOCAB - 2,
                 eos_token_id=N_VOCAB - 1)
BLOOM_LIKE = dict(vocab_size=N_VOCAB, hidden_size=96, n_layer=2, n_head=6, bos_token_id=N_VOCAB - 2,
                  eos_token_id=N_VOCAB - 1, pad_token_id=0)
OWN = dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
           bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1, pad_token_id=0)
STANDALONE = {"gpt2", "bloom", "gptneox", "falcon", "falcon40b"}   # not built on COMMON
# whose HF checkpoint (state dict + config.json) is also kept in data/hf/ for test_convert_hf.py: one per
# converter path of its own (Conv1D, per-head and grouped QKV, ln_attn, stacked head norms, wqkv split)
HF_CHECKPOINTS = {"gpt2", "gptneox", "falcon40b", "stablelm-par", "internlm2"}

MODELS.update({
    # StableLM-2 1.6B: QKV biases, partial NeoX RoPE (a quarter of each head), sequential blocks
    "stablelm": ("StableLmConfig", dict(use_qkv_bias=True, layer_norm_eps=1e-5, tie_word_embeddings=False,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "partial_rotary_factor": 0.25}), ("f32",)),
    # StableLM-2 12B: parallel attention + FFN from one norm, a LayerNorm per Q/K head
    "stablelm-par": ("StableLmConfig", dict(qk_layernorm=True, use_parallel_residual=True, layer_norm_eps=1e-5,
                                             tie_word_embeddings=False,
                                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                              "partial_rotary_factor": 0.5}), ("f32",)),
    # Pythia: parallel residual with two norms, partial RoPE, per-head interleaved fused QKV with bias
    "gptneox": ("GPTNeoXConfig", dict(OWN, intermediate_size=96, max_position_embeddings=256, layer_norm_eps=1e-5,
                                       use_parallel_residual=True, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                        "partial_rotary_factor": 0.25}), ("f32",)),
    # BLOOM: ALiBi with 6 heads (the slopes past the largest power of two), embedding LayerNorm
    "bloom": ("BloomConfig", dict(BLOOM_LIKE, layer_norm_epsilon=1e-5), ("f32",)),
    # Falcon-7B: one K/V head, one norm; Falcon-40B: KV groups, ln_attn / ln_mlp
    "falcon": ("FalconConfig", dict(OWN, max_position_embeddings=256, layer_norm_epsilon=1e-5,
                                     multi_query=True, tie_word_embeddings=True), ("f32",)),
    "falcon40b": ("FalconConfig", dict(OWN, max_position_embeddings=256, layer_norm_epsilon=1e-5,
                                        new_decoder_architecture=True, num_kv_heads=2, tie_word_embeddings=False),
                  ("f32",)),
    # GPT-2: learned positions (as many as GPT-2's), Conv1D weights
    "gpt2": ("GPT2Config", dict(GPT2_LIKE, n_positions=1024, layer_norm_epsilon=1e-5), ("f32",)),
    "olmo2": ("Olmo2Config", dict(rms_norm_eps=1e-6, tie_word_embeddings=False), ("f32",)),
    "granite": ("GraniteConfig", dict(rms_norm_eps=1e-6, embedding_multiplier=12.0, residual_multiplier=0.22,
                                       attention_multiplier=0.2, logits_scaling=8.0, tie_word_embeddings=True),
                ("f32",)),
    # 4 layers: the 4th attends without RoPE
    "smollm3": ("SmolLM3Config", dict(num_hidden_layers=4, rms_norm_eps=1e-6, tie_word_embeddings=True),
                ("f32",)),
    # EXAONE 3.5: Llama 3 RoPE scaling (the rope_freqs tensor) under NeoX RoPE
    "exaone": ("ExaoneConfig", dict(rms_norm_eps=1e-5, tie_word_embeddings=False,
                                     rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0,
                                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 64}), ("f32",)),
    # InternLM2 is remote code on the Hub: a transformers Llama whose weights are written in InternLM2's
    # checkpoint layout (grouped wqkv, its names) and converted from that (internlm2_state_dict)
    "internlm2": ("LlamaConfig", dict(rms_norm_eps=1e-5, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                  ("f32",)),
})


def internlm2_state_dict(model, cfg) -> tuple[dict, dict]:
    """A transformers Llama's weights in InternLM2's checkpoint layout, and its config.json: per KV group the
    group's query heads then its K head then its V head in one wqkv (InternLM2's modeling code reads it so)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd, g = cfg.hidden_size // n_head, n_head // n_kv
    out = {"model.tok_embeddings.weight": sd["model.embed_tokens.weight"], "model.norm.weight": sd["model.norm.weight"],
           "output.weight": sd["lm_head.weight"]}
    for il in range(cfg.num_hidden_layers):
        p = f"model.layers.{il}."
        q = sd[p + "self_attn.q_proj.weight"].reshape(n_kv, g, hd, -1)
        k = sd[p + "self_attn.k_proj.weight"].reshape(n_kv, 1, hd, -1)
        v = sd[p + "self_attn.v_proj.weight"].reshape(n_kv, 1, hd, -1)
        out[p + "attention.wqkv.weight"] = np.concatenate([q, k, v], axis=1).reshape(-1, cfg.hidden_size)
        out[p + "attention.wo.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[p + "attention_norm.weight"] = sd[p + "input_layernorm.weight"]
        out[p + "ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        out[p + "feed_forward.w1.weight"] = sd[p + "mlp.gate_proj.weight"]
        out[p + "feed_forward.w3.weight"] = sd[p + "mlp.up_proj.weight"]
        out[p + "feed_forward.w2.weight"] = sd[p + "mlp.down_proj.weight"]
    config = {"model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"], "vocab_size": cfg.vocab_size,
              "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
              "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": n_head, "num_key_value_heads": n_kv,
              "max_position_embeddings": cfg.max_position_embeddings, "rms_norm_eps": cfg.rms_norm_eps,
              "rope_theta": cfg.rope_parameters["rope_theta"], "bias": False, "tie_word_embeddings": False}
    return out, config


def tokens() -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, N_VOCAB - 2, size=N_TOKENS).astype(np.int64)


def randomize(model, torch, seed: int, gemma_norms: bool) -> None:
    """Weights of a useful scale: matrices ~ N(0, 1/fan_in), embeddings N(0, 1), norms around their identity
    (1 + w for gemma: w around 0), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                embedding = any(e in name for e in ("embed_tokens", "wte", "wpe", "word_embeddings", "embed_in"))
                std = 1.0 if embedding else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif (name.endswith("norm.weight") or "layernorm" in name or name.endswith("norm.bias")
                  or "layer_norm" in name or ".ln_" in name):
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
                else:
                    base = 0.0 if gemma_norms else 1.0
                    p.copy_(base + torch.randn(p.shape, generator=g) * 0.2)
            else:   # biases
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def make(name: str) -> None:
    import torch
    import transformers

    from oxillama.convert import convert_state_dict

    cls_name, overrides, outtypes = MODELS[name]
    cfg = getattr(transformers, cls_name)(**(overrides if name in STANDALONE else {**COMMON, **overrides}))
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    randomize(model, torch, SEED + sum(map(ord, name)), gemma_norms=name.startswith("gemma"))
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
        extra = {}
        if name == "phi3-longrope":
            n_orig = overrides["original_max_position_embeddings"]
            extra["logits_short"] = model(torch.from_numpy(ids[:n_orig])[None],
                                          use_cache=False).logits[0].float().numpy()
    os.makedirs(DATA, exist_ok=True)
    for outtype in outtypes:
        suffix = "" if outtype == "f32" else f".{outtype}"
        out = os.path.join(DATA, f"{name}{suffix}.gguf")
        if name == "internlm2":
            state, config = internlm2_state_dict(model, cfg)
        else:
            state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
            config = json.loads(model.config.to_json_string(use_diff=False))
            if config.get("tie_word_embeddings"):   # the tied copy is not kept (nor converted)
                state.pop("lm_head.weight", None)
        convert_state_dict(state, config, out, outtype=outtype, name=f"tiny-{name}")
        if name in HF_CHECKPOINTS and outtype == "f32":
            os.makedirs(os.path.join(DATA, "hf"), exist_ok=True)
            np.savez_compressed(os.path.join(DATA, "hf", f"{name}.npz"), **state)
            with open(os.path.join(DATA, "hf", f"{name}.config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=1, sort_keys=True)
    np.savez_compressed(os.path.join(DATA, f"{name}.npz"), tokens=ids.astype(np.int32),
                        logits=logits.astype(np.float32), **extra)
    meta = {"config": cls_name, "overrides": overrides, "transformers": transformers.__version__,
            "torch": torch.__version__, "outtypes": list(outtypes)}
    with open(os.path.join(DATA, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(f"{name}: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(MODELS):
        make(n)
