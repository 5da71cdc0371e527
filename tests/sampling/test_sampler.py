"""Sampler end to end: argmax cases, the final draw's distribution, determinism, save/restore,
mirostat's surprise control, input validation."""
import json

import msgpack
import numpy as np
import pytest

from oxillama.errors import SamplerError
from oxillama.sampling import MirostatV1, MirostatV2, Sampler, SamplerChain, SamplerConfig, TopK, top_logprobs

from sampling_helpers import CHI2_CRIT_1E3, chi_square, logits_from_probs, softmax

PLAIN = dict(top_k=0, top_p=1.0, min_p=0.0, temperature=1.0)   # every truncation off
N_VOCAB_LARGE = 20000


def random_rows(rng, n_rows, n_vocab, scale=3.0):
    return (rng.standard_normal((n_rows, n_vocab)) * scale).astype(np.float32)


@pytest.mark.parametrize("n_vocab", [10, N_VOCAB_LARGE])
def test_temperature_zero_and_top_k_one_are_argmax(rng, n_vocab):
    rows = random_rows(rng, 20, n_vocab)
    rows[0, 3] = rows[0, 7] = rows[0].max() + 1   # a tie: the lower id wins, as np.argmax
    greedy = Sampler(SamplerConfig(temperature=0.0), seed=1)
    top1 = Sampler(SamplerConfig(top_k=1, temperature=1.5), seed=2)
    for row in rows:
        assert greedy.sample(row) == int(np.argmax(row))
        assert top1.sample(row) == int(np.argmax(row))


@pytest.mark.parametrize("config", [
    SamplerConfig(**PLAIN),                                          # draw over the full row (C path)
    SamplerConfig(top_k=5, top_p=1.0, min_p=0.0, temperature=1.0),   # draw over a narrowed set
])
def test_weighted_draw_passes_chi_square(config):
    p = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01])
    x = logits_from_probs(p)
    n_draws = 20000
    if config.top_k == 5:
        p = p[:5] / p[:5].sum()
    sampler = Sampler(config, seed=42)
    counts = np.bincount([sampler.sample(x) for _ in range(n_draws)], minlength=len(p))[:len(p)]
    assert chi_square(counts, p) < CHI2_CRIT_1E3[len(p) - 1]


def test_temperature_changes_the_draw_distribution():
    p = np.array([0.5, 0.3, 0.2])
    x = logits_from_probs(p)
    t = 0.5
    expected = softmax(x / t)
    sampler = Sampler(SamplerConfig(top_k=0, top_p=1.0, min_p=0.0, temperature=t), seed=3)
    counts = np.bincount([sampler.sample(x) for _ in range(12000)], minlength=3)
    assert chi_square(counts, expected) < 13.816  # chi-square, 2 degrees of freedom, 1e-3


def test_same_seed_same_tokens_and_different_seed_differs(rng):
    rows = random_rows(rng, 60, 3000, scale=1.0)
    cfg = SamplerConfig(repeat_penalty=1.1, xtc_probability=0.5, xtc_threshold=0.05)

    def run(seed):
        s = Sampler(cfg, seed=seed)
        toks = []
        for row in rows:
            toks.append(s.sample(row, toks))
        return toks

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("config", [
    SamplerConfig(),
    SamplerConfig(**PLAIN),
    SamplerConfig(mirostat=2, mirostat_tau=3.0),
    SamplerConfig(mirostat=1, mirostat_tau=3.0),
    SamplerConfig(xtc_probability=0.5, xtc_threshold=0.02, dry_multiplier=0.8, repeat_penalty=1.2),
])
def test_save_restore_continues_identically(rng, config):
    rows = random_rows(rng, 40, 2000, scale=1.5)
    s = Sampler(config, seed=11)
    toks = []
    for row in rows[:20]:
        toks.append(s.sample(row, toks))
    state = s.get_state()
    # the state survives JSON and msgpack
    state = json.loads(json.dumps(state))
    state = msgpack.unpackb(msgpack.packb(state))

    def continue_from(sampler, history):
        history = list(history)
        for row in rows[20:]:
            history.append(sampler.sample(row, history))
        return history[20:]

    expected = continue_from(s, toks)
    restored = Sampler(config, seed=999)   # another seed: the state must override it
    restored.set_state(state)
    assert continue_from(restored, toks) == expected
    if config.mirostat:
        assert restored.mirostat_mu == pytest.approx(s.mirostat_mu)


def zipf_row(n_vocab, s=1.1):
    p = 1.0 / np.arange(1, n_vocab + 1) ** s
    return logits_from_probs(p / p.sum())


@pytest.mark.parametrize("selector", [MirostatV2, MirostatV1])
def test_mirostat_keeps_observed_surprise_near_tau(selector):
    # a Zipf-like distribution whose entropy is far above tau: without control the average
    # surprise would be about 7.5 bits
    x = zipf_row(5000)
    tau = 3.0
    sel = selector(tau=tau, eta=0.1)
    chain = SamplerChain([], sel)
    s = Sampler(SamplerConfig(**PLAIN), seed=5, chain=chain)
    surprises = []
    for _ in range(1500):
        s.sample(x)
        surprises.append(sel.last_surprise)
    mean = float(np.mean(surprises[300:]))
    assert abs(mean - tau) < 0.5, mean
    uncontrolled = float(-(softmax(x) * np.log2(softmax(x))).sum())
    assert uncontrolled > tau + 3


def test_mirostat_mu_starts_at_twice_tau_and_moves():
    s = Sampler(SamplerConfig(mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2), seed=0)
    assert s.mirostat_mu == 8.0
    s.sample(zipf_row(100))
    assert s.mirostat_mu != 8.0


def test_caller_logits_are_not_modified(rng):
    row = random_rows(rng, 1, 5000)[0]
    before = row.copy()
    s = Sampler(SamplerConfig(repeat_penalty=1.5, logit_bias={3: 5.0}, banned_tokens=(1,), dry_multiplier=1.0,
                              top_k=0, temperature=0.7), seed=0)
    for _ in range(3):
        s.sample(row, [3, 4, 3, 4, 3, 4])
    np.testing.assert_array_equal(row, before)


@pytest.mark.parametrize("config", [
    SamplerConfig(temperature=0.0),                                  # greedy: the scan's first max
    SamplerConfig(),                                                 # top-k first, then top-p, min-p, temperature
    SamplerConfig(top_k=3000, top_p=0.9, temperature=0.8),          # a top-k that sorts the row
    SamplerConfig(**PLAIN),                                          # the draw over the full row
    SamplerConfig(banned_tokens=(5, 17, 900)),                       # bans, then top-k (the server's ignore_eos)
    SamplerConfig(banned_tokens=(17,), top_k=1, temperature=0.5),
])
def test_chains_that_read_the_row_in_place_draw_as_a_copy_does(rng, config):
    """A chain that only reads the whole row runs on the caller's array (no copy): the caller's row is
    untouched and, seed for seed, the tokens are those of the same chain run on a copy (a zero logit bias
    puts a stage that writes first, so the row is copied)."""
    rows = random_rows(rng, 40, 5000)
    rows[0, 11] = rows[0, 900] = rows[0].max() + 1    # a tie for the greedy choice: the lower id
    rows[1, 17] = rows[1].max() + 5                    # a banned token on top
    rows[2, :] = -np.inf
    rows[2, [5, 17, 40]] = [3.0, 4.0, 1.0]             # only one token left once the banned ones are out
    before = rows.copy()
    in_place = Sampler(config, seed=7)
    copied = Sampler(config.replace(logit_bias={0: 0.0}), seed=7)
    hist = np.arange(30, dtype=np.int32)
    assert [in_place.sample(r, hist) for r in rows] == [copied.sample(r, hist) for r in rows]
    np.testing.assert_array_equal(rows, before)


def test_banned_and_biased_tokens():
    x = np.zeros(6, np.float32)
    s = Sampler(SamplerConfig(temperature=0.0, logit_bias={4: 3.0}, banned_tokens=(4,)), seed=0)
    assert s.sample(x) == 0          # 4 is biased up but banned: lowest-id argmax of the rest
    s = Sampler(SamplerConfig(temperature=0.0, logit_bias={4: 3.0}), seed=0)
    assert s.sample(x) == 4
    s = Sampler(SamplerConfig(**PLAIN, banned_tokens=(0, 1, 2, 3, 5)), seed=0)
    assert {s.sample(x) for _ in range(20)} == {4}


def test_masked_tokens_are_never_drawn(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    x[::2] = -np.inf
    s = Sampler(SamplerConfig(**PLAIN), seed=0)
    assert all(s.sample(x) % 2 == 1 for _ in range(300))


@pytest.mark.parametrize("bad,match", [
    (np.array([0.0, np.nan, 1.0], np.float32), "NaN"),
    (np.array([0.0, np.inf, 1.0], np.float32), r"\+inf"),
    (np.full(3, -np.inf, np.float32), "every logit is -inf"),
    (np.zeros((1, 3), np.float32), "1-D"),
    (np.zeros(4, np.float32), "4 entries"),
])
def test_invalid_logits_raise(bad, match):
    s = Sampler(SamplerConfig(), seed=0, n_vocab=3)
    with pytest.raises(SamplerError, match=match):
        s.sample(bad)


def test_vocabulary_is_fixed_by_the_first_row():
    s = Sampler(SamplerConfig(), seed=0)
    s.sample(np.zeros(10, np.float32))
    with pytest.raises(SamplerError, match="vocabulary has 10"):
        s.sample(np.zeros(11, np.float32))


def test_bias_outside_vocabulary_raises():
    with pytest.raises(SamplerError, match="outside the vocabulary"):
        Sampler(SamplerConfig(logit_bias={50: 1.0}), seed=0).sample(np.zeros(10, np.float32))


def test_custom_chain_and_user_processor():
    calls = []

    def proc(tokens, logits):
        calls.append(len(tokens))
        logits[:] = -np.inf
        logits[2] = 0.0
        return logits

    s = Sampler(SamplerConfig(**PLAIN), seed=0, logits_processors=[proc])
    assert s.sample(np.zeros(5, np.float32), [1, 1]) == 2
    assert calls == [2]
    s = Sampler(seed=0, chain=SamplerChain([TopK(2)]))
    x = np.array([0, 5, 4, 0], np.float32)
    assert {s.sample(x) for _ in range(50)} == {1, 2}


def test_top_logprobs():
    x = np.array([1.0, 3.0, 2.0, 3.0], np.float32)
    ids, lp = top_logprobs(x, 3)
    assert ids.tolist() == [1, 3, 2]
    np.testing.assert_allclose(lp, np.log(softmax(x))[[1, 3, 2]], rtol=1e-5)
    with pytest.raises(SamplerError):
        top_logprobs(x, -1)


def test_state_validation():
    s = Sampler(SamplerConfig(), seed=0)
    with pytest.raises(SamplerError):
        s.set_state({"version": 99})
    with pytest.raises(SamplerError):
        s.set_state({"version": 1, "rng": {"bit_generator": "MT19937"}, "chain": s.chain.get_state()})


def test_sampler_top_logprobs_are_the_raw_distribution(rng):
    x = rng.standard_normal(3000).astype(np.float32)
    s = Sampler(SamplerConfig(temperature=0.3, top_k=2), seed=0)
    ids, lp = s.top_logprobs(x, 5)
    ref = np.log(softmax(x))
    assert ids.tolist() == np.argsort(-x)[:5].tolist()
    np.testing.assert_allclose(lp, ref[ids], rtol=1e-5, atol=1e-6)
    assert np.exp(lp).sum() < 1.0


@pytest.mark.parametrize("config", [SamplerConfig(temperature=0.0), SamplerConfig(), SamplerConfig(**PLAIN)])
def test_banning_every_token_raises(config):
    s = Sampler(config.replace(banned_tokens=(0, 1, 2)), seed=0)
    with pytest.raises(SamplerError, match="every token"):
        s.sample(np.zeros(3, np.float32))
