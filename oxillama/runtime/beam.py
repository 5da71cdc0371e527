"""Beam search: keep the beam_width most likely continuations, extend each by its best tokens,
keep the best beam_width again, until enough have ended or max_new_tokens.

Score of a hypothesis: sum of token log-probabilities / n_tokens ** length_penalty, where the
tokens are the generated ones, the end-of-generation token included for a finished hypothesis
(length_penalty 0: the plain sum; > 0 favours longer outputs). As in Hugging Face's beam search,
at each step 2 * beam_width candidates are ranked; an end-of-generation candidate among the top
beam_width finishes a hypothesis, the best beam_width others continue. early_stopping=True stops
as soon as beam_width hypotheses have finished; False stops when no running beam can still beat
the worst finished one.

The prompt runs once, in the engine's own cache, and is copied once into a SequencePool. Each beam is a
sequence of the pool; a child forks its parent (sharing its KV pages, copying only the page it writes
into), and each step runs one token of every beam in ONE batched forward.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.batch import SequencePool
from oxillama.sampling.logprobs import top_logprobs
from oxillama.sampling.validation import MAX_NUM_BEAMS

log = logging.getLogger("oxillama.beam")

__all__ = ["BeamSearchConfig", "BeamHypothesis", "beam_search", "hypothesis_score"]


@dataclass(frozen=True)
class BeamSearchConfig:
    beam_width: int = 4
    max_new_tokens: int = 256
    length_penalty: float = 1.0
    early_stopping: bool = True

    def __post_init__(self):
        for name in ("beam_width", "max_new_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InvalidArgumentError(f"{name} must be an int, got {v!r}")
        if not 1 <= self.beam_width <= MAX_NUM_BEAMS:
            raise InvalidArgumentError(f"beam_width must be in [1, {MAX_NUM_BEAMS}], got {self.beam_width}")
        if self.max_new_tokens < 1:
            raise InvalidArgumentError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not math.isfinite(self.length_penalty):
            raise InvalidArgumentError(f"length_penalty must be finite, got {self.length_penalty}")


def hypothesis_score(logprob: float, n_tokens: int, length_penalty: float) -> float:
    """sum of log-probabilities / n_tokens ** length_penalty."""
    return logprob / (max(n_tokens, 1) ** length_penalty)


@dataclass
class BeamHypothesis:
    """tokens: generated ids (ending with the end-of-generation token if finished); text: their
    text without it; logprob: the summed log-probability of tokens; score: length-normalised."""
    tokens: list[int]
    text: str
    logprob: float
    finished: bool
    score: float = field(default=0.0)


def beam_search(engine, prompt, config: BeamSearchConfig) -> list[BeamHypothesis]:
    """Up to beam_width hypotheses, best score first. The engine's session is left holding the prompt."""
    if not isinstance(config, BeamSearchConfig):
        raise InvalidArgumentError(f"config must be a BeamSearchConfig, got {type(config).__name__}")
    ids = engine.encode_prompt(prompt)
    W, max_new, lp_pow = config.beam_width, config.max_new_tokens, config.length_penalty
    n_prompt = len(ids)
    if n_prompt + max_new > engine.n_ctx + 1:
        raise ContextOverflowError(f"prompt of {n_prompt} tokens + max_new_tokens={max_new} exceed "
                                   f"n_ctx={engine.n_ctx}")
    eog = engine.tokenizer.eog_ids
    engine.reset()
    engine._prefill(ids)   # the prompt runs once, as generate() runs it; its K/V are then copied once into the pool
    first = engine.session.logits.copy()

    # parents and their children live side by side during a step: 2 W sequences, + 1 for the prompt
    pool = SequencePool(engine, 2 * W + 1, n_ctx=n_prompt + max_new, n_batch=2 * W + 1)
    root = pool.adopt(engine.kv, ids, engine.recurrent.read(0) if engine.recurrent is not None else None)
    pool.set_loras(root, engine._active_loras())   # forks inherit them
    logits = {root: first}

    # running beams: (summed logprob, generated tokens, sequence id in the pool)
    beams: list[tuple[float, list[int], int]] = [(0.0, [], root)]
    finished: list[tuple[float, list[int], float]] = []   # (score, tokens, logprob)
    n_cand = 2 * W
    for step in range(max_new):
        cands = []   # (summed logprob, beam index, token)
        for bi, (lp_sum, _, seq) in enumerate(beams):
            tok_ids, tok_lp = top_logprobs(logits[seq], n_cand)
            cands.extend((lp_sum + float(lp), bi, int(t)) for t, lp in zip(tok_ids, tok_lp))
        cands.sort(key=lambda c: -c[0])   # stable: ties keep beam order, then token order
        chosen = []
        for rank, (s, bi, t) in enumerate(cands):
            if t in eog:
                if rank < W:
                    toks = beams[bi][1] + [t]
                    finished.append((hypothesis_score(s, len(toks), lp_pow), toks, s))
                continue
            chosen.append((s, bi, t))
            if len(chosen) == W:
                break
        cur_len = step + 1
        if len(finished) >= W:
            if config.early_stopping:
                break
            worst = sorted(f[0] for f in finished)[-W]
            best_running = max((c[0] for c in chosen), default=-math.inf)
            # Hugging Face's heuristic: the best running sum, normalised at the current length
            if hypothesis_score(best_running, cur_len, lp_pow) <= worst:
                break
        if not chosen:
            break
        if step == max_new - 1:
            beams = [(s, beams[bi][1] + [t], -1) for s, bi, t in chosen]
            break
        # every child forks its parent (pages shared, copy-on-write); then all run in one step
        children = [pool.fork(beams[bi][2]) for _, bi, _ in chosen]
        for _, _, seq in beams:
            pool.remove(seq)
        out = pool.step([(c, [t], False) for c, (_, _, t) in zip(children, chosen)])
        logits = {c: row.copy() for c, row in zip(children, out)}
        beams = [(s, beams[bi][1] + [t], c) for c, (s, bi, t) in zip(children, chosen)]

    hyps = [(score, toks, lp, True) for score, toks, lp in finished]
    if len(finished) < W:   # ran out of tokens: the running beams count as (unfinished) hypotheses
        hyps += [(hypothesis_score(s, len(toks), lp_pow), toks, s, False) for s, toks, _ in beams]
    hyps.sort(key=lambda h: -h[0])
    out = []
    for score, toks, lp, fin in hyps[:W]:
        text_ids = toks[:-1] if fin else toks
        out.append(BeamHypothesis(tokens=list(toks), text=engine.detokenize(text_ids), logprob=lp,
                                  finished=fin, score=score))
    log.debug("beam search: width %d, %d finished, best score %.4f", W, len(finished), out[0].score if out else 0.0)
    return out
