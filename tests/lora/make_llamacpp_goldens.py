"""Make tests/lora/data/llamacpp_lora_smollm2.json: llama.cpp's (llama-cpp-python) log-probabilities for SmolLM2
with the formula adapter of lora_fixture.py, teacher-forced on the start of tests/data/fixed_text.txt. Needs llama-cpp-python;
the test that reads the goldens does not.

    python tests/lora/make_llamacpp_goldens.py
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from lora_fixture import write_formula_adapter  # noqa: E402

N_TOKENS = 64
TOP = 32


def main():
    import llama_cpp

    from oxillama import hub
    from oxillama.gguf import GGUFFile
    from oxillama.tokenizer import Tokenizer  # noqa: F401  (the ids come from oxillama's tokenizer)
    from oxillama import InferenceEngine

    path = str(hub.pull("smollm2-135m", progress=False))
    with InferenceEngine.from_gguf(path, n_ctx=256) as e:
        ids = e.tokenize((HERE.parent / "data" / "fixed_text.txt").read_text(encoding="utf-8"))[:N_TOKENS]
    with tempfile.TemporaryDirectory() as tmp, GGUFFile(path) as g:
        adapter = write_formula_adapter(g, Path(tmp) / "lora.gguf")
        llm = llama_cpp.Llama(path, lora_path=str(adapter), logits_all=True, n_ctx=256, n_threads=2, verbose=False)
        llm.eval(ids)
        scores = np.array(llm.scores[:len(ids)], dtype=np.float64)
    logp = scores - scores.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    top = np.argsort(-logp, axis=1)[:, :TOP]
    out = {"llama_cpp_python": llama_cpp.__version__, "tokens": [int(t) for t in ids],
           "top_ids": top.tolist(), "top_logprobs": np.take_along_axis(logp, top, 1).round(5).tolist()}
    (HERE / "data" / "llamacpp_lora_smollm2.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
