"""Beam search: width 1 is greedy, width 4 scores at least as well as greedy, the reported
log-probabilities are those of the model (teacher-forced), ordering and the generate hook."""
import numpy as np
import pytest

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.beam import BeamSearchConfig, hypothesis_score

N_NEW = 8   # CI time: each step is one forward per beam
PROMPTS = ["The capital of France is", "Write a haiku about the sea:\n"]
# Batched teacher forcing and one-token forwards give the same logits bit for bit; the beam sums float32
# log-softmax values (measured |diff| 0.3-1.7e-6 per 8 tokens against float64 here).
LOGPROB_TOL = 1e-5


def teacher_forced_logprob(engine, prompt_ids, gen):
    """Sum of log p(gen[i] | prompt, gen[:i]) from one batched forward."""
    engine.reset()
    rows = engine.forward(list(prompt_ids) + list(gen[:-1]), all_logits=True)[len(prompt_ids) - 1:]
    rows = rows.astype(np.float64)
    m = rows.max(-1, keepdims=True)
    log_z = (m + np.log(np.exp(rows - m).sum(-1, keepdims=True)))[:, 0]
    return float((rows[np.arange(len(gen)), gen] - log_z).sum())


def greedy_tokens(engine, prompt, n):
    engine.reset()
    engine.generate(prompt, max_tokens=n, temperature=0)
    n_prompt = len(engine.tokenize(prompt, parse_special=True))
    return engine.tokens[n_prompt:]


def test_width_one_is_greedy(engine):
    prompt = PROMPTS[0]
    gen = greedy_tokens(engine, prompt, N_NEW)
    hyps = engine.beam_generate(prompt, BeamSearchConfig(beam_width=1, max_new_tokens=N_NEW))
    assert len(hyps) == 1
    h = hyps[0]
    assert h.tokens == gen
    assert h.finished == engine.tokenizer.is_eog(gen[-1])
    ids = engine.tokenize(prompt, parse_special=True)
    assert h.logprob == pytest.approx(teacher_forced_logprob(engine, ids, gen), abs=LOGPROB_TOL * len(gen))
    assert engine.generate(prompt, max_tokens=N_NEW, temperature=0, num_beams=1) == \
        engine.detokenize(gen[:-1] if h.finished else gen)


@pytest.mark.parametrize("name,length_penalty", [("smollm2", 0.0), ("smollm2", 1.0), ("gemma3", 1.0)])
def test_width_four_scores_at_least_greedy(request, name, length_penalty):
    engine = request.getfixturevalue(name)
    prompt = PROMPTS[1]
    ids = engine.tokenize(prompt, parse_special=True)
    gen = greedy_tokens(engine, prompt, N_NEW)
    greedy_score = hypothesis_score(teacher_forced_logprob(engine, ids, gen), len(gen), length_penalty)
    hyps = engine.beam_generate(prompt, BeamSearchConfig(beam_width=4, max_new_tokens=N_NEW,
                                                         length_penalty=length_penalty))
    assert 1 <= len(hyps) <= 4
    scores = [h.score for h in hyps]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] >= greedy_score - LOGPROB_TOL
    for h in hyps:
        assert h.score == pytest.approx(hypothesis_score(h.logprob, len(h.tokens), length_penalty))
        assert len(h.tokens) <= N_NEW
        assert h.text == engine.detokenize(h.tokens[:-1] if h.finished else h.tokens)
        assert h.finished == engine.tokenizer.is_eog(h.tokens[-1])
    # the reported sums are the model's: check the best against teacher forcing
    best = hyps[0]
    assert best.logprob == pytest.approx(teacher_forced_logprob(engine, ids, best.tokens),
                                         abs=LOGPROB_TOL * len(best.tokens))
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)   # distinct hypotheses


def test_generate_num_beams_returns_best(smollm2):
    prompt = PROMPTS[0]
    best = smollm2.beam_generate(prompt, beam_width=3, max_new_tokens=8)[0]
    assert smollm2.generate(prompt, max_tokens=8, num_beams=3) == best.text
    assert "".join(smollm2.generate(prompt, max_tokens=8, num_beams=3, stream=True)) == best.text
    # the session holds the prompt afterwards
    assert smollm2.tokens == smollm2.tokenize(prompt, parse_special=True)


def test_early_stopping_off_keeps_searching(smollm2):
    prompt = "Answer yes or no. Is water wet?"
    on = smollm2.beam_generate(prompt, beam_width=2, max_new_tokens=10, early_stopping=True)
    off = smollm2.beam_generate(prompt, beam_width=2, max_new_tokens=10, early_stopping=False)
    assert off[0].score >= on[0].score - 1e-9


def test_refusals(smollm2):
    for bad in (dict(beam_width=0), dict(max_new_tokens=0), dict(beam_width=2.5), dict(length_penalty=float("nan"))):
        with pytest.raises(InvalidArgumentError):
            BeamSearchConfig(**bad)
    with pytest.raises(InvalidArgumentError, match="empty"):
        smollm2.beam_generate([], beam_width=2, max_new_tokens=4)
    with pytest.raises(ContextOverflowError):
        smollm2.beam_generate("Hello", beam_width=2, max_new_tokens=smollm2.n_ctx + 5)
    with pytest.raises(InvalidArgumentError, match="deterministic"):
        smollm2.generate("Hello", max_tokens=4, num_beams=2, temperature=0.7)
    with pytest.raises(InvalidArgumentError, match="combined"):
        smollm2.generate("Hello", max_tokens=4, num_beams=2, speculative="ngram")
    with pytest.raises(InvalidArgumentError, match="not both"):
        smollm2.beam_generate("Hello", BeamSearchConfig(), beam_width=2)
