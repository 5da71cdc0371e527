"""Selectors, the last stage: greedy, the weighted draw, mirostat v1 and v2."""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling
from oxillama.sampling.base import Selector, StepContext
from oxillama.sampling.candidates import Candidates

__all__ = ["Greedy", "WeightedDraw", "MirostatV1", "MirostatV2"]


def _draw(cand: Candidates, u: float) -> tuple[int, float]:
    """(token, its probability) drawn with probability softmax(logits) over the candidates: the
    first entry whose running weight passes u * total (u in [0, 1))."""
    m = cand.max()
    if cand.full:
        w = cand.ws.weights
        s_w, _ = _csampling.exp_sum(cand.logits, m, 1.0, w)
        i = int(_csampling.pick(w, len(cand.logits), u * s_w))
        return i, float(w[i]) / s_w
    w = np.exp(cand.logits.astype(np.float64) - m)
    cum = np.cumsum(w)
    i = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if i >= len(cum):  # rounding at u -> 1: the last entry with weight
        i = int(np.flatnonzero(w > 0)[-1])
    return int(cand.ids[i]), float(w[i] / cum[-1])


class Greedy(Selector):
    """The most likely token (ties: the lowest id, as np.argmax)."""

    name = "greedy"

    def select(self, cand: Candidates, ctx: StepContext) -> int:
        cand.max()  # raises if every token is masked
        if cand.full:
            return int(np.argmax(cand.logits))
        if cand.is_sorted:
            return int(cand.ids[0])
        best = cand.logits.max()
        return int(cand.ids[cand.logits == best].min())


class WeightedDraw(Selector):
    """Draw one token with probability softmax(logits) over the candidates (one RNG number)."""

    name = "dist"

    def select(self, cand: Candidates, ctx: StepContext) -> int:
        if ctx.rng is None:
            raise SamplerError("the weighted draw needs the sampler's RNG")
        if len(cand) == 1:
            ctx.rng.random()  # one number per step whatever the set size keeps streams aligned
            return int(cand.token_ids()[0])
        return _draw(cand, ctx.rng.random())[0]


class _Mirostat(Selector):
    """Shared state: mu, the surprise budget (bits), starts at 2 * tau and is carried between
    steps; after each draw mu -= eta * (surprise - tau), surprise = -log2 p(token) in the
    truncated, renormalised distribution."""

    def __init__(self, tau: float = 5.0, eta: float = 0.1):
        if not tau >= 0 or not eta >= 0:
            raise SamplerError(f"mirostat tau and eta must be >= 0, got {tau}, {eta}")
        self.tau = float(tau)
        self.eta = float(eta)
        self.mu = 2.0 * self.tau
        self.last_surprise = math.nan

    def get_state(self):
        return {"mu": self.mu}

    def set_state(self, state) -> None:
        try:
            mu = float(state["mu"])
        except (TypeError, KeyError, ValueError):
            raise SamplerError(f"mirostat state must be {{'mu': float}}, got {state!r}") from None
        if math.isnan(mu):
            raise SamplerError("mirostat mu is NaN")
        self.mu = mu

    def reset(self) -> None:
        self.mu = 2.0 * self.tau

    def _finish(self, cand: Candidates, ctx: StepContext) -> int:
        """Draw from the (already truncated) candidates and update mu."""
        if ctx.rng is None:
            raise SamplerError("mirostat needs the sampler's RNG")
        tok, p = _draw(cand, ctx.rng.random())
        self.last_surprise = -math.log2(p)
        self.mu -= self.eta * (self.last_surprise - self.tau)
        return tok


class MirostatV2(_Mirostat):
    """Mirostat 2.0 (Basu et al. 2021): keep tokens with surprise -log2 p <= mu (at least the
    most likely one), draw, update mu. No sort: p >= 2**-mu is a logit threshold."""

    name = "mirostat_v2"

    def select(self, cand: Candidates, ctx: StepContext) -> int:
        # -log2 p <= mu  <=>  logit >= log_z - mu * ln 2
        cand.keep_logit_ge(cand.log_z() - self.mu * math.log(2.0), 1)
        return self._finish(cand, ctx)


class MirostatV1(_Mirostat):
    """Mirostat 1.0 (Basu et al. 2021), as llama.cpp: fit the Zipf exponent s from the top m
    probabilities, choose k = ((eps * 2**mu) / (1 - n_vocab**-eps)) ** (1/s) with eps = s - 1,
    keep the top k, draw, update mu."""

    name = "mirostat_v1"

    def __init__(self, tau: float = 5.0, eta: float = 0.1, m: int = 100):
        super().__init__(tau, eta)
        if m < 1:
            raise SamplerError(f"mirostat m must be >= 1, got {m}")
        self.m = int(m)

    def select(self, cand: Candidates, ctx: StepContext) -> int:
        n_vocab = ctx.n_vocab
        logp = cand.peek_top(self.m).astype(np.float64) - cand.log_z()
        logp = logp[np.isfinite(logp)]
        k = 1
        if len(logp) >= 2:
            # least squares through the origin of b_i = log(p_i / p_{i+1}) on t_i = log((i+2)/(i+1))
            i = np.arange(len(logp) - 1, dtype=np.float64)
            t = np.log((i + 2) / (i + 1))
            b = logp[:-1] - logp[1:]
            s_hat = float(np.dot(t, b) / np.dot(t, t))
            eps = s_hat - 1.0
            k = n_vocab
            if abs(eps) > 1e-9 and s_hat > 1e-9:
                # in logs, since 2**mu overflows for large mu; eps and 1 - n**-eps share a sign
                den = 1.0 - math.exp(-eps * math.log(n_vocab))
                log_k = (math.log(abs(eps)) + self.mu * math.log(2.0) - math.log(abs(den))) / s_hat
                k = int(min(max(math.exp(min(log_k, 50.0)), 1.0), n_vocab))
        cand.keep_top(k)
        return self._finish(cand, ctx)
