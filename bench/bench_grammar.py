"""Grammar matcher speed on a 262,144-token vocabulary (Gemma 3's when the model file is present,
else a synthetic one of the same size), and constrained against free decoding on the real models.

    python -m pytest bench/bench_grammar.py --benchmark-only

What the decode loop pays per token: the single-token check always, the full mask only when the
sampled token is rejected. The mask is timed with its caches cleared, in the worst state for JSON
(inside a string, where almost every token is allowed) and in a structural state.

test_decode_json_vs_free is issue 7's target (constrained decode >= 80% of free decode tokens/s
with Grammar.json()): extra_info holds both tokens/s and their ratio.
"""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "grammar"))
from grammar_helpers import GEMMA3, gemma3_vocab  # noqa: E402

from oxillama import hub  # noqa: E402
from oxillama.grammar import Grammar, GrammarMatcher  # noqa: E402
from oxillama.grammar.matcher import shared_masks  # noqa: E402

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
        m._masks.clear()  # time the trie walk, not the per-state caches
        shared_masks(m.vocab).clear()
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


# prompts after which both models tend to write a JSON object of 64 tokens or more
DECODE_PROMPTS = [
    "package.json:\n",
    "The following JSON describes a novel: title, author, year, genres, and a long summary.\n",
    '{"users": [{"name": "Ada", "email": "ada@example.com"}, {"name": "Bob", "email": "bob@example.com"}]}\n\n'
    "The same list with three more users and their cities:\n",
    "A JSON record of a customer of a web shop, with name, email, address, and a list of past orders:\n",
]
DECODE_TOKENS = 64


def _decode_seconds_per_token(engine, prompt, seed, grammar, no_eog):
    """Prefill and the first token untimed, then DECODE_TOKENS - 1 more timed; seconds per token."""
    engine.generate(prompt, max_tokens=1, seed=seed, grammar=grammar, banned_tokens=no_eog)
    t = time.perf_counter()
    out = engine.generate(None, max_tokens=DECODE_TOKENS - 1)
    return (time.perf_counter() - t) / max(len(out.tokens), 1)


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_decode_json_vs_free(benchmark, model):
    """Free and Grammar.json() decoding alternate run by run (the machine may be busy), over
    DECODE_PROMPTS x 2 seeds with the default sampler; the ratio is the median of the per-pair
    ratios. End-of-generation is banned so free runs are full length; a JSON value that closes
    ends its run early, and its tokens/s counts the tokens it made."""
    from oxillama.runtime import InferenceEngine
    with InferenceEngine.from_gguf(hub.pull(model, progress=False), n_ctx=512, n_threads=2) as engine:
        no_eog = tuple(sorted(engine.tokenizer.eog_ids))
        grammar = Grammar.json()
        cases = [(p, seed) for p in DECODE_PROMPTS for seed in (0, 1)]
        _decode_seconds_per_token(engine, cases[0][0], 0, grammar, no_eog)   # warm up: tokenizer trie, caches
        free, json_ = [], []

        def run():
            for prompt, seed in cases:
                free.append(_decode_seconds_per_token(engine, prompt, seed, None, no_eog))
                json_.append(_decode_seconds_per_token(engine, prompt, seed, grammar, no_eog))

        benchmark.pedantic(run, rounds=2, iterations=1)
    free_tps, json_tps = 1 / np.median(free), 1 / np.median(json_)
    benchmark.extra_info["free_tokens_per_s"] = round(free_tps, 1)
    benchmark.extra_info["json_tokens_per_s"] = round(json_tps, 1)
    benchmark.extra_info["json_over_free"] = round(float(np.median(np.array(free) / np.array(json_))), 3)


def _wide_object(n: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)},
            "required": [f"p{i}" for i in range(n)]}


@pytest.mark.parametrize("n", [1000, 5000])
def test_json_schema_compile_scaling(benchmark, n):
    """Compiling an object schema of n required properties (issue 22: 5,000 took 12.7 s when each
    rule's line was counted from the text's start). extra_info: seconds per property, which should
    not grow with n."""
    schema = _wide_object(n)
    benchmark.pedantic(lambda: Grammar.from_json_schema(schema), rounds=2, iterations=1)
    benchmark.extra_info["ms_per_property"] = round(benchmark.stats.stats.median / n * 1e3, 3)
