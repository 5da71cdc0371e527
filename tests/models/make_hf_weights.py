"""Make tests/models/data/hf/<name>.npz and <name>.config.json: the Hugging Face checkpoints (state dict and
config.json) of some tiny models of make_tiny_models.py, so that test_convert_hf.py converts real HF
checkpoints without torch.

The tiny models' state dicts were not kept when they were made; this recovers them from the committed GGUFs by
undoing the conversion's documented transforms (GGUF names back to HF names, the llama Q/K row permutation, the
gemma norms' 1 + w). The recovered state dict is the true one because the converter is one-to-one and the test
checks that converting it gives the committed GGUF back bit for bit (whose logits match transformers'). With
torch and transformers at hand, the state dicts could be saved by make_tiny_models.py itself instead.

    python tests/models/make_hf_weights.py
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from make_tiny_models import COMMON, MODELS  # noqa: E402

OUT = os.path.join(HERE, "data", "hf")
NAMES = ["llama", "qwen3", "gemma3", "phi3", "starcoder2", "command-r"]
MODEL_TYPES = {"LlamaConfig": "llama", "Qwen3Config": "qwen3", "Gemma3TextConfig": "gemma3_text",
               "Phi3Config": "phi3", "Starcoder2Config": "starcoder2", "CohereConfig": "cohere"}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
                 "phi3": "Phi3ForCausalLM", "starcoder2": "Starcoder2ForCausalLM", "cohere": "CohereForCausalLM"}

GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
LAYER_BY_ARCH = {
    "gemma3": {**LAYER, "ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
    "phi3": {**LAYER, "ffn_up": "mlp.gate_up_proj"},
    "starcoder2": {**LAYER, "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"},
}


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half row order from llama.cpp's adjacent pairs: row i <- 2i, row i + d/2 <- 2i + 1 per head."""
    head_dim = w.shape[0] // n_head
    return w.reshape(n_head, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(arch: str, gname: str) -> str | None:
    stem, kind = gname.rsplit(".", 1)
    if stem == "rope_freqs":
        return None                       # computed from config.json's rope_parameters
    if not stem.startswith("blk."):
        return f"{GLOBAL[stem]}.{kind}"
    _, il, base = stem.split(".", 2)
    return f"model.layers.{il}.{LAYER_BY_ARCH.get(arch, LAYER)[base]}.{kind}"


def recover(name: str) -> tuple[dict, dict]:
    from oxillama.gguf import GGUFFile
    cls_name, overrides, _ = MODELS[name]
    model_type = MODEL_TYPES[cls_name]
    config = {**COMMON, **overrides, "model_type": model_type, "architectures": [ARCHITECTURES[model_type]]}
    state = {}
    with GGUFFile(os.path.join(HERE, "data", f"{name}.gguf")) as g:
        arch = g.metadata["general.architecture"]
        for gname, t in g.tensors.items():
            hname = hf_name(arch, gname)
            if hname is None:
                continue
            data = np.array(t.numpy(), dtype=np.float32)
            if arch == "llama" and ".attn_q." in gname:
                data = unpermute_rope_rows(data, config["num_attention_heads"])
            elif arch == "llama" and ".attn_k." in gname:
                data = unpermute_rope_rows(data, config["num_key_value_heads"])
            if arch.startswith("gemma") and gname.endswith("norm.weight"):
                data = data - np.float32(1.0)
            state[hname] = data
    return config, state


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or NAMES:
        config, state = recover(name)
        np.savez_compressed(os.path.join(OUT, f"{name}.npz"), **state)
        with open(os.path.join(OUT, f"{name}.config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1, sort_keys=True)
        print(f"{name}: {len(state)} tensors")


if __name__ == "__main__":
    main()
