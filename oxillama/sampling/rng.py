"""The sampler's random source: one seeded PCG64 stream whose full state can be saved and restored.

Every random decision of a sampling chain (the final weighted draw, XTC's coin, mirostat's draw)
reads this one stream in a fixed order, so the same seed and the same logits give the same tokens,
and a state taken with `get_state()` and given back with `set_state()` continues identically.
"""
from __future__ import annotations

import secrets

import numpy as np

from oxillama.errors import SamplerError

__all__ = ["SamplerRNG"]

_MAX_SEED = 2**64 - 1


class SamplerRNG:
    """A seeded uniform [0, 1) source (NumPy's PCG64) with plain-dict state save/restore.

    seed=None draws a fresh seed from the OS; the seed actually used is kept in `.seed`, so an
    unseeded run can still be reproduced.
    """

    def __init__(self, seed: int | None = None):
        if seed is None:
            seed = secrets.randbits(63)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise SamplerError(f"seed must be an int or None, got {type(seed).__name__}")
        seed = int(seed)
        if seed < 0:
            # llama.cpp's -1 (LLAMA_DEFAULT_SEED) and similar mean "pick one for me"
            if seed != -1:
                raise SamplerError(f"seed must be >= 0 (or -1 for a random seed), got {seed}")
            seed = secrets.randbits(63)
        if seed > _MAX_SEED:
            raise SamplerError(f"seed must fit in 64 bits, got {seed}")
        self.seed = seed
        self._gen = np.random.Generator(np.random.PCG64(seed))

    def random(self) -> float:
        """One uniform double in [0, 1)."""
        return float(self._gen.random())

    def get_state(self) -> dict:
        """The full generator state as a plain dict of small ints and strings (JSON/msgpack-safe:
        PCG64's two 128-bit words are written as hex strings, which msgpack could not hold as ints)."""
        st = self._gen.bit_generator.state
        return {
            "seed": self.seed,
            "bit_generator": "PCG64",
            "state": format(st["state"]["state"], "x"),
            "inc": format(st["state"]["inc"], "x"),
            "has_uint32": int(st["has_uint32"]),
            "uinteger": int(st["uinteger"]),
        }

    def set_state(self, state: dict) -> None:
        """Restore a state returned by `get_state()`; the stream then continues exactly from there."""
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise SamplerError("RNG state must be a dict from SamplerRNG.get_state()")
        fresh = np.random.PCG64()
        try:
            fresh.state = {
                "bit_generator": "PCG64",
                "state": {"state": int(state["state"], 16), "inc": int(state["inc"], 16)},
                "has_uint32": int(state["has_uint32"]),
                "uinteger": int(state["uinteger"]),
            }
            seed = int(state["seed"])
        except (TypeError, ValueError, KeyError) as e:
            raise SamplerError(f"invalid RNG state: {e!r}") from None
        self._gen = np.random.Generator(fresh)
        self.seed = seed
