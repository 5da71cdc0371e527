"""Cross-check (not part of the suite): run the committed tiny GGUFs in llama.cpp (llama-cpp-python)
and compare with the transformers goldens, to show the converter follows llama.cpp's conventions.

    python tests/models/check_llama_cpp.py

Known llama.cpp differences with these models (not converter bugs): it ignores the sliding window
of llama-arch (Mistral) and starcoder2 files and gemma2's attention.scale (query_pre_attn_scalar),
and does not load the phi3 file with this toy vocabulary. The dense zoo's twelve files (stablelm ... internlm2)
load and agree with transformers within 8e-4 .. 2.3e-3 of the logits' std (llama-cpp-python 0.3.36, its F16
KV cache; granite 1.6e-5), top-1 equal. deepseek2 (its latent attention, V3's router, YaRN mscale) loads and agrees
within 2.3e-3; `--save deepseek2` keeps llama.cpp's logits of it as data/deepseek2.llama_cpp.npz, the suite's
second opinion (test_deepseek2.py).
"""
import os
import sys

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
NAMES = ["llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "starcoder2",
         "command-r", "stablelm", "stablelm-par", "gptneox", "bloom", "falcon", "falcon40b", "gpt2", "olmo2", "granite",
         "smollm3", "exaone", "internlm2", "deepseek2"]


def main(names, save: bool = False) -> None:
    import llama_cpp
    for name in names:
        g = np.load(os.path.join(DATA, f"{name}.npz"))
        tokens, ref = g["tokens"].tolist(), g["logits"]
        try:
            model = llama_cpp.Llama(os.path.join(DATA, f"{name}.gguf"), n_ctx=64, logits_all=True, verbose=False,
                                    n_threads=1)
        except ValueError as e:
            print(f"{name:11s} not loaded by llama.cpp: {e}")
            continue
        model.eval(tokens)
        out = np.array(model.scores[:len(tokens)])
        d = np.abs(out - ref).max()
        print(f"{name:11s} max |llama.cpp - transformers| / std = {d / ref.std():.2e}, "
              f"top-1 agreement {np.mean(out.argmax(1) == ref.argmax(1)):.2f}")
        if save:
            np.savez_compressed(os.path.join(DATA, f"{name}.llama_cpp.npz"), tokens=g["tokens"],
                                logits=out.astype(np.float32), llama_cpp=np.array(llama_cpp.__version__))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--save"]
    main(args or NAMES, save="--save" in sys.argv[1:])
