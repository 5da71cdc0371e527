"""Decode speed with speculative decoding on the real models (greedy, so every variant produces
the same text). Targets: n-gram (prompt lookup) drafting >= 1.5x the plain decode tokens/s on a
prompt that asks to repeat a passage with an edit; a layer draft (the target's first 3/4 layers)
reported with its acceptance rate. Beam search cost per step is reported too.

    python -m pytest bench/bench_decoding.py --benchmark-only --benchmark-columns=mean,rounds

Tokens/s, speedup over plain decoding and acceptance statistics are in each row's extra_info
(--benchmark-json, or -s for the log lines).
"""
import logging

import pytest

from oxillama.runtime import InferenceEngine
from oxillama.runtime.speculative import SpeculativeEngine, layer_draft

log = logging.getLogger("oxillama.bench")

N_NEW = 64
PASSAGE = ("The river town of Elmsford wakes slowly. At six the baker opens his shutters and sets out the first "
           "loaves of rye; at seven the ferry leaves for the far bank with farmers, schoolchildren and a dog "
           "that nobody owns. By noon the market square is full of voices, and the clock on the town hall, "
           "which has been five minutes fast for forty years, strikes twelve before anyone is ready for lunch.")
PROMPTS = {
    "repeat": "Passage:\n" + PASSAGE + "\n\nThe same passage, repeated exactly:\n",
    "edit": ("Below is a passage, then the same passage copied word for word with the town renamed from Elmsford "
             "to Ashby.\n\nPassage:\n" + PASSAGE + "\n\nCopy with the new name:\nThe river town of Ashby"),
}
MODELS = {"smollm2": "smollm2-135m", "gemma3": "gemma3-270m"}
_plain_seconds: dict[tuple[str, str], float] = {}


def _pulled(name: str) -> str:
    # bench/ does not see tests/conftest.py; same skip rule
    from oxillama import hub
    from oxillama.errors import DownloadError
    try:
        return str(hub.pull(name, progress=False))
    except DownloadError as e:
        pytest.skip(f"model {name} unavailable: {e}")


@pytest.fixture(scope="module", params=list(MODELS))
def engine(request):
    with InferenceEngine.from_gguf(_pulled(MODELS[request.param]), n_ctx=1024) as e:
        e.bench_name = request.param
        yield e


def _prompt_done(engine, prompt):
    """Setup of each round: the prompt in the cache, so only decoding is timed."""
    engine.reset()
    engine.forward(engine.tokenize(PROMPTS[prompt], parse_special=True))
    return (), {}


def _report(benchmark, engine, prompt, kind, stats=None):
    secs = benchmark.stats.stats.mean
    info = {"tokens_per_s": N_NEW / secs}
    key = (engine.bench_name, prompt)
    if kind == "plain":
        _plain_seconds[key] = secs
    elif key in _plain_seconds:
        info["speedup"] = _plain_seconds[key] / secs
    if stats is not None:
        info.update(stats.as_dict())
    benchmark.extra_info.update(info)
    log.warning("%s %s %s: %s", engine.bench_name, prompt, kind, {k: round(v, 3) for k, v in info.items()})


@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_decode_plain(benchmark, engine, prompt):
    out = benchmark.pedantic(lambda: engine.generate(None, max_tokens=N_NEW, temperature=0),
                             setup=lambda: _prompt_done(engine, prompt), rounds=2, iterations=1)
    assert out
    _report(benchmark, engine, prompt, "plain")


@pytest.mark.parametrize("k", [4, 8])
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_decode_ngram(benchmark, engine, prompt, k):
    spec = SpeculativeEngine(engine, "ngram", k=k)

    def run():
        spec.stats.__init__()
        return spec.generate(None, max_tokens=N_NEW, temperature=0)
    assert benchmark.pedantic(run, setup=lambda: _prompt_done(engine, prompt), rounds=2, iterations=1)
    _report(benchmark, engine, prompt, f"ngram k={k}", spec.stats)


def test_decode_layer_draft(benchmark, engine):
    prompt = "edit"
    draft = layer_draft(engine, engine.plan.n_layer * 3 // 4)
    spec = SpeculativeEngine(engine, draft, k=3)

    def run():
        spec.stats.__init__()
        return spec.generate(None, max_tokens=N_NEW, temperature=0)
    try:
        assert benchmark.pedantic(run, setup=lambda: _prompt_done(engine, prompt), rounds=1, iterations=1)
    finally:
        draft.close()
    _report(benchmark, engine, prompt, f"layer draft {draft.n_layer_draft}/{engine.plan.n_layer} k=3", spec.stats)


def test_beam_search_width4(benchmark, engine):
    hyps = benchmark.pedantic(lambda: engine.beam_generate("Write a haiku about the sea:\n", beam_width=4,
                                                           max_new_tokens=16), rounds=1, iterations=1)
    assert hyps
    benchmark.extra_info["best_score"] = hyps[0].score
