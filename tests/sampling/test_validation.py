"""The one validation layer for generate() keywords (issue 22, and issue 21's stop=123): every wrong
type or range is an InvalidArgumentError naming the keyword, before anything runs."""
import os

import numpy as np
import pytest

from oxillama.errors import InvalidArgumentError, SamplerError
from oxillama.sampling import Sampler, SamplerConfig
from oxillama.sampling import validate_generate_kwargs
from oxillama.sampling.validation import MAX_NUM_BEAMS, check_generate_kwargs, check_prompt

TINY = os.path.join(os.path.dirname(__file__), "..", "models", "data", "llama.gguf")

BAD = [  # (keywords, the name the error must give)
    (dict(stop=123), "stop"), (dict(stop=True), "stop"), (dict(stop=[None]), "stop[0]"),
    (dict(stop_strings=["a", 5]), "stop_strings[1]"), (dict(stop=["x"] * 1000), "stop"),
    (dict(dry_sequence_breakers=True), "dry_sequence_breakers"), (dict(dry_sequence_breakers="x"), "dry_sequence_breakers"),
    (dict(dry_sequence_breakers=[None]), "dry_sequence_breakers[0]"),
    (dict(banned_tokens=True), "banned_tokens"), (dict(banned_tokens="x"), "banned_tokens"),
    (dict(banned_tokens=[None]), "banned_tokens[0]"), (dict(suppress_tokens=-1e300), "suppress_tokens"),
    (dict(suppress_tokens=[10**9]), "suppress_tokens[0]"), (dict(samplers=True), "samplers"),
    (dict(samplers=[None]), "samplers[0]"), (dict(bad_words_ids=True), "bad_words_ids"),
    (dict(bad_words_ids="x"), "bad_words_ids"), (dict(bad_words_ids=[None]), "bad_words_ids[0]"),
    (dict(logit_bias={2**64: 1.0}), "logit_bias"), (dict(logit_bias={10**6: 1.0}), "logit_bias"),
    (dict(logit_bias={"x": 1.0}), "logit_bias"), (dict(logit_bias={1: "a"}), "logit_bias[1]"),
    (dict(logit_bias=[1, 2]), "logit_bias"), (dict(num_beams=np.array([2, 3])), "num_beams"),
    (dict(tfs_z=np.array([1.0, 2.0])), "tfs_z"), (dict(stream=np.array([1, 0])), "stream"),
    (dict(num_beams=2**63), "num_beams"), (dict(num_beams=MAX_NUM_BEAMS + 1), "num_beams"),
    (dict(max_tokens=2**64), "max_tokens"), (dict(max_tokens=3.5), "max_tokens"), (dict(seed="x"), "seed"),
    (dict(seed=2**80), "seed"), (dict(logprobs=10**9), "logprobs"), (dict(logits_processor=5), "logits_processor"),
    (dict(stopping_criteria=[print, 5]), "stopping_criteria[1]"), (dict(top_k=10**12), "top_k"),
    (dict(temperature="hot"), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=10**400), "temperature"), (dict(do_sample="yes"), "do_sample"), (dict(stream="yes"), "stream"),
    (dict(speculative_k=0), "speculative_k"), (dict(callback=5), "callback"), (dict(response_format=5), "response_format"),
]


@pytest.mark.parametrize("kw, name", BAD, ids=[f"{n}-{i}" for i, (_, n) in enumerate(BAD)])
def test_bad_keywords_name_themselves(kw, name):
    with pytest.raises(InvalidArgumentError) as info:
        validate_generate_kwargs(kw, n_vocab=288)
    assert str(info.value).startswith(name)


def test_numpy_scalars_become_python_numbers():
    out = check_generate_kwargs({"top_k": np.int64(5), "temperature": np.float32(0.5), "stream": np.bool_(True),
                                 "banned_tokens": np.array([1, 2]), "seed": np.uint64(7)}, n_vocab=10)
    assert out == {"top_k": 5, "temperature": 0.5, "stream": True, "banned_tokens": [1, 2], "seed": 7}
    assert all(type(v) in (int, float, bool, list) for v in out.values())
    config, other = validate_generate_kwargs({"temp": np.float64(0.25), "max_new_tokens": np.int32(9)})
    assert config.temperature == 0.25 and other == {"max_tokens": 9}


def test_unknown_keywords_pass_through_for_the_caller():
    assert check_generate_kwargs({"frobnicate": object}) == {"frobnicate": object}


def test_sampler_errors_stay_sampler_errors():
    with pytest.raises(SamplerError):       # SamplerError is an InvalidArgumentError
        validate_generate_kwargs({"top_p": "x"})


@pytest.mark.parametrize("prompt", [5, 5.0, [1.5], [[1]], [True], b"x", ["a"], {"a": 1}, np.zeros((2, 2), int),
                                    [-1], [288]])
def test_bad_prompts(prompt):
    with pytest.raises(InvalidArgumentError, match="prompt"):
        check_prompt(prompt, n_vocab=288)


def test_sampler_config_refuses_wrong_containers():
    for bad in (dict(banned_tokens=True), dict(samplers=3), dict(dry_sequence_breakers=5), dict(top_k=2**40),
                dict(logit_bias={2**40: 1.0})):
        with pytest.raises(SamplerError):
            SamplerConfig(**bad)


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-38, 1e-30])
def test_tiny_temperature_is_the_greedy_limit(temperature):
    """1/T overflowing float32 used to make every weight NaN (a bare IndexError)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=300).astype(np.float32) * 10
    got = Sampler(SamplerConfig(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0), seed=1).sample(logits)
    assert got == int(np.argmax(logits))


@pytest.mark.parametrize("value", [3.4e38, -3.4e38, 1e38])
def test_extreme_logits_sample(value):
    """A row of float32's largest values (a snapshot's saved logits, say) samples instead of raising."""
    logits = np.full(50, value, dtype=np.float32)
    logits[7] = -np.inf
    for temperature in (0.8, 0.1, 1.0, 2.0):
        t = Sampler(SamplerConfig(temperature=temperature), seed=3).sample(logits)
        assert 0 <= t < 50 and t != 7


@pytest.fixture(scope="module")
def engine():
    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf(TINY, n_ctx=64) as e:
        yield e


@pytest.mark.parametrize("kw, name", BAD[:12] + [(dict(prompt=5), "prompt")])
def test_generate_raises_before_running(engine, kw, name):
    kw = dict(kw)
    prompt = kw.pop("prompt", [1, 2, 3])
    before = engine.n_tokens_run
    with pytest.raises(InvalidArgumentError, match=name.replace("[", r"\[").replace("]", r"\]")):
        engine.generate(prompt, max_tokens=2, **kw)
    assert engine.n_tokens_run == before


def test_generate_accepts_numpy_values(engine):
    out = engine.generate(np.array([1, 2, 3]), max_tokens=np.int64(3), temperature=np.float32(0),
                          stream=np.bool_(False))
    assert len(out.tokens) <= 3
    assert engine.generate([1, 2, 3], max_tokens=2, temperature=1e-320).tokens == \
        engine.generate([1, 2, 3], max_tokens=2, temperature=0).tokens
