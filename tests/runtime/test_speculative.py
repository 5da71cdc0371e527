"""Speculative decoding: the acceptance rule against its definition (a chi-square test of the output
distribution), greedy output identical to plain greedy on both real models (n-gram and draft
model), rollback of the session, statistics, refusals."""
import math

import numpy as np
import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.runtime.speculative import (NGramDrafter, SpeculativeEngine, accept_or_resample, layer_draft,
                                          sampler_probs)
from oxillama.sampling import Sampler, SamplerConfig, SamplerRNG

N_DRAWS = 4000
CHI2_ALPHA_Z = 3.09   # one-sided z for alpha = 0.001
N_GEN = 20            # tokens per greedy comparison (CI time: the 262k-vocab gemma head dominates)

REPEAT_PROMPT = ("Copy the following list exactly.\nList: apples, oranges, pears, plums, cherries, grapes, lemons, "
                 "limes, melons, peaches.\nCopy: apples, oranges,")


def chi2_critical(dof: int, z: float = CHI2_ALPHA_Z) -> float:
    """Upper quantile of chi-square(dof) by the Wilson-Hilferty approximation."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: np.ndarray, probs: np.ndarray, n: int) -> tuple[float, int]:
    """Pearson's statistic, categories with expected count < 5 lumped into one."""
    exp = probs * n
    big = exp >= 5
    obs_b, exp_b = list(counts[big]), list(exp[big])
    if (~big).any():
        obs_b.append(counts[~big].sum())
        exp_b.append(exp[~big].sum())
    obs_b, exp_b = np.array(obs_b, float), np.array(exp_b, float)
    keep = exp_b > 0
    assert (obs_b[~keep] == 0).all()   # no draw may land where the target has no mass
    return float(((obs_b[keep] - exp_b[keep]) ** 2 / exp_b[keep]).sum()), int(keep.sum()) - 1


def speculative_draws(p: np.ndarray, q: np.ndarray | None, n: int, seed: int) -> np.ndarray:
    """Token emitted by one speculative step, n times: draft x ~ q (or a fixed x), then the rule."""
    rng = SamplerRNG(seed)
    gen = np.random.default_rng(seed + 1)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        x = int(gen.choice(len(q), p=q)) if q is not None else 0
        _, out[i] = accept_or_resample(p, q, x, rng)
    return out


def test_rule_output_follows_target_on_synthetic_vectors():
    p = np.array([0.05, 0.4, 0.0, 0.25, 0.3])
    q = np.array([0.5, 0.1, 0.2, 0.1, 0.1])   # mass where p has none (token 2): always rejected
    draws = speculative_draws(p, q, N_DRAWS, seed=1)
    stat, dof = chi2_stat(np.bincount(draws, minlength=len(p)), p, N_DRAWS)
    assert stat < chi2_critical(dof)
    # a deterministic draft (n-gram): q is a point mass on token 0
    draws = speculative_draws(p, None, N_DRAWS, seed=2)
    stat, dof = chi2_stat(np.bincount(draws, minlength=len(p)), p, N_DRAWS)
    assert stat < chi2_critical(dof)


def test_rule_accepts_with_ratio_and_detects_a_wrong_distribution():
    p = np.array([0.2, 0.8])
    q = np.array([0.8, 0.2])
    rng = SamplerRNG(3)
    kept = sum(accept_or_resample(p, q, 0, rng)[0] for _ in range(N_DRAWS))
    assert abs(kept / N_DRAWS - 0.25) < 4 * math.sqrt(0.25 * 0.75 / N_DRAWS)   # min(1, 0.2/0.8)
    assert all(accept_or_resample(p, q, 1, rng) == (True, 1) for _ in range(50))   # p/q >= 1: always kept
    # the test has power: the draft's own distribution is rejected as a sample of p
    draws = np.random.default_rng(0).choice(2, size=N_DRAWS, p=q)
    stat, dof = chi2_stat(np.bincount(draws, minlength=2), p, N_DRAWS)
    assert stat > chi2_critical(dof)


def test_rule_refuses_a_draft_token_its_draft_cannot_produce():
    with pytest.raises(InvalidArgumentError, match="probability 0"):
        accept_or_resample(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 1, SamplerRNG(0))


def test_first_speculated_token_follows_target_on_real_model(smollm2):
    """p and q from SmolLM2 and its 10-layer draft at a fixed context (computed once), under a
    top-k 12 sampler: the tokens the rule emits are distributed as the target's p."""
    smollm2.reset()
    ids = smollm2.tokenize("My favourite fruit is the")
    p_logits = smollm2.forward(ids)
    draft = layer_draft(smollm2, 10)
    try:
        q_logits = draft.forward(ids)
    finally:
        draft.close()
    cfg = SamplerConfig(temperature=1.0, top_k=12, top_p=1.0, min_p=0.0)
    p = sampler_probs(Sampler(cfg, seed=0), p_logits, ids)
    q = sampler_probs(Sampler(cfg, seed=0), q_logits, ids)
    support = np.flatnonzero((p > 0) | (q > 0))
    assert 12 <= len(support) <= 24 and abs(p.sum() - 1) < 1e-9
    assert np.abs(p - q).sum() > 0.2   # the draft really differs, so rejections happen
    p_s, q_s = p[support], q[support]
    draws = speculative_draws(p_s, q_s, N_DRAWS, seed=5)
    stat, dof = chi2_stat(np.bincount(draws, minlength=len(support)), p_s, N_DRAWS)
    assert stat < chi2_critical(dof)


def test_ngram_drafter_proposes_what_followed_the_latest_match():
    d = NGramDrafter(ngram_max=3, ngram_min=1)
    seq = np.array([5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 6, 7], dtype=np.int32)
    # "6 7" occurred at 1 and 6; the latest earlier one (6) was followed by 2 3 6 7
    assert d.propose(seq, 3)[0] == [2, 3, 6]
    assert d.propose(seq, 10)[0] == [2, 3, 6, 7]   # no further than the end of the history
    assert d.propose(np.array([1, 2, 3], dtype=np.int32), 4)[0] == []   # never seen: no draft
    with pytest.raises(InvalidArgumentError):
        NGramDrafter(ngram_max=1, ngram_min=2)


def _plain_greedy(engine, prompt, n):
    engine.reset()
    text = engine.generate(prompt, max_tokens=n, temperature=0)
    return text, list(engine.tokens)


def _assert_same_greedy(tokens, plain):
    """Speculative decoding changes no greedy token: the k-token verify computes bit for bit the logits that
    one-token decode computes (the project's invariant), so the texts are equal, not merely close."""
    n = min(len(tokens), len(plain))
    assert tokens[:n] == plain[:n]


@pytest.mark.parametrize("draft_kind", ["ngram", "layers"])
def test_greedy_speculative_equals_plain_greedy(engine, draft_kind):
    n_prompt = len(engine.tokenize(REPEAT_PROMPT, parse_special=True))
    _, plain = _plain_greedy(engine, REPEAT_PROMPT, N_GEN + 4)   # the first N_GEN are plain greedy's N_GEN
    draft = "ngram" if draft_kind == "ngram" else layer_draft(engine, engine.plan.n_layer * 2 // 3)
    engine.reset()
    try:
        spec = SpeculativeEngine(engine, draft, k=4)
        out = spec.generate(REPEAT_PROMPT, max_tokens=N_GEN, temperature=0)
        if draft_kind == "layers":   # the draft's cache was rolled back too: it holds a prefix of the session
            assert 0 < draft.n_past <= len(engine.tokens)
            assert draft.tokens[:draft.n_past] == engine.tokens[:draft.n_past]
    finally:
        if draft_kind != "ngram":
            draft.close()
    tokens = list(engine.tokens)   # same session as plain greedy: prompt, output, last token pending
    ended = engine.tokenizer.is_eog(tokens[-1])
    assert ended or len(tokens) == n_prompt + N_GEN
    assert out == engine.detokenize(tokens[n_prompt:len(tokens) - ended])
    st = spec.stats
    assert st.emitted == len(tokens) - n_prompt - ended
    assert st.drafted > 0 and st.accepted + st.rejected <= st.drafted
    assert st.rounds < st.emitted   # some rounds produced more than one token
    if not ended:   # the session continues like a plain one
        engine.generate(None, max_tokens=4, temperature=0)
    _assert_same_greedy(list(engine.tokens), plain)


def test_generate_speculative_ngram_hook(smollm2):
    _, plain = _plain_greedy(smollm2, REPEAT_PROMPT, N_GEN)
    smollm2.reset()
    text = smollm2.generate(REPEAT_PROMPT, max_tokens=N_GEN, temperature=0, speculative="ngram")
    n_prompt = len(smollm2.tokenize(REPEAT_PROMPT, parse_special=True))
    assert text == smollm2.detokenize(smollm2.tokens[n_prompt:n_prompt + N_GEN])
    _assert_same_greedy(list(smollm2.tokens), plain)
    st = smollm2.last_speculative_stats
    assert st.accepted > 0 and 0 < st.rate <= 1
    cut = text[12:16]
    pieces = list(smollm2.generate(REPEAT_PROMPT, max_tokens=N_GEN, temperature=0, speculative="ngram", stream=True,
                                   stop=[cut]))
    assert len(pieces) > 1 and "".join(pieces) == text[:text.find(cut)]


def test_sampled_speculative_is_reproducible_and_consistent(smollm2):
    kw = dict(max_tokens=16, temperature=0.9, top_k=20, seed=11)
    a = SpeculativeEngine(smollm2, "ngram", k=3)
    out_a = a.generate(REPEAT_PROMPT, **kw)
    toks_a = list(smollm2.tokens)
    b = SpeculativeEngine(smollm2, "ngram", k=3)
    assert b.generate(REPEAT_PROMPT, **kw) == out_a and smollm2.tokens == toks_a
    st = a.stats
    assert st.accepted + st.rejected <= st.drafted and st.bonus <= st.rounds
    n_prompt = len(smollm2.tokenize(REPEAT_PROMPT, parse_special=True))
    assert st.emitted == len(toks_a) - n_prompt or smollm2.tokenizer.is_eog(toks_a[-1])
    # the target's cache holds exactly the session minus the pending token
    assert smollm2.n_past == len(toks_a) - 1


def test_sampled_layer_draft_is_reproducible(smollm2):
    draft = layer_draft(smollm2, 20)
    try:
        kw = dict(max_tokens=6, temperature=0.8, top_k=30, seed=7)
        a = SpeculativeEngine(smollm2, draft, k=3)
        out = a.generate("Once upon a time, in a small village,", **kw)
        assert SpeculativeEngine(smollm2, draft, k=3).generate("Once upon a time, in a small village,", **kw) == out
        st = a.stats
        assert st.drafted > 0 and st.accepted + st.rejected <= st.drafted and st.emitted <= 6
    finally:
        draft.close()


def test_refusals(smollm2, gemma3):
    import oxillama
    assert oxillama.SpeculativeEngine is SpeculativeEngine
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        SpeculativeEngine(smollm2, gemma3)
    with pytest.raises(InvalidArgumentError, match="k"):
        SpeculativeEngine(smollm2, "ngram", k=0)
    with pytest.raises(InvalidArgumentError, match="ngram"):
        SpeculativeEngine(smollm2, "medusa")
    with pytest.raises(InvalidArgumentError, match="different engine"):
        SpeculativeEngine(smollm2, smollm2)
    with pytest.raises(InvalidArgumentError, match="n_layer"):
        layer_draft(smollm2, smollm2.plan.n_layer)
    with pytest.raises(InvalidArgumentError, match="mirostat"):
        SpeculativeEngine(smollm2, "ngram").generate("Hi", max_tokens=2, mirostat=2)
