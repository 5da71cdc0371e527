"""SamplerChain: stages applied in order to one logits row, then a selector picks the token."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling.base import Selector, Stage, StepContext
from oxillama.sampling.candidates import Candidates, Workspace
from oxillama.sampling.config import DEFAULT_STAGE_ORDER, SamplerConfig
from oxillama.sampling.penalties import (DRY, BanTokens, FrequencyPresencePenalty, LogitBias, LogitsProcessorStage,
                                         RepetitionPenalty)
from oxillama.sampling.selection import Greedy, MirostatV1, MirostatV2, WeightedDraw
from oxillama.sampling.temperature import Temperature
from oxillama.sampling.truncation import XTC, EpsilonCutoff, EtaCutoff, MinP, TopA, TopK, TopP, TypicalP

__all__ = ["SamplerChain", "build_chain"]


class SamplerChain:
    """Stages in order, then a selector. `build_chain(config)` makes the default chain:

    1. logit bias, then banned tokens: added to / removed from the raw logits first.
    2. user logits processors (`(tokens, logits) -> logits`), in the order given.
    3. penalties over the last repeat_last_n tokens: repetition (divide positive / multiply
       negative logits), then frequency and presence (subtract).
    4. DRY: penalise tokens that would extend a repeated sequence.
    5. top-k: keep the k most likely (the first narrowing: a C heap pass, no sort).
    6. typical-p.
    7. top-p.
    8. min-p.
    9. top-a, epsilon cutoff, eta cutoff.
    10. XTC: sometimes remove the most likely tokens.
    11. temperature (with dynamic temperature): last, so the truncations above see the model's
        own probabilities, as in llama.cpp.
    12. selection: greedy if temperature is 0; mirostat v1 or v2 if set (then steps 5-10 are
        skipped and temperature comes right before it, as in llama.cpp); else the weighted draw.

    Stages that are off (top_k 0, top_p 1, ...) are left out. `SamplerConfig.samplers` reorders
    steps 3-11 by name (llama.cpp's `--samplers`); steps 1-2 stay first and 12 last.
    """

    def __init__(self, stages: Sequence[Stage], selector: Selector | None = None):
        for s in stages:
            if not isinstance(s, Stage) or isinstance(s, Selector):
                raise SamplerError(f"chain stages must be Stage objects (not selectors), got {s!r}")
        if selector is None:
            selector = WeightedDraw()
        if not isinstance(selector, Selector):
            raise SamplerError(f"selector must be a Selector, got {selector!r}")
        self.stages = list(stages)
        self.selector = selector

    def run(self, cand: Candidates, ctx: StepContext, start: int = 0) -> int:
        """Apply the stages (from stages[start]: the caller applied those before) to cand (edited in place)
        and return the selected token id."""
        for stage in self.stages[start:]:
            stage.apply(cand, ctx)
        return self.selector.select(cand, ctx)

    def get_state(self) -> list:
        return [s.get_state() for s in self.stages] + [self.selector.get_state()]

    def set_state(self, state: list) -> None:
        parts = self.stages + [self.selector]
        if not isinstance(state, list) or len(state) != len(parts):
            raise SamplerError(f"chain state must be a list of {len(parts)} stage states")
        for part, st in zip(parts, state):
            part.set_state(st)

    def __repr__(self):
        return "SamplerChain([" + ", ".join(map(repr, self.stages)) + f"], selector={self.selector!r})"


def _stage(name: str, c: SamplerConfig, dry_breakers) -> list[Stage]:
    """The stage(s) for one name of the order, or [] when the config turns it off."""
    mk = c.min_keep
    if name == "penalties":
        out = []
        if c.repeat_penalty != 1.0 and c.repeat_last_n != 0:
            out.append(RepetitionPenalty(c.repeat_penalty, c.repeat_last_n))
        if (c.frequency_penalty or c.presence_penalty) and c.repeat_last_n != 0:
            out.append(FrequencyPresencePenalty(c.frequency_penalty, c.presence_penalty, c.repeat_last_n))
        return out
    if name == "dry":
        if c.dry_multiplier > 0 and c.dry_penalty_last_n != 0:
            return [DRY(c.dry_multiplier, c.dry_base, c.dry_allowed_length, c.dry_penalty_last_n, dry_breakers)]
        return []
    if name == "top_k":
        return [TopK(c.top_k)] if c.top_k > 0 else []
    if name == "typical_p":
        return [TypicalP(c.typical_p, mk)] if c.typical_p < 1.0 else []
    if name == "top_p":
        return [TopP(c.top_p, mk)] if c.top_p < 1.0 else []
    if name == "min_p":
        return [MinP(c.min_p, mk)] if c.min_p > 0.0 else []
    if name == "top_a":
        return [TopA(c.top_a, mk)] if c.top_a > 0.0 else []
    if name == "epsilon_cutoff":
        return [EpsilonCutoff(c.epsilon_cutoff, mk)] if c.epsilon_cutoff > 0.0 else []
    if name == "eta_cutoff":
        return [EtaCutoff(c.eta_cutoff, mk)] if c.eta_cutoff > 0.0 else []
    if name == "xtc":
        return [XTC(c.xtc_probability, c.xtc_threshold, mk)] if c.xtc_probability > 0.0 else []
    if name == "temperature":
        if c.temperature == 1.0 and c.dynatemp_range == 0.0:
            return []
        return [Temperature(c.temperature, c.dynatemp_range, c.dynatemp_exponent)]
    raise SamplerError(f"unknown stage name {name!r}")


def build_chain(config: SamplerConfig,
                logits_processors: Sequence[Callable[[np.ndarray, np.ndarray], np.ndarray]] = (),
                dry_breakers: Sequence[Sequence[int]] = ()) -> SamplerChain:
    """The chain a SamplerConfig describes (order: see SamplerChain). dry_breakers are the DRY
    sequence breakers as token-id sequences (see penalties.dry_breakers_from_vocab)."""
    stages: list[Stage] = []
    if config.logit_bias:
        stages.append(LogitBias(config.logit_bias))
    if config.banned_tokens:
        stages.append(BanTokens(config.banned_tokens))
    stages += [LogitsProcessorStage(fn) for fn in logits_processors]

    if config.temperature == 0.0:
        order = [n for n in (config.samplers or DEFAULT_STAGE_ORDER) if n in ("penalties", "dry")]
        for name in order:
            stages += _stage(name, config, dry_breakers)
        return SamplerChain(stages, Greedy())
    if config.mirostat:
        order = [n for n in (config.samplers or DEFAULT_STAGE_ORDER) if n in ("penalties", "dry")]
        for name in order:
            stages += _stage(name, config, dry_breakers)
        stages += _stage("temperature", config, dry_breakers)
        sel = (MirostatV1(config.mirostat_tau, config.mirostat_eta, config.mirostat_m) if config.mirostat == 1
               else MirostatV2(config.mirostat_tau, config.mirostat_eta))
        return SamplerChain(stages, sel)
    for name in config.samplers or DEFAULT_STAGE_ORDER:
        stages += _stage(name, config, dry_breakers)
    return SamplerChain(stages, WeightedDraw())


def new_candidates(ws: Workspace, logits: np.ndarray) -> Candidates:
    """Copy a (validated) logits row into the workspace and wrap it; the caller's array is untouched."""
    np.copyto(ws.logits, logits)
    return Candidates(ws)
