"""Sampler: a SamplerConfig made runnable, with its RNG, workspace and carried state."""
from __future__ import annotations

import logging
import math
from typing import Callable, Sequence

import numpy as np

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling
from oxillama.sampling.base import StepContext, check_logits, copy_checked, scan_checked
from oxillama.sampling.candidates import Candidates, Workspace
from oxillama.sampling.chain import SamplerChain, build_chain
from oxillama.sampling.config import SamplerConfig
from oxillama.sampling.penalties import dry_breakers_from_vocab
from oxillama.sampling.rng import SamplerRNG
from oxillama.sampling.penalties import BanTokens
from oxillama.sampling.selection import Greedy, WeightedDraw
from oxillama.sampling.truncation import TopK

__all__ = ["Sampler"]

log = logging.getLogger("oxillama.sampling")

_STATE_VERSION = 1


def _in_place_stages(chain: SamplerChain, n_vocab: int) -> int | None:
    """How many leading stages of the chain run on the caller's row without writing it, or None when the
    row must be copied first. 0: the chain has no stage and a greedy or weighted-draw selector (both only
    read the row). 1: its first stage is a top-k, which always narrows the set into new arrays, so every
    later stage works on those. 2: it bans tokens, then takes a top-k: the top k + (banned) of the row
    without the banned ones is that top-k, read from the row as it is."""
    stages = chain.stages
    if not stages:
        return 0 if type(chain.selector) in (Greedy, WeightedDraw) else None
    first = stages[0]
    if type(first) is TopK and first.k > 0:
        return 1
    if (type(first) is BanTokens and len(stages) > 1 and type(stages[1]) is TopK and stages[1].k > 0
            and stages[1].k + len(first.banned) <= n_vocab // 16):
        return 2
    return None


class Sampler:
    """Chooses the next token: `Sampler(config, seed).sample(logits, tokens) -> int`.

    logits: the model's float32 row of n_vocab values. It is copied into a workspace allocated
      once, so the caller's array is never modified. NaN or +inf raise SamplerError; -inf marks a
      token that must not be chosen.
    tokens: the history (prompt and generated tokens) the penalties and DRY look at; an int
      NumPy array (e.g. a view of the engine's token buffer) avoids a list conversion per token,
      and it is only read when a stage needs it.

    The vocabulary size is fixed by `n_vocab` or by the first call. Keyword arguments:
      logits_processors: callables `(tokens, logits) -> logits` run after logit bias.
      dry_breakers: DRY sequence breakers as token-id sequences; or pass `token_texts`
        (token i's text) and optionally `tokenize` (str -> ids) to derive them from the
        config's breaker strings, as llama.cpp does. Without either, DRY runs without breakers
        (and says so in the log).
      chain: a custom SamplerChain instead of the one the config describes.

    `get_state()` / `set_state()` save and restore the RNG stream and mirostat's mu: a restored
    sampler given the same logits picks the same tokens as the original would have.
    """

    def __init__(self, config: SamplerConfig | None = None, seed: int | None = None, *,
                 n_vocab: int | None = None,
                 logits_processors: Sequence[Callable[[np.ndarray, np.ndarray], np.ndarray]] | Callable | None = None,
                 dry_breakers: Sequence[Sequence[int]] | None = None,
                 token_texts: Sequence[str] | None = None,
                 tokenize: Callable[[str], list[int]] | None = None,
                 chain: SamplerChain | None = None):
        if config is None:
            config = SamplerConfig()
        elif isinstance(config, dict):
            config = SamplerConfig.from_dict(config)
        elif not isinstance(config, SamplerConfig):
            raise SamplerError(f"config must be a SamplerConfig, got {type(config).__name__}")
        self.config = config
        self.rng = SamplerRNG(seed)
        if callable(logits_processors):
            logits_processors = [logits_processors]
        self.logits_processors = list(logits_processors or ())

        if dry_breakers is None:
            dry_breakers = ()
            if config.dry_multiplier > 0 and config.dry_sequence_breakers:
                if token_texts is not None:
                    dry_breakers = dry_breakers_from_vocab(config.dry_sequence_breakers, token_texts, tokenize)
                else:
                    log.info("DRY: no vocabulary given to resolve sequence breakers %r; running without them",
                             config.dry_sequence_breakers)
        self.dry_breakers = [tuple(int(t) for t in b) for b in dry_breakers]
        self.chain = chain if chain is not None else build_chain(config, self.logits_processors, self.dry_breakers)
        self._ws: Workspace | None = None
        self.n_vocab = None
        if n_vocab is not None:
            self._set_vocab(int(n_vocab))

    def _set_vocab(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self._ws = Workspace(n_vocab)
        for tid in list(self.config.logit_bias) + list(self.config.banned_tokens):
            if tid >= n_vocab:
                raise SamplerError(f"token id {tid} in logit_bias/banned_tokens is outside the vocabulary of {n_vocab}")

    @property
    def seed(self) -> int:
        return self.rng.seed

    def sample(self, logits, tokens=()) -> int:
        """The next token id for this logits row, given the history `tokens`."""
        row = check_logits(logits, self.n_vocab, scan=False)
        if self._ws is None:
            self._set_vocab(row.shape[0])
        chain = self.chain
        done = _in_place_stages(chain, self.n_vocab)
        ctx = StepContext(tokens, self.rng, self.n_vocab)
        if done is None:
            cand = Candidates(self._ws, max_logit=copy_checked(row, self._ws.logits))
            return chain.run(cand, ctx)
        # the chain's first stages never write the whole row: they run on the caller's, scanned in place (a copy
        # of n_vocab floats per token saved); plain greedy is that scan's first max (Greedy's choice)
        m, at = scan_checked(row)
        if done == 0 and type(chain.selector) is Greedy:
            return at
        cand = Candidates(self._ws, logits=row, max_logit=m)
        if done == 2:
            ban, top = chain.stages[:2]
            cand.keep_top(top.k, exclude=ban.banned_ids(self.n_vocab))
        else:
            done = 0   # a top-k first: run it as a stage
        return chain.run(cand, ctx, start=done)

    def top_logprobs(self, logits, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(token_ids, logprobs) of the n most likely tokens of the raw row (the model's own
        distribution, before any sampling stage), as `logprobs=N` reports; reuses the workspace."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise SamplerError(f"logprobs count must be an int >= 0, got {n!r}")
        row = check_logits(logits, self.n_vocab, scan=False)
        if self._ws is None:
            self._set_vocab(row.shape[0])
        ws = self._ws
        m = copy_checked(row, ws.logits)
        s_w, _ = _csampling.exp_sum(ws.logits, m, 1.0, ws.weights)
        log_z = m + math.log(s_w)
        k = _csampling.top_k(ws.logits, min(int(n), len(row)), ws.ids, ws.vals)
        return ws.ids[:k].copy(), (ws.vals[:k].astype(np.float64) - log_z).astype(np.float32)

    def __call__(self, logits, tokens=()) -> int:
        return self.sample(logits, tokens)

    def get_state(self) -> dict:
        """A plain dict (JSON/msgpack-safe) of everything carried between steps."""
        return {"version": _STATE_VERSION, "rng": self.rng.get_state(), "chain": self.chain.get_state()}

    def set_state(self, state: dict) -> None:
        """Restore a state from get_state() of a sampler with the same config."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise SamplerError(f"sampler state must be a dict from Sampler.get_state() (version {_STATE_VERSION})")
        rng = SamplerRNG(0)
        rng.set_state(state.get("rng"))  # validated before anything changes
        saved = self.chain.get_state()
        try:
            self.chain.set_state(state.get("chain"))
        except SamplerError:
            self.chain.set_state(saved)
            raise
        self.rng = rng

    @property
    def mirostat_mu(self) -> float | None:
        """Mirostat's current mu (None without mirostat)."""
        return getattr(self.chain.selector, "mu", None)

    def __repr__(self):
        return f"Sampler({self.config!r}, seed={self.seed})"
