"""Stages that remove unlikely (or, for XTC, the likeliest) tokens. Each keeps >= min_keep.

Probabilities are the softmax over the tokens still in play. On the full vocabulary every stage
works from C passes (max, normaliser, entropy, top-k heap, threshold filter, radix select for
top-p); none sorts the vocabulary except typical-p, whose order (by distance to the entropy) no
threshold gives (it partitions first and sorts only what it needs).
"""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling.base import Stage, StepContext
from oxillama.sampling.candidates import Candidates

__all__ = ["TopK", "TopP", "MinP", "TypicalP", "TopA", "EpsilonCutoff", "EtaCutoff", "XTC"]


def _check_min_keep(min_keep) -> int:
    if isinstance(min_keep, bool) or not isinstance(min_keep, int) or min_keep < 1:
        raise SamplerError(f"min_keep must be an int >= 1, got {min_keep!r}")
    return min_keep


class TopK(Stage):
    """Keep the k most likely tokens (k <= 0: off). Ties at the cut keep the lower token id."""

    name = "top_k"

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise SamplerError(f"top_k must be an int, got {k!r}")
        self.k = int(k)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.k > 0:
            cand.keep_top(self.k)


class TopP(Stage):
    """Nucleus sampling: keep the smallest set of most likely tokens whose probability mass
    reaches p (the token that crosses p is kept). p = 1: off."""

    name = "top_p"

    def __init__(self, p: float, min_keep: int = 1):
        if not 0 < p <= 1:
            raise SamplerError(f"top_p must be in (0, 1], got {p}")
        self.p = float(p)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.p < 1.0:
            cand.keep_top_p(self.p, self.min_keep)


class MinP(Stage):
    """Keep tokens with p >= min_p * p_max, i.e. logit >= max_logit + ln(min_p). 0: off."""

    name = "min_p"

    def __init__(self, min_p: float, min_keep: int = 1):
        if not 0 <= min_p <= 1:
            raise SamplerError(f"min_p must be in [0, 1], got {min_p}")
        self.min_p = float(min_p)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.min_p <= 0.0:
            return
        cand.keep_logit_ge(cand.max() + math.log(self.min_p), self.min_keep)


class TopA(Stage):
    """Keep tokens with p >= a * p_max**2 (koboldcpp's top-a). 0: off."""

    name = "top_a"

    def __init__(self, a: float, min_keep: int = 1):
        if not a >= 0:
            raise SamplerError(f"top_a must be >= 0, got {a}")
        self.a = float(a)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.a <= 0.0:
            return
        # log p >= log a + 2 log p_max  <=>  logit >= log a + 2 max - log_z
        cand.keep_logit_ge(math.log(self.a) + 2 * cand.max() - cand.log_z(), self.min_keep)


class EpsilonCutoff(Stage):
    """Keep tokens with p >= epsilon (Hewitt et al. 2022; Hugging Face's epsilon_cutoff). 0: off."""

    name = "epsilon_cutoff"

    def __init__(self, epsilon: float, min_keep: int = 1):
        if not 0 <= epsilon < 1:
            raise SamplerError(f"epsilon_cutoff must be in [0, 1), got {epsilon}")
        self.epsilon = float(epsilon)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.epsilon <= 0.0:
            return
        cand.keep_logit_ge(math.log(self.epsilon) + cand.log_z(), self.min_keep)


class EtaCutoff(Stage):
    """Keep tokens with p >= min(eta, sqrt(eta) * exp(-H)), H the entropy in nats (Hewitt et al.
    2022's eta-sampling; Hugging Face's eta_cutoff). 0: off."""

    name = "eta_cutoff"

    def __init__(self, eta: float, min_keep: int = 1):
        if not 0 <= eta < 1:
            raise SamplerError(f"eta_cutoff must be in [0, 1), got {eta}")
        self.eta = float(eta)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.eta <= 0.0:
            return
        h = cand.entropy()
        cutoff = min(self.eta, math.sqrt(self.eta) * math.exp(-h))
        cand.keep_logit_ge(math.log(cutoff) + cand.log_z(), self.min_keep)


class TypicalP(Stage):
    """Locally typical sampling (Meister et al. 2022): order tokens by |-log p - H| (H the
    entropy) and keep them in that order until their mass exceeds p. 1.0: off."""

    name = "typical_p"

    def __init__(self, p: float, min_keep: int = 1):
        if not 0 < p <= 1:
            raise SamplerError(f"typical_p must be in (0, 1], got {p}")
        self.p = float(p)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.p >= 1.0 or len(cand) < 2:
            return
        h = cand.entropy()
        log_z = cand.log_z()
        logp = cand.logits.astype(np.float64) - log_z  # full vocabulary: one 2 MB temporary
        score = np.abs(-logp - h)
        n = len(score)
        k = min(n, 1024)
        while True:
            part = np.argpartition(score, k - 1)[:k] if k < n else np.arange(n)
            order = part[np.lexsort((part, score[part]))]
            cum = np.cumsum(np.exp(logp[order]))
            # llama.cpp: stop once the mass is > p and at least min_keep are in
            cut = int(np.searchsorted(cum, self.p, side="right")) + 1
            if cut <= k or k == n:
                break
            k = min(n, k * 8)
        cut = min(max(cut, self.min_keep), len(order))
        cand.keep(order[:cut])


class XTC(Stage):
    """Exclude top choices: with probability `probability`, if two or more tokens have
    p >= threshold, remove all of them but the least likely (keeping >= min_keep tokens).
    Draws one number from the sampler's RNG per step when enabled. threshold > 0.5: off."""

    name = "xtc"

    def __init__(self, probability: float, threshold: float = 0.1, min_keep: int = 1):
        if not 0 <= probability <= 1 or not 0 <= threshold <= 1:
            raise SamplerError(f"XTC needs probability and threshold in [0, 1], got {probability}, {threshold}")
        self.probability = float(probability)
        self.threshold = float(threshold)
        self.min_keep = _check_min_keep(min_keep)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        if self.probability <= 0.0 or self.threshold > 0.5 or len(cand) < 2:
            return
        if ctx.rng is None:
            raise SamplerError("XTC needs the sampler's RNG")
        if ctx.rng.random() > self.probability:
            return
        # p >= threshold  <=>  logit >= log(threshold) + log_z
        thr = (math.log(self.threshold) if self.threshold > 0 else -math.inf) + cand.log_z()
        above = np.flatnonzero(cand.logits >= thr)
        if len(above) < 2 or len(cand) - (len(above) - 1) < self.min_keep:
            return
        # the least likely of those above the threshold stays (ties: the higher id stays, as the
        # last of them in llama.cpp's descending order)
        above_ids = above if cand.full else cand.ids[above]
        weakest = above[np.lexsort((-above_ids, cand.logits[above]))[0]]
        cand.remove_positions(above[above != weakest])
