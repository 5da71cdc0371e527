"""Produce the llama.cpp goldens for tests/runtime (run once; needs llama-cpp-python).

    python tests/runtime/make_goldens.py

Writes tests/runtime/data/greedy_llamacpp.json: for each real model and prompt, llama.cpp's prompt
token ids and its greedy continuation ids and text.
"""
import json
import os

import llama_cpp

from oxillama import hub

CASES = {
    "smollm2-135m": ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"],
    "gemma3-270m": ["The three primary colors are", "The capital of France is", "def fibonacci(n):"],
}
N_TOKENS = 24


def main() -> None:
    out = {}
    for name, prompts in CASES.items():
        path = str(hub.pull(name))
        llm = llama_cpp.Llama(path, n_ctx=512, n_threads=2, verbose=False)
        out[name] = []
        for prompt in prompts:
            ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
            gen = []
            llm.reset()
            for tok in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0):
                if tok == llm.token_eos() or len(gen) >= N_TOKENS:
                    break
                gen.append(tok)
            out[name].append({"prompt": prompt, "prompt_ids": ids, "ids": gen,
                              "text": llm.detokenize(gen).decode("utf-8", errors="replace")})
    dest = os.path.join(os.path.dirname(__file__), "data", "greedy_llamacpp.json")
    with open(dest, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", dest)


if __name__ == "__main__":
    main()
