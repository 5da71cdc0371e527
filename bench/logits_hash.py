"""sha256 of a model's logits at every position of a fixed prompt, whole and chunked, 1 and 2 threads.

A refactor of the C forward must leave these hashes unchanged bit for bit:

    python bench/logits_hash.py ~/.cache/oxillama/models/*.gguf
"""
import hashlib
import sys

import numpy as np

from oxillama.gguf import GGUFFile
from oxillama.runtime.engine import InferenceEngine

PROMPT = [1, 504, 3458, 282, 4649, 314, 2077, 30, 378, 1048, 2295, 7890, 288, 253, 3124, 29, 198, 14, 7, 42] * 4


def logits_hash(path: str, n_threads: int, chunk: int) -> str:
    engine = InferenceEngine(GGUFFile(path), n_ctx=256, n_threads=n_threads, n_batch=chunk)
    tokens = [t % engine.config.n_vocab for t in PROMPT]
    out = np.concatenate([engine.forward(tokens[i:i + chunk], all_logits=True)
                          for i in range(0, len(tokens), chunk)])
    return hashlib.sha256(np.ascontiguousarray(out, dtype=np.float32).tobytes()).hexdigest()[:16]


if __name__ == "__main__":
    for path in sys.argv[1:]:
        for n_threads in (1, 2):
            for chunk in (len(PROMPT), 7):
                print(path.rsplit("/", 1)[-1], f"threads={n_threads} chunk={chunk}", logits_hash(path, n_threads, chunk))
