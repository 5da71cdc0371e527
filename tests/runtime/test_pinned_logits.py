"""Both real models' logits at a fixed prompt (prefill, then greedy decode steps) are bit-identical to
the digests recorded before the decode-core refactor (issue 28), for the active kernel tier and at 1 and
2 threads (the invariant makes the thread count irrelevant)."""
import json

import pytest

from oxillama import _core
from pinned_logits import MODELS, PINNED, digests  # tests/runtime/pinned_logits.py
from oxillama.runtime import InferenceEngine


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_logits_match_pinned_digests(request, name, n_threads):
    with open(PINNED) as f:
        table = json.load(f)
    tier = _core.active_tier()
    if tier not in table:
        pytest.skip(f"no digests recorded for the {tier} tier (python tests/runtime/pinned_logits.py)")
    path = request.getfixturevalue(f"{name}_path")
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=n_threads) as engine:
        assert digests(engine) == table[tier][name]
