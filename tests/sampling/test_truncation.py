"""Each truncation stage against its mathematical definition, on hand-made distributions."""
import math

import numpy as np
import pytest

from oxillama.errors import SamplerError
from oxillama.sampling import (XTC, EpsilonCutoff, EtaCutoff, MinP, SamplerRNG, Temperature, TopA, TopK, TopP,
                               TypicalP)

from sampling_helpers import kept, logits_from_probs, softmax

HIST = np.zeros(0, np.int64)
# sizes: a toy row, and one large enough to take the C paths the real 262k vocabulary takes
SIZES = [12, 5000]


def random_probs(rng, n, peaky=True):
    """A random distribution; peaky ones look like a language model's (a few likely tokens)."""
    x = rng.standard_normal(n) * (3.0 if peaky else 0.3)
    return softmax(x)


def ref_top_p(p, top_p, min_keep=1):
    order = np.lexsort((np.arange(len(p)), -p))
    cum = np.cumsum(p[order])
    last = int(np.argmax(cum >= top_p)) + 1 if cum[-1] >= top_p else len(p)
    return set(order[:max(last, min_keep)].tolist())


def test_top_p_hand_made():
    p = np.array([0.1, 0.4, 0.2, 0.3])
    x = logits_from_probs(p)
    assert kept(TopP(0.35)(HIST, x)) == {1}          # 0.4 reaches 0.35
    assert kept(TopP(0.65)(HIST, x)) == {1, 3}       # 0.4 + 0.3 = 0.7 >= 0.65
    assert kept(TopP(0.75)(HIST, x)) == {1, 3, 2}    # 0.9
    assert kept(TopP(0.95)(HIST, x)) == {0, 1, 2, 3}
    assert kept(TopP(0.35, min_keep=3)(HIST, x)) == {1, 3, 2}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("peaky", [True, False])
def test_top_p_smallest_prefix_reaching_p(rng, n, peaky):
    for _ in range(5):
        p = random_probs(rng, n, peaky)
        top_p = float(rng.uniform(0.3, 0.97))
        cum = np.cumsum(np.sort(p)[::-1])
        if np.min(np.abs(cum - top_p)) < 1e-5:  # a float32 cut this close is a coin toss
            continue
        got = kept(TopP(top_p)(HIST, logits_from_probs(p)))
        assert got == ref_top_p(p, top_p)


@pytest.mark.parametrize("n", SIZES)
def test_min_p_keeps_p_at_least_min_p_times_max(rng, n):
    for _ in range(5):
        p = random_probs(rng, n)
        min_p = float(rng.uniform(0.01, 0.5))
        ratio = p / p.max()
        if np.min(np.abs(ratio - min_p)) < 1e-5:
            continue
        got = kept(MinP(min_p)(HIST, logits_from_probs(p)))
        assert got == set(np.flatnonzero(p >= min_p * p.max()).tolist())


def test_min_p_min_keep():
    p = np.array([0.9, 0.05, 0.03, 0.02])
    assert kept(MinP(0.5)(HIST, logits_from_probs(p))) == {0}
    assert kept(MinP(0.5, min_keep=3)(HIST, logits_from_probs(p))) == {0, 1, 2}


@pytest.mark.parametrize("n", SIZES)
def test_top_k(rng, n):
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    for k in (1, 3, 10):
        assert kept(TopK(k)(HIST, x)) == set(np.argsort(-x)[:k].tolist())
    assert kept(TopK(0)(HIST, x)) == set(range(n))       # off
    assert kept(TopK(n + 5)(HIST, x)) == set(range(n))


def test_top_k_ties_keep_lower_ids():
    x = np.array([1, 3, 3, 3, 0], np.float32)
    assert kept(TopK(2)(HIST, x)) == {1, 2}


@pytest.mark.parametrize("n", SIZES)
def test_top_a(rng, n):
    for _ in range(5):
        p = random_probs(rng, n)
        a = float(rng.uniform(0.05, 1.0))
        thr = a * p.max() ** 2
        if np.min(np.abs(p - thr)) < 1e-6 * thr:
            continue
        assert kept(TopA(a)(HIST, logits_from_probs(p))) == set(np.flatnonzero(p >= thr).tolist())


@pytest.mark.parametrize("n", SIZES)
def test_epsilon_cutoff(rng, n):
    p = random_probs(rng, n)
    eps = float(np.sort(p)[-5] * 0.999)  # keeps exactly 5
    got = kept(EpsilonCutoff(eps)(HIST, logits_from_probs(p)))
    assert got == set(np.flatnonzero(p >= eps).tolist()) and len(got) == 5


@pytest.mark.parametrize("n", SIZES)
def test_eta_cutoff(rng, n):
    for eta in (3e-4, 2e-3, 0.05):
        p = random_probs(rng, n)
        h = -(p * np.log(p)).sum()
        cut = min(eta, math.sqrt(eta) * math.exp(-h))
        ref = set(np.flatnonzero(p >= cut).tolist()) or {int(np.argmax(p))}
        assert kept(EtaCutoff(eta)(HIST, logits_from_probs(p))) == ref


def ref_typical(p, mass, min_keep=1):
    h = -(p * np.log(p)).sum()
    score = np.abs(-np.log(p) - h)
    order = np.lexsort((np.arange(len(p)), score))
    cum = np.cumsum(p[order])
    last = len(p)
    for i in range(len(p)):
        if cum[i] > mass and i + 1 >= min_keep:
            last = i + 1
            break
    return set(order[:last].tolist())


def test_typical_hand_made():
    # entropy of this row is 1.349 nats; -log p = 0.92, 1.20, 1.61, 3.0, 3.0: the 0.3 token is
    # the most typical (|1.20 - 1.35| = 0.15), then 0.2 (0.26), then 0.4 (0.43)
    p = np.array([0.4, 0.3, 0.2, 0.05, 0.05])
    x = logits_from_probs(p)
    assert kept(TypicalP(0.25)(HIST, x)) == {1}
    assert kept(TypicalP(0.45)(HIST, x)) == {1, 2}
    assert kept(TypicalP(0.8)(HIST, x)) == {0, 1, 2}
    assert kept(TypicalP(0.25, min_keep=2)(HIST, x)) == {1, 2}


@pytest.mark.parametrize("n", SIZES)
def test_typical_matches_definition(rng, n):
    for mass in (0.2, 0.5, 0.9):
        p = random_probs(rng, n)
        assert kept(TypicalP(mass)(HIST, logits_from_probs(p))) == ref_typical(p, mass)


def test_xtc_removes_top_choices_but_the_least_likely_of_them():
    p = np.array([0.05, 0.4, 0.05, 0.3, 0.2])
    x = logits_from_probs(p)
    always = XTC(probability=1.0, threshold=0.15)
    assert kept(always(HIST, x)) == {0, 2, 4}       # 0.4 and 0.3 go, 0.2 (least above 0.15) stays
    assert kept(XTC(1.0, 0.35)(HIST, x)) == set(range(5))   # one token above: nothing happens
    assert kept(XTC(1.0, 0.6)(HIST, x)) == set(range(5))    # threshold > 0.5: off
    assert kept(XTC(0.0, 0.15)(HIST, x)) == set(range(5))   # probability 0: off
    assert kept(XTC(1.0, 0.15, min_keep=4)(HIST, x)) == set(range(5))  # would leave 3 < min_keep


def test_xtc_fires_with_its_probability():
    p = np.array([0.05, 0.4, 0.05, 0.3, 0.2])
    x = logits_from_probs(p)
    stage = XTC(probability=0.3, threshold=0.15)
    rng = SamplerRNG(7)
    n = 2000
    fired = sum(len(kept(stage(HIST, x, rng=rng))) == 3 for _ in range(n))
    assert abs(fired / n - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)


@pytest.mark.parametrize("n", SIZES)
def test_temperature_scales_logits(rng, n):
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    out = Temperature(0.5)(HIST, x)
    np.testing.assert_allclose(out, x / 0.5, rtol=1e-6)
    assert kept(Temperature(0.0)(HIST, x)) == {int(np.argmax(x))}


def test_dynamic_temperature_follows_normalised_entropy():
    p = np.array([0.7, 0.1, 0.1, 0.05, 0.05])
    x = logits_from_probs(p)
    h = -(p * np.log(p)).sum()
    t_min, t_max, expo = 0.2, 1.6, 1.5
    expect_t = t_min + (t_max - t_min) * (h / math.log(5)) ** expo
    out = Temperature(0.9, dynatemp_range=0.7, dynatemp_exponent=expo)(HIST, x)
    np.testing.assert_allclose(out, x / expect_t, rtol=1e-5)
    # a uniform row has normalised entropy 1: T = T_max
    np.testing.assert_allclose(Temperature(0.9, 0.7, expo)(HIST, np.zeros(4, np.float32)), 0.0)
    y = np.array([1.0, 0.0, 0.0, 0.0], np.float32)
    hy = -(softmax(y) * np.log(softmax(y))).sum() / math.log(4)
    np.testing.assert_allclose(Temperature(1.0, 0.5, 1.0)(HIST, y), y / (0.5 + 1.0 * hy), rtol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: TopP(0.0), lambda: TopP(1.5), lambda: TopP(0.9, min_keep=0), lambda: MinP(-0.1),
    lambda: Temperature(-1.0), lambda: TypicalP(0.0), lambda: EpsilonCutoff(1.0), lambda: XTC(2.0),
    lambda: TopK(1.5),
])
def test_invalid_stage_parameters_raise(make):
    with pytest.raises(SamplerError):
        make()
