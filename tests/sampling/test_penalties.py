"""Logit bias, banned tokens, user processors, repetition / frequency / presence penalties, DRY."""

import numpy as np
import pytest

from oxillama.errors import SamplerError
from oxillama.sampling import (DRY, BanTokens, FrequencyPresencePenalty, LogitBias, LogitsProcessorStage,
                               RepetitionPenalty, dry_breakers_from_vocab)

from sampling_helpers import kept, logits_from_probs, softmax

PROB_TOL = 1e-5


def test_repetition_penalty_divides_positive_multiplies_negative():
    x = np.array([2.0, -1.0, 3.0, 0.5, -2.0], np.float32)
    out = RepetitionPenalty(2.0, last_n=64)([0, 1, 0], x)
    np.testing.assert_allclose(out, [1.0, -2.0, 3.0, 0.5, -2.0])


def test_repetition_penalty_window():
    x = np.ones(5, np.float32)
    hist = [0, 1, 2, 3]
    out = RepetitionPenalty(2.0, last_n=2)(hist, x)      # only 2 and 3 are in the window
    np.testing.assert_allclose(out, [1, 1, 0.5, 0.5, 1])
    out = RepetitionPenalty(2.0, last_n=-1)(hist, x)     # all of the history
    np.testing.assert_allclose(out, [0.5, 0.5, 0.5, 0.5, 1])
    out = RepetitionPenalty(2.0, last_n=0)(hist, x)      # off
    np.testing.assert_allclose(out, x)


def test_frequency_and_presence():
    x = np.zeros(4, np.float32)
    out = FrequencyPresencePenalty(frequency=0.5, presence=1.0, last_n=-1)([0, 0, 0, 2], x)
    np.testing.assert_allclose(out, [-(3 * 0.5 + 1.0), 0, -(0.5 + 1.0), 0])


# expected probabilities from llama.cpp's tests/test-sampling.cpp (test_penalties): uniform
# logits over 5 tokens, then penalties over the given history
@pytest.mark.parametrize("hist,expected,rep,freq,pres", [
    ([0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977], 1.0, 5.0, 5.0),
])
def test_penalties_match_llama_cpp(hist, expected, rep, freq, pres):
    x = logits_from_probs(np.full(5, 0.2))
    x = RepetitionPenalty(rep, last_n=len(hist))(hist, x)
    x = FrequencyPresencePenalty(freq, pres, last_n=len(hist))(hist, x)
    np.testing.assert_allclose(softmax(x), expected, atol=PROB_TOL)


def test_penalty_rejects_history_outside_vocabulary():
    with pytest.raises(SamplerError, match="outside the vocabulary"):
        RepetitionPenalty(1.1)([0, 9], np.zeros(4, np.float32))


def test_logit_bias_and_ban():
    x = np.zeros(5, np.float32)
    out = LogitBias({1: 2.5, 3: -np.inf})([], x)
    np.testing.assert_allclose(out, [0, 2.5, 0, -np.inf, 0])
    assert kept(BanTokens([0, 4])([], x)) == {1, 2, 3}
    with pytest.raises(SamplerError, match="outside the vocabulary"):
        LogitBias({7: 1.0})([], x)


def test_logits_processor_sees_history_and_copy():
    seen = {}

    def proc(tokens, logits):
        seen["tokens"] = tokens.tolist()
        logits[2] += 10.0  # in place, as llama-cpp-python processors often do
        return logits

    x = np.zeros(4, np.float32)
    out = LogitsProcessorStage(proc)([3, 1], x)
    assert seen["tokens"] == [3, 1]
    np.testing.assert_allclose(out, [0, 0, 10, 0])
    assert np.all(x == 0)  # the caller's row is untouched
    with pytest.raises(SamplerError, match="returned None"):
        LogitsProcessorStage(lambda t, l: None)([], x)
    with pytest.raises(SamplerError, match="NaN"):
        LogitsProcessorStage(lambda t, l: l * np.nan)([], x)


# --- DRY ---------------------------------------------------------------------------------------

# expected probabilities from llama.cpp's tests/test-sampling.cpp (test_dry):
# (probs, history, expected, multiplier, base, allowed_length, last_n, breakers)
LLAMA_CPP_DRY_CASES = [
    ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 1.1, 2, 4, []),
    ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, 6, [[3]]),
    ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, 7, []),
]


@pytest.mark.parametrize("probs,hist,expected,mult,base,allowed,last_n,breakers", LLAMA_CPP_DRY_CASES)
def test_dry_matches_llama_cpp(probs, hist, expected, mult, base, allowed, last_n, breakers):
    x = logits_from_probs(probs)
    out = DRY(mult, base, allowed, last_n, breakers)(hist, x)
    np.testing.assert_allclose(softmax(out), expected, atol=PROB_TOL)


def dry_reference(h, multiplier, base, allowed, breakers):
    """DRY by its definition, with plain loops: for each earlier position j, the longest common
    suffix of h[:j+1] and h, not reaching back past the last breaker; the token after j gets
    multiplier * base ** (n - allowed) for the longest such n >= allowed."""
    n = len(h)
    if n <= allowed:
        return {}
    limit = n
    for i in range(n):  # distance from the end
        p = n - 1 - i
        if (h[p],) in breakers:
            limit = i
            break
    if limit < allowed:
        return {}
    best = {}
    for j in range(n - 1):
        length = 0
        while length < limit and j - length >= 0 and h[j - length] == h[n - 1 - length]:
            length += 1
        if length >= allowed:
            t = h[j + 1]
            best[t] = max(best.get(t, 0), length)
    return {t: multiplier * base ** (L - allowed) for t, L in best.items() if (t,) not in breakers}


def test_dry_matches_definition_on_random_histories(rng):
    for _ in range(200):
        vocab = int(rng.integers(2, 6))
        h = rng.integers(0, vocab, int(rng.integers(0, 40))).tolist()
        allowed = int(rng.integers(0, 4))
        breakers = [(int(rng.integers(0, vocab)),)] if rng.random() < 0.5 else []
        stage = DRY(0.8, 1.75, allowed, -1, breakers)
        toks, pen = stage.penalties(np.array(h, dtype=np.int64))
        got = dict(zip(toks.tolist(), pen.tolist()))
        ref = dry_reference(h, 0.8, 1.75, allowed, set(breakers))
        assert got.keys() == ref.keys(), (h, allowed, breakers)
        for t in ref:
            assert got[t] == pytest.approx(ref[t], rel=1e-12)


def test_dry_penalty_grows_with_repeat_length():
    h = [5, 6, 7, 8, 9, 5, 6, 7, 8]   # "5 6 7 8" repeats: 9 would extend it to length 5
    toks, pen = DRY(1.0, 2.0, 2, -1).penalties(np.array(h))
    assert dict(zip(toks.tolist(), pen.tolist())) == {9: 2.0 ** (4 - 2)}


def test_dry_multi_token_breaker_and_exponent_cap():
    # breaker (3, 4): a repeat may not reach back across "3 4"
    h = [0, 1, 2, 3, 4, 0, 1, 2]
    toks, _ = DRY(1.0, 1.75, 2, -1, [(3, 4)]).penalties(np.array(h))
    assert toks.tolist() == [3]   # repeat "0 1 2" (length 3) inside the limit: 3 would extend it
    h = [0, 1, 3, 4, 0, 1]
    toks, _ = DRY(1.0, 1.75, 2, -1, [(3, 4)]).penalties(np.array(h))
    assert toks.tolist() == [3]   # "0 1" then 3 (only single-token breakers are exempt)
    h = [0, 1, 3, 4, 1]
    toks, _ = DRY(1.0, 1.75, 2, -1, [(3, 4)]).penalties(np.array(h))
    assert toks.tolist() == []    # limit is 1 token < allowed length
    long = np.tile(np.arange(3), 400)
    _, pen = DRY(1.0, 3.0, 2, -1).penalties(long)
    assert np.all(np.isfinite(pen)) and pen.max() < np.finfo(np.float32).max


def test_dry_breakers_from_vocab():
    texts = ["a", "\n", "b\n", "x:", "yz", ":", "q*"]

    def tokenize(s):
        return {"\n": [1], ":": [5], "*": [99]}.get(s, [])

    got = dry_breakers_from_vocab(["\n", ":"], texts, tokenize)
    assert set(got) == {(1,), (2,), (3,), (5,)}
    # a two-character breaker split over tokens: "z" ends token 4, "\n" follows as token 1
    got = dry_breakers_from_vocab(["z\n"], texts, tokenize)
    assert (4, 1) in got


def test_dry_breakers_reject_nul_and_scale_to_many_heads(rng):
    with pytest.raises(SamplerError, match="NUL"):
        dry_breakers_from_vocab(["\n"], ["a", "b\x00"])
    # tens of thousands of breaker heads, as a 262k vocabulary gives
    breakers = [(int(t),) for t in range(0, 60000, 2)]
    stage = DRY(1.0, 1.75, 2, -1, breakers)
    h = np.array([5, 7, 9, 5, 7, 9, 5, 7], dtype=np.int64)  # 5 7 9 repeats; 9 would extend it
    toks, _ = stage.penalties(h)
    assert toks.tolist() == [9]
    h2 = np.array([5, 7, 9, 4, 5, 7], dtype=np.int64)       # 4 is a breaker: the limit is 2 tokens
    toks, _ = stage.penalties(h2)
    assert toks.tolist() == [9]
