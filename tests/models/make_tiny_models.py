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
    "starcoder2": ("Starcoder2Config", dict(sliding_window=WINDOW, norm_epsilon=1e-5, use_bias=True,
                                             tie_word_embeddings=False, hidden_act="gelu_pytorch_tanh"), ("f32",)),
    "command-r": ("CohereConfig", dict(layer_norm_eps=1e-5, logit_scale=0.5, tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), ("f32",)),
}


def tokens() -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, N_VOCAB - 2, size=N_TOKENS).astype(np.int64)


def randomize(model, torch, seed: int, gemma_norms: bool) -> None:
    """Weights of a useful scale: matrices ~ N(0, 1/fan_in), embeddings N(0, 1), norms around their identity
    (1 + w for gemma: w around 0), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                std = 1.0 if "embed_tokens" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("norm.weight") or "layernorm" in name or name.endswith("norm.bias"):
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

    from oxillama.convert import convert_model

    cls_name, overrides, outtypes = MODELS[name]
    cfg = getattr(transformers, cls_name)(**{**COMMON, **overrides})
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    randomize(model, torch, SEED + sum(map(ord, name)), gemma_norms=name.startswith("gemma"))
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    os.makedirs(DATA, exist_ok=True)
    for outtype in outtypes:
        suffix = "" if outtype == "f32" else f".{outtype}"
        convert_model(model, os.path.join(DATA, f"{name}{suffix}.gguf"), outtype=outtype, name=f"tiny-{name}")
    np.savez_compressed(os.path.join(DATA, f"{name}.npz"), tokens=ids.astype(np.int32),
                        logits=logits.astype(np.float32))
    meta = {"config": cls_name, "overrides": overrides, "transformers": transformers.__version__,
            "torch": torch.__version__, "outtypes": list(outtypes)}
    with open(os.path.join(DATA, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(f"{name}: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(MODELS):
        make(n)
