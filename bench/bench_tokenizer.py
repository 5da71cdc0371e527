"""Tokenizer speed: encoding 1 MB of text (target: well under a second), decoding it, streaming.

    python -m pytest bench/bench_tokenizer.py --benchmark-only
"""
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_MB = 1_000_000


def _one_mb_of(kind: str) -> str:
    if kind == "code":  # our own source: indentation, punctuation, identifiers
        src_dir = os.path.join(ROOT, "oxillama", "tokenizer")
        text = "".join(open(os.path.join(src_dir, f), encoding="utf-8").read()
                       for f in sorted(os.listdir(src_dir)) if f.endswith(".py"))
    else:  # the golden corpus: prose, code, whitespace runs, many scripts, emoji, special-token texts
        with open(os.path.join(ROOT, "tests", "tokenizer", "data", "goldens_smollm2.json"), encoding="utf-8") as f:
            text = "\n".join(c["text"] for c in json.load(f)["cases"])
    return (text * (ONE_MB // len(text) + 1))[:ONE_MB]


_MODELS = {"smollm2": "smollm2-135m", "gemma3": "gemma3-270m"}


def _metadata(name: str) -> dict:
    from oxillama import hub
    from oxillama.errors import DownloadError
    from oxillama.gguf import GGUFFile

    try:
        path = hub.pull(_MODELS[name], progress=False)
    except DownloadError as e:
        pytest.skip(f"model {name} unavailable: {e}")
    with GGUFFile(path) as f:
        return dict(f.metadata)


@pytest.fixture(scope="module", params=list(_MODELS))
def tokenizer(request):
    from oxillama.tokenizer import Tokenizer

    return Tokenizer.from_metadata(_metadata(request.param))


@pytest.mark.parametrize("kind", ["mixed", "code"])
def test_encode_1mb(benchmark, tokenizer, kind):
    text = _one_mb_of(kind)
    ids = benchmark.pedantic(tokenizer.encode, args=(text,), rounds=3, iterations=1)
    benchmark.extra_info["tokens"] = len(ids)


def test_encode_1mb_parse_special(benchmark, tokenizer):
    text = _one_mb_of("mixed")
    benchmark.pedantic(tokenizer.encode, args=(text,), kwargs={"parse_special": True}, rounds=3, iterations=1)


def test_decode_1mb(benchmark, tokenizer):
    ids = tokenizer.encode(_one_mb_of("mixed"))
    benchmark.pedantic(tokenizer.decode, args=(ids,), rounds=3, iterations=1)


def test_stream_10k_tokens(benchmark, tokenizer):
    ids = tokenizer.encode(_one_mb_of("mixed"))[:10_000]

    def run():
        detok = tokenizer.detokenizer()
        return "".join([detok.add(t) for t in ids]) + detok.flush()

    benchmark.pedantic(run, rounds=3, iterations=1)


@pytest.mark.parametrize("name", list(_MODELS))
def test_build_from_metadata(benchmark, name):
    """Building the tokenizer (Gemma 3: 262k tokens; its SPM merge table comes from the cache after the
    first build)."""
    from oxillama.tokenizer import Tokenizer

    md = _metadata(name)
    benchmark.pedantic(Tokenizer.from_metadata, args=(md,), rounds=2, iterations=1)
