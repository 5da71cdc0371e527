"""Grammar matcher speed on a 262,144-token vocabulary (Gemma 3's when the model file is present,
else a synthetic one of the same size).

    python -m pytest bench/bench_grammar.py --benchmark-only

What the decode loop pays per token: the single-token check always, the full mask only when the
sampled token is rejected. The mask is timed with its per-state cache cleared, in the worst state
for JSON (inside a string, where almost every token is allowed) and in a structural state.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "grammar"))
from grammar_helpers import GEMMA3, gemma3_vocab  # noqa: E402

from oxillama.grammar import Grammar, GrammarMatcher  # noqa: E402

N_VOCAB = 262_144


def synthetic_vocab(n=N_VOCAB, seed=0):
    """n distinct tokens shaped like a BPE vocabulary: 256 bytes, then words of 2-12 letters,
    some with a leading space, some punctuation and digits."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"etaoinshrdlucmfwypvbgkjqxz" * 3 + b"ETAOINS0123456789.,:;\"{}[]()-_'!?", np.uint8)
    out, seen = [bytes([b]) for b in range(256)], set()
    while len(out) < n - 1:
        k = int(rng.integers(2, 13))
        t = bytes(alphabet[rng.integers(len(alphabet), size=k)])
        if rng.random() < 0.4:
            t = b" " + t
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out + [b""], [n - 1]


@pytest.fixture(scope="module", params=["gemma3", "synthetic"])
def vocab(request):
    if request.param == "gemma3":
        if not os.path.exists(GEMMA3):
            pytest.skip("Gemma 3 model file not available")
        v, eog = gemma3_vocab()
    else:
        v, eog = synthetic_vocab()
    assert len(v) == N_VOCAB
    return v, eog


PREFIXES = {"in_string": b'{"name": "Ada', "structural": b'{"name": "Ada", "tags": [1'}


@pytest.mark.parametrize("where", list(PREFIXES))
def test_fill_mask_json(benchmark, vocab, where):
    m = GrammarMatcher(Grammar.json(), *vocab)
    m.accept_bytes(PREFIXES[where])
    mask = np.zeros(m.n_vocab, dtype=bool)

    def run():
        m._masks.clear()  # time the trie walk, not the per-state cache
        m.fill_mask(mask)

    benchmark(run)
    assert mask.any()


def test_single_token_check_json(benchmark, vocab):
    m = GrammarMatcher(Grammar.json(), *vocab)
    m.accept_bytes(PREFIXES["in_string"])
    toks = np.random.default_rng(0).integers(0, m.n_vocab, 1000).tolist()

    def run():
        for t in toks:
            m.is_token_allowed(t)

    benchmark(run)  # per call: the reported time / 1000


def test_matcher_construction(benchmark, vocab):
    # the trie is cached by content, so this is the cost a second generate() call pays
    GrammarMatcher(Grammar.json(), *vocab)
    benchmark(lambda: GrammarMatcher(Grammar.json(), *vocab))
