"""The logits both real models give at a fixed prompt, as sha256 digests per kernel tier: a refactor
of the engine, the scheduler or the forward must leave them bit-identical.

    python tests/runtime/pinned_logits.py        # record them for every tier this CPU can run

writes tests/runtime/data/pinned_logits.json; tests/runtime/test_pinned_logits.py compares.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

PINNED = os.path.join(os.path.dirname(__file__), "data", "pinned_logits.json")
MODELS = {"smollm2": "smollm2-135m", "gemma3": "gemma3-270m"}
PROMPT = "The quick brown fox jumps over the lazy dog. In 1879, the city of Paris hosted"
N_DECODE = 4
# OXILLAMA_DISABLE_CPU_FEATURES value that leaves each x86 tier active (the scalar one disables all)
FORCE_TIER = {"avx512vnni": "", "avx512": "avx512vnni", "avx2": "avx512", "scalar": "avx2,avx512"}


def digests(engine) -> dict:
    """sha256 of the prefill's logits at every prompt position, then of each greedy decode step's."""
    engine.reset()
    ids = engine.tokenize(PROMPT)
    out = {"prefill": hashlib.sha256(engine.forward(ids, all_logits=True).tobytes()).hexdigest()}
    steps = hashlib.sha256()
    engine.reset()
    logits = engine.forward(ids)
    for _ in range(N_DECODE):
        logits = engine.forward([int(np.argmax(logits))])
        steps.update(logits.tobytes())
    out["decode"] = steps.hexdigest()
    return out


def _record_one(tier: str) -> dict:
    from oxillama import _core, hub
    from oxillama.runtime import InferenceEngine
    if _core.active_tier() != tier:
        return {}
    got = {}
    for name, model in MODELS.items():
        with InferenceEngine.from_gguf(str(hub.pull(model)), n_ctx=256, n_threads=1) as engine:
            got[name] = digests(engine)
    return got


def main() -> None:
    table = {}
    for tier, disabled in FORCE_TIER.items():
        env = dict(os.environ, OXILLAMA_DISABLE_CPU_FEATURES=disabled)
        code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import pinned_logits; "
                f"print(json.dumps(pinned_logits._record_one({tier!r})))")
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        got = json.loads(res.stdout.strip().splitlines()[-1])
        if got:
            table[tier] = got
            print(tier, got)
    with open(PINNED, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
