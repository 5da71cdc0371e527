"""Reference logits of the tiny hybrid models (run once; needs torch + transformers, llama-cpp-python optional).

    python tests/models/make_hybrid_goldens.py

Builds transformers' Lfm2ForCausalLM (also under a sliding-window mask), Lfm2MoeForCausalLM, Qwen3NextForCausalLM,
Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM from the very weights tiny_hybrid's writers write (float32, eager
attention; the delta rule's prefill in its chunked form), runs a 150-token prompt in one forward, and writes
data/hybrid_goldens.npz: the tokens and, per model, transformers' logits at every position, plus llama.cpp's
(llama-cpp-python, F32 KV cache) on the GGUF file where it is installed (the later families' first 64 positions),
llama.cpp's on Q8_0 files of four families (64 positions), and the sha256 of the files, so test_hybrid.py can tell
a drifted file from a wrong forward. The suite itself needs neither torch nor llama.cpp.
"""
import hashlib
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import tiny_hybrid  # noqa: E402

N_TOKENS = 150
N_QUANT = 64   # positions of the quantized files' llama.cpp logits, and of the later families' (the file stays small)
QUANT_WRITERS = {"lfm2": tiny_hybrid.write_tiny_lfm2, "lfm2moe": tiny_hybrid.write_tiny_lfm2moe,
                 "qwen3next": tiny_hybrid.write_tiny_qwen3next, "qwen35": tiny_hybrid.write_tiny_qwen35,
                 "qwen35moe": tiny_hybrid.write_tiny_qwen35moe}
QUANT_FAMILIES = ["lfm2", "lfm2moe", "qwen3next", "qwen35moe"]


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lfm2_transformers(tokens: np.ndarray, window: int = 0) -> np.ndarray:
    """window > 0: every attention layer attends to the last `window` positions (transformers' Lfm2 has no such
    option; its attention takes the mask it is given, here the sliding-window causal mask)."""
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM
    config = Lfm2Config(**tiny_hybrid.lfm2_hf_config())
    config._attn_implementation = "eager"
    model = Lfm2ForCausalLM(config).float().eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v))
             for k, v in tiny_hybrid.lfm2_hf_tensors(tiny_hybrid.lfm2_tensors()).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    kwargs = {}
    if window:
        i, j = np.arange(len(tokens))[:, None], np.arange(len(tokens))[None, :]
        seen = (j <= i) & (j > i - window)
        mask = torch.from_numpy(np.where(seen, 0.0, np.finfo(np.float32).min).astype(np.float32))[None, None]
        kwargs["attention_mask"] = {"full_attention": mask, "conv": None}
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))[None], use_cache=False, **kwargs)
    return out.logits[0].numpy().astype(np.float32)


def qwen3next_transformers(tokens: np.ndarray) -> np.ndarray:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    config = Qwen3NextConfig(**tiny_hybrid.qwen3next_hf_config())
    config._attn_implementation = "eager"
    model = Qwen3NextForCausalLM(config).float().eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tiny_hybrid.qwen3next_hf_tensors().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))[None], use_cache=False)
    return out.logits[0].numpy().astype(np.float32)


def lfm2moe_transformers(tokens: np.ndarray) -> np.ndarray:
    import torch
    from transformers import Lfm2MoeConfig, Lfm2MoeForCausalLM
    config = Lfm2MoeConfig(**tiny_hybrid.lfm2moe_hf_config())
    config._attn_implementation = "eager"
    model = Lfm2MoeForCausalLM(config).float().eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v))
             for k, v in tiny_hybrid.lfm2moe_hf_tensors(tiny_hybrid.lfm2moe_tensors()).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))[None], use_cache=False)
    return out.logits[0].numpy().astype(np.float32)


def qwen35_transformers(tokens: np.ndarray, moe: bool) -> np.ndarray:
    import torch
    if moe:
        from transformers import Qwen3_5MoeForCausalLM as Model, Qwen3_5MoeTextConfig as Config
    else:
        from transformers import Qwen3_5ForCausalLM as Model, Qwen3_5TextConfig as Config
    config = Config(**tiny_hybrid.qwen35_hf_config(moe))
    config._attn_implementation = "eager"
    model = Model(config).float().eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tiny_hybrid.qwen35_hf_tensors(moe).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))[None], use_cache=False)
    return out.logits[0].numpy().astype(np.float32)


def llama_cpp_logits(path: str, tokens: np.ndarray):
    try:
        import llama_cpp
    except ImportError:
        return None
    model = llama_cpp.Llama(path, n_ctx=256, n_batch=256, logits_all=True, verbose=False, n_threads=1,
                            type_k=0, type_v=0)
    model.eval(tokens.tolist())
    return np.array(model.scores[:len(tokens)], dtype=np.float32)


def main() -> None:
    tokens = np.random.default_rng(3).integers(0, tiny_hybrid.N_VOCAB, size=N_TOKENS).astype(np.int32)
    out = {"tokens": tokens}
    with tempfile.TemporaryDirectory() as d:
        path = tiny_hybrid.write_tiny_lfm2(os.path.join(d, "lfm2.gguf"))
        out["lfm2/transformers"] = lfm2_transformers(tokens)
        out["lfm2/sha256"] = np.array(sha256(path))
        ref = llama_cpp_logits(path, tokens)
        if ref is not None:
            out["lfm2/llama_cpp"] = ref
            print("lfm2 llama.cpp vs transformers: max |diff|", float(np.abs(ref - out["lfm2/transformers"]).max()))
        path = tiny_hybrid.write_tiny_lfm2(os.path.join(d, "lfm2_swa.gguf"),
                                           overrides={"lfm2.attention.sliding_window": tiny_hybrid.LFM2_SWA})
        out["lfm2_swa/transformers"] = lfm2_transformers(tokens, window=tiny_hybrid.LFM2_SWA)
        ref = llama_cpp_logits(path, tokens)
        if ref is not None:
            out["lfm2_swa/llama_cpp"] = ref[:N_QUANT]
            print("lfm2 (sliding window) llama.cpp vs transformers: max |diff|",
                  float(np.abs(ref - out["lfm2_swa/transformers"]).max()))
        print("lfm2: the window moves the logits by", float(np.abs(out["lfm2_swa/transformers"]
                                                                  - out["lfm2/transformers"]).max()))
        path = tiny_hybrid.write_tiny_lfm2moe(os.path.join(d, "lfm2moe.gguf"))
        out["lfm2moe/transformers"] = lfm2moe_transformers(tokens)
        out["lfm2moe/sha256"] = np.array(sha256(path))
        ref = llama_cpp_logits(path, tokens)
        if ref is not None:
            out["lfm2moe/llama_cpp"] = ref[:N_QUANT]
            print("lfm2moe llama.cpp vs transformers: max |diff|",
                  float(np.abs(ref - out["lfm2moe/transformers"]).max()))
        path = tiny_hybrid.write_tiny_qwen3next(os.path.join(d, "qwen3next.gguf"))
        out["qwen3next/transformers"] = qwen3next_transformers(tokens)
        out["qwen3next/sha256"] = np.array(sha256(path))
        ref = llama_cpp_logits(path, tokens)
        if ref is not None:
            out["qwen3next/llama_cpp"] = ref
            print("qwen3next llama.cpp vs transformers: max |diff|",
                  float(np.abs(ref - out["qwen3next/transformers"]).max()))
        for name, moe in (("qwen35", False), ("qwen35moe", True)):
            path = tiny_hybrid.write_tiny_qwen35(os.path.join(d, f"{name}.gguf"), moe=moe)
            out[f"{name}/transformers"] = qwen35_transformers(tokens, moe)
            out[f"{name}/sha256"] = np.array(sha256(path))
            ref = llama_cpp_logits(path, tokens)
            if ref is not None:
                out[f"{name}/llama_cpp"] = ref[:N_QUANT]
                print(f"{name} llama.cpp vs transformers: max |diff|",
                      float(np.abs(ref - out[f"{name}/transformers"]).max()))
        # llama.cpp on Q8_0 files (weights and activations quantized on both sides): the first N_QUANT positions
        for name in QUANT_FAMILIES:
            path = QUANT_WRITERS[name](os.path.join(d, f"{name}-q8.gguf"), qtype="Q8_0")
            ref = llama_cpp_logits(path, tokens[:N_QUANT])
            if ref is not None:
                out[f"{name}/q8_0/llama_cpp"] = ref
                out[f"{name}/q8_0/sha256"] = np.array(sha256(path))
    final = os.path.join(HERE, "data", "hybrid_goldens.npz")
    np.savez_compressed(final + ".tmp.npz", **out)
    os.replace(final + ".tmp.npz", final)
    print({k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
