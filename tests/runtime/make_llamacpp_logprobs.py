"""Make tests/runtime/data/llamacpp_logprobs_<model>.npz and llamacpp_logprobs.json: llama.cpp's (llama-cpp-python)
top-TOP log-probabilities at each of the first N_TOKENS positions of tests/data/fixed_text.txt, teacher-forced,
for both real models; and, in the JSON, how far llama.cpp's own Q8_0 KV cache is from its F16 one on the same
tokens (mean KL, top-1 agreement), the bar tests/runtime/test_kv_q8_0.py holds oxillama's Q8_0 cache to.
Needs llama-cpp-python; the tests that read the goldens do not.

    python tests/runtime/make_llamacpp_logprobs.py
"""
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
TEXT = HERE.parent / "data" / "fixed_text.txt"
N_TOKENS = 512
TOP = 20
MODELS = {"smollm2": "smollm2-135m", "gemma3": "gemma3-270m"}
GGML_TYPE_Q8_0 = 8


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def llamacpp_logprobs(llama_cpp, path, ids, **kw):
    """(len(ids), n_vocab) float64 log-probabilities, one prefill of all the tokens."""
    llm = llama_cpp.Llama(path, logits_all=True, n_ctx=N_TOKENS, n_batch=N_TOKENS, n_ubatch=N_TOKENS, n_threads=2,
                          flash_attn=True, verbose=False, **kw)
    llm.eval(ids)
    scores = np.array(llm.scores[:len(ids)], dtype=np.float64)
    llm.close()
    return log_softmax(scores)


def main():
    import llama_cpp

    from oxillama import InferenceEngine, hub

    summary = {"llama_cpp_python": llama_cpp.__version__, "text": TEXT.name, "n_tokens": N_TOKENS, "top": TOP,
               "flash_attn": True, "q8_0_vs_f16": {}}
    for name, model in MODELS.items():
        path = str(hub.pull(model, progress=False))
        with InferenceEngine.from_gguf(path, n_ctx=64) as e:
            ids = [int(t) for t in e.tokenize(TEXT.read_text(encoding="utf-8"))[:N_TOKENS]]
        assert len(ids) == N_TOKENS
        f16 = llamacpp_logprobs(llama_cpp, path, ids)
        q8 = llamacpp_logprobs(llama_cpp, path, ids, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0)
        kl = (np.exp(f16) * (f16 - q8)).sum(axis=-1)
        summary["q8_0_vs_f16"][name] = {"mean_kl": round(float(kl.mean()), 5),
                                        "top1": round(float((f16.argmax(-1) == q8.argmax(-1)).mean()), 4)}
        top = np.argsort(-f16, axis=1)[:, :TOP]
        np.savez_compressed(HERE / "data" / f"llamacpp_logprobs_{name}.npz", tokens=np.array(ids, dtype=np.int32),
                            top_ids=top.astype(np.int32),
                            top_logprobs=np.take_along_axis(f16, top, 1).astype(np.float32))
        print(name, summary["q8_0_vs_f16"][name])
    (HERE / "data" / "llamacpp_logprobs.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
