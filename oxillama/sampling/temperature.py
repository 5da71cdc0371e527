"""Temperature: logits / T, with llama.cpp's dynamic temperature (entropy-driven T)."""
from __future__ import annotations

import math

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling.base import Stage, StepContext
from oxillama.sampling.candidates import Candidates

__all__ = ["Temperature"]

_F32_MAX = float(np.finfo(np.float32).max)
_F32_SAFE = _F32_MAX / 4     # below this, logits * scale and the softmax's sums stay finite


class Temperature(Stage):
    """logits /= T. T = 0 keeps only the most likely token (greedy).

    Dynamic temperature (dynatemp_range > 0, llama.cpp's temp-ext): with H the entropy of the
    current set and H_max = ln(n) its maximum,
        T = T_min + (T_max - T_min) * (H / H_max) ** exponent,
    T_min = max(0, temperature - range), T_max = temperature + range: confident steps are cooled.
    """

    name = "temperature"

    def __init__(self, temperature: float, dynatemp_range: float = 0.0, dynatemp_exponent: float = 1.0):
        if not temperature >= 0:
            raise SamplerError(f"temperature must be >= 0, got {temperature}")
        if not dynatemp_range >= 0 or not dynatemp_exponent >= 0:
            raise SamplerError(f"dynatemp_range and dynatemp_exponent must be >= 0, "
                               f"got {dynatemp_range}, {dynatemp_exponent}")
        self.temperature = float(temperature)
        self.dynatemp_range = float(dynatemp_range)
        self.dynatemp_exponent = float(dynatemp_exponent)

    def effective_temperature(self, cand: Candidates) -> float:
        if self.dynatemp_range <= 0 or len(cand) <= 1:
            return self.temperature
        t_min = max(0.0, self.temperature - self.dynatemp_range)
        t_max = self.temperature + self.dynatemp_range
        h_max = math.log(len(cand))
        h = cand.entropy()
        return t_min + (t_max - t_min) * (min(h / h_max, 1.0) ** self.dynatemp_exponent)

    def apply(self, cand: Candidates, ctx: StepContext) -> None:
        t = self.effective_temperature(cand)
        if t == 1.0:
            return
        scale = 1.0 / t if t > 0.0 else math.inf
        if scale > _F32_MAX:    # t = 0, or 1/t overflows float32 (the t -> 0 limit): greedy
            self.apply_greedy(cand)
            return
        m = cand.max()
        if abs(m) * scale > _F32_SAFE:
            # the scaled logits would overflow float32 (inf - inf = NaN in the softmax): shift by the max
            # first, which softmax ignores; the other logits may then round to -inf, i.e. probability 0
            if cand.full:
                np.subtract(cand.logits, np.float32(m), out=cand.logits)
            else:
                cand.logits = (cand.logits - np.float32(m)).astype(np.float32)
            cand.changed()
        with np.errstate(over="ignore"):    # after the shift, only rounding to -inf (probability 0)
            if cand.full:
                np.multiply(cand.logits, np.float32(scale), out=cand.logits)
            else:
                cand.logits = (cand.logits / np.float32(t)).astype(np.float32)
        cand.changed()

    @staticmethod
    def apply_greedy(cand: Candidates) -> None:
        if cand.full:
            top = int(np.argmax(cand.logits))
            cand.keep(np.array([top]), is_sorted=True)
        else:
            cand.keep_top(1)
