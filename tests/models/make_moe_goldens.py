"""llama.cpp's logits on the tiny mixture-of-experts files (run once; needs llama-cpp-python).

    python tests/models/make_moe_goldens.py

Writes data/moe_llamacpp.npz: the tokens, and per family (tiny_moe.FAMILIES that llama.cpp reads as the
file says: not the sigmoid variant, whose expert_gating_func llama.cpp's qwen3moe ignores) llama.cpp's
logits for every position (its default F16 KV cache) and the sha256 of the file they came from, so that
test_moe.py can tell a drifted file from a wrong forward.
"""
import hashlib
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tiny_moe import write_tiny_moe  # noqa: E402

NAMES = ["qwen3moe", "qwen2moe", "olmoe", "mixtral", "qwen3moe-topk-softmax", "gpt-oss"]
N_TOKENS = 40


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main() -> None:
    import llama_cpp
    toks = np.random.default_rng(0).integers(0, 286, size=N_TOKENS).astype(np.int32)
    out = {"tokens": toks}
    with tempfile.TemporaryDirectory() as d:
        for name in NAMES:
            path = write_tiny_moe(os.path.join(d, f"{name}.gguf"), name)
            model = llama_cpp.Llama(path, n_ctx=64, logits_all=True, verbose=False, n_threads=1)
            model.eval(toks.tolist())
            out[f"{name}/logits"] = np.array(model.scores[:N_TOKENS], dtype=np.float32)
            out[f"{name}/sha256"] = np.array(sha256(path))
            print(name, out[f"{name}/logits"].shape)
    np.savez_compressed(os.path.join(HERE, "data", "moe_llamacpp.npz"), **out)


if __name__ == "__main__":
    main()
