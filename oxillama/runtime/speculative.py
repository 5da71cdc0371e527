"""Speculative decoding: a cheap drafter proposes k tokens, the target checks them in one batched
forward and keeps the longest acceptable prefix, plus one token of its own.

Acceptance (Leviathan et al. 2023, Chen et al. 2023):
  greedy (temperature 0): draft token i is kept iff it is the target's own greedy pick at i, so
    the output is token for token that of plain greedy decoding.
  sampled: draft token x drawn from the draft's q is kept with probability min(1, p(x) / q(x));
    on rejection a token is drawn from the residual norm(max(0, p - q)) and the round ends; when
    all k are kept a bonus token is drawn from p at the position after them. Each emitted token is
    then distributed exactly as p (the target's sampler distribution, after its truncations and
    temperature).

Drafters: `ModelDrafter` (a smaller model with the same vocabulary, e.g. `layer_draft(target, n)`,
the target's first n layers) and `NGramDrafter` (prompt lookup: the tokens that followed the last
n-gram where it occurred earlier in the prompt or output; its q is a point mass on the proposal).

Rollback: after a round both KV caches are truncated to the kept tokens (engine.truncate); the
history is never re-run. A recurrent model's state goes back to the checkpoint taken at the start of the round
and runs the kept tokens again (only when a draft was rejected).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.runtime.decode import text_pieces
from oxillama.sampling import Sampler
from oxillama.sampling.base import StepContext, as_history, check_logits, copy_checked
from oxillama.sampling.candidates import Candidates
from oxillama.sampling.selection import Greedy, WeightedDraw
from oxillama.runtime.request import Request

log = logging.getLogger("oxillama.speculative")

__all__ = ["SpeculativeEngine", "SpeculativeStats", "NGramDrafter", "ModelDrafter", "layer_draft",
           "accept_or_resample", "sampler_probs"]


# ---- the acceptance rule (pure functions over probability vectors) ----

def _draw(weights: np.ndarray, u: float) -> int:
    """Index drawn with probability weights / sum(weights) using the uniform u in [0, 1)."""
    cum = np.cumsum(weights)
    i = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if i >= len(cum):   # u * total rounded up to the total: the last index with weight
        i = int(np.flatnonzero(weights > 0)[-1])
    return i


def accept_or_resample(p_target: np.ndarray, p_draft: np.ndarray | None, token: int, rng) -> tuple[bool, int]:
    """One step of speculative sampling. p_target, p_draft: probability vectors over the vocabulary
    (p_draft None: the draft was deterministic, q = one-hot(token)); token: the draft's proposal,
    drawn from p_draft; rng: anything with .random() -> float in [0, 1).

    Returns (True, token) if kept (probability min(1, p(token) / q(token))), else (False, t) with
    t drawn from norm(max(0, p - q)). The result is distributed as p_target."""
    pt = float(p_target[token])
    qt = 1.0 if p_draft is None else float(p_draft[token])
    if qt <= 0.0:
        raise InvalidArgumentError(f"the draft proposed token {token}, to which its own distribution gives "
                                   "probability 0")
    if rng.random() * qt < pt:   # u < p/q without dividing
        return True, token
    if p_draft is None:
        residual = p_target.astype(np.float64, copy=True)
        residual[token] = 0.0
    else:
        residual = np.maximum(p_target.astype(np.float64) - p_draft, 0.0)
    if not residual.sum() > 0.0:   # p <= q everywhere means p == q: cannot reject; rounding guard
        residual = p_target.astype(np.float64)
    return False, _draw(residual, rng.random())


def sampler_probs(sampler, logits: np.ndarray, history) -> np.ndarray:
    """The probability vector (float64, n_vocab) from which `sampler` would draw for this logits
    row and history: its chain's stages (penalties, truncations, temperature) then softmax."""
    row = check_logits(logits, sampler.n_vocab, scan=False)
    if sampler._ws is None:
        sampler._set_vocab(row.shape[0])
    cand = Candidates(sampler._ws, max_logit=copy_checked(row, sampler._ws.logits))
    ctx = StepContext(as_history(history), sampler.rng, sampler.n_vocab)
    for stage in sampler.chain.stages:
        stage.apply(cand, ctx)
    out = np.zeros(sampler.n_vocab, dtype=np.float64)
    if cand.full:
        z = cand.logits.astype(np.float64) - cand.max()
        w = np.exp(z)
        out[:] = w / w.sum()
    else:
        out[cand.ids] = cand.probs()
    return out


def _decoding_mode(sampler) -> str:
    sel = sampler.chain.selector
    if isinstance(sel, Greedy):
        return "greedy"
    if isinstance(sel, WeightedDraw):
        return "sample"
    raise InvalidArgumentError(f"speculative decoding supports greedy or plain sampling, not the {sel.name} "
                               "selector (mirostat carries state across tokens)")


# ---- statistics ----

@dataclass
class SpeculativeStats:
    """Counts over all rounds: drafted = accepted + rejected + (drafts after a rejection, never checked)."""
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    bonus: int = 0
    emitted: int = 0

    @property
    def rate(self) -> float:
        """Accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict:
        return {"rounds": self.rounds, "drafted": self.drafted, "accepted": self.accepted,
                "rejected": self.rejected, "bonus": self.bonus, "emitted": self.emitted, "rate": self.rate}


# ---- drafters ----

class NGramDrafter:
    """Prompt-lookup drafting: find the most recent earlier occurrence of the last n tokens
    (n from ngram_max down to ngram_min) and propose the k tokens that followed it."""

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1):
        if not 1 <= ngram_min <= ngram_max:
            raise InvalidArgumentError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max, self.ngram_min = int(ngram_max), int(ngram_min)

    def propose(self, seq: np.ndarray, k: int, sampler=None) -> tuple[list[int], None]:
        """(draft tokens, None): up to k tokens; q is a point mass on each."""
        L = len(seq)
        for n in range(min(self.ngram_max, L - 1), self.ngram_min - 1, -1):
            # windows seq[i:i+n] for i in [0, L-n-1]: each has at least one following token
            win = np.lib.stride_tricks.sliding_window_view(seq[:L - 1], n)
            hits = np.flatnonzero((win == seq[L - n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return [int(t) for t in seq[start:start + k]], None
        return [], None



def _sync_cache(engine, seq: np.ndarray) -> np.ndarray:
    """Truncate engine's cache to its longest prefix shared with seq, keeping at least the last
    token of seq to run; returns the tokens of seq still to run."""
    cached = engine.session.cached
    n = min(len(cached), len(seq) - 1)
    if n and cached[:n] != seq[:n].tolist():
        a = np.asarray(cached[:n])
        n = int(np.argmax(a != seq[:n]))
    engine.truncate(n)
    # a recurrent model's state cannot be truncated: remember it here, where the round's rollback returns to
    # (it then runs only the kept tokens after it again); one such checkpoint, copied into the last round's
    # array; a no-op for attention-only models
    engine.checkpoint(rollback=True)
    return seq[n:]


class ModelDrafter:
    """Drafts with a model of the same vocabulary: k single-token forwards (its own sampler when
    sampling, argmax when greedy), with its own KV cache kept in step with the target's."""

    def __init__(self, draft):
        self.engine = draft
        self._sampler = None
        self._for = None

    def propose(self, seq: np.ndarray, k: int, sampler) -> tuple[list[int], list[np.ndarray] | None]:
        e = self.engine
        todo = _sync_cache(e, seq)
        k = min(k, e.n_ctx - len(seq))
        if k <= 0:
            return [], None
        logits = e.forward(todo)
        greedy = _decoding_mode(sampler) == "greedy"
        if self._for is not sampler:   # a new generation: the draft's sampler is seeded from the target's
            self._sampler = Sampler(sampler.config, seed=(sampler.seed + 1) % 2**63)
            self._for = sampler
        hist = list(seq)
        drafts: list[int] = []
        qs: list[np.ndarray] = []
        for i in range(k):
            if greedy:
                t = int(self._sampler.sample(logits, hist))
            else:
                q = sampler_probs(self._sampler, logits, hist)
                t = _draw(q, self._sampler.rng.random())
                qs.append(q)
            drafts.append(t)
            hist.append(t)
            if i + 1 < k:
                logits = e.forward([t])
        return drafts, (None if greedy else qs)


def layer_draft(target, n_layer: int):
    """A draft engine made of the target's first n_layer blocks plus its output norm and head
    (Model.first_layers): it shares the target's memory-mapped weights, tokenizer and settings and has
    its own KV cache; closing it leaves the target open."""
    model = target.model.first_layers(n_layer)
    draft = type(target)(model, n_ctx=target.n_ctx, n_threads=target.n_threads, n_batch=target.n_batch,
                         seed=target.seed, kv_type=target.kv.kv_type)
    draft.n_layer_draft = model.n_layer
    log.info("layer draft: first %d of %d layers", model.n_layer, target.model.n_layer)
    return draft


# ---- the speculative loop ----

class SpeculativeEngine:
    """Speculative decoding of `target` with `draft` (an engine of the same vocabulary, or
    "ngram" / an NGramDrafter for prompt lookup), up to k draft tokens per round.

    adaptive: after a rejection at draft position j the next round drafts j + 1 tokens, after a
    fully accepted round two more (up to k). A batched forward of n tokens costs more than one
    token's, so drafting less where drafts keep failing keeps a poor drafter from slowing decoding
    down; the output does not depend on it.

        spec = SpeculativeEngine(target, layer_draft(target, 8), k=4)
        text = spec.generate("Once upon a time", max_tokens=64, temperature=0)
        spec.stats.rate   # accepted / drafted
    """

    def __init__(self, target, draft="ngram", k: int = 4, *, adaptive: bool = True):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidArgumentError(f"k (draft tokens per round) must be an int >= 1, got {k!r}")
        self.target = target
        self.k = int(k)
        self.adaptive = bool(adaptive)
        if isinstance(draft, str):
            if draft != "ngram":
                raise InvalidArgumentError(f"speculative must be 'ngram' or a draft engine, got {draft!r}")
            draft = NGramDrafter()
        if isinstance(draft, NGramDrafter):
            self.drafter = draft
        elif hasattr(draft, "forward") and hasattr(draft, "n_vocab"):
            if draft is target:
                raise InvalidArgumentError("the draft must be a different engine from the target (its own KV cache)")
            if draft.n_vocab != target.n_vocab:
                raise InvalidArgumentError(f"draft vocabulary ({draft.n_vocab} tokens) differs from the target's "
                                           f"({target.n_vocab}): speculative decoding needs the same vocabulary")
            tt, dt = target.tokenizer, draft.tokenizer
            if tt is not dt and (tt.eog_ids != dt.eog_ids or tt.bos_id != dt.bos_id or
                                 any(tt.token_text(i) != dt.token_text(i) for i in
                                     range(0, target.n_vocab, max(1, target.n_vocab // 512)))):
                raise InvalidArgumentError("draft and target tokenizers differ (same size, different tokens): "
                                           "speculative decoding needs the same vocabulary")
            self.drafter = ModelDrafter(draft)
        else:
            raise InvalidArgumentError(f"draft must be an InferenceEngine, 'ngram' or an NGramDrafter, got "
                                       f"{type(draft).__name__}")
        self.stats = SpeculativeStats()

    def generate_tokens(self, prompt, *, max_tokens: int = 256, sampler=None, seed: int | None = None,
                        **sampling) -> Iterator[int]:
        """Yield generated token ids (the end-of-generation token ends it and is not yielded).
        prompt: text, token ids, or None to continue the target's session."""
        t = self.target
        if sampler is None or not hasattr(sampler, "chain"):   # none, or a SamplerConfig
            req = Request.from_kwargs(dict(sampling, sampler=sampler, seed=seed), n_vocab=t.n_vocab)
            extra = sorted(k for k in sampling if k not in req.sampler_keys)
            if extra:
                raise InvalidArgumentError(f"unknown sampling argument(s): {', '.join(extra)}")
            sampler = req.new_sampler(t)
        mode = _decoding_mode(sampler)
        if prompt is None:
            if not t.tokens:
                raise InvalidArgumentError("prompt None continues a session, but there is none: give a prompt")
            seq = list(t.tokens)
        else:
            seq = t.encode_prompt(prompt)
            t.reset()
            if len(seq) > 1:
                t._run(t.check_tokens(seq[:-1]))
        if len(seq) + max_tokens > t.n_ctx + 1:
            raise ContextOverflowError(f"{len(seq)} tokens + max_tokens={max_tokens} exceed n_ctx={t.n_ctx}")
        t.session.sampler = sampler
        t.session.matcher = None
        eog = t.tokenizer.eog_ids
        seq = list(seq)
        seq_arr = np.asarray(seq, dtype=np.int32)
        produced = 0
        st = self.stats
        k_next = self.k
        try:
            while produced < max_tokens:
                room = t.n_ctx - len(seq_arr)   # draft tokens + the last token must fit the cache
                drafts, qs = self.drafter.propose(seq_arr, max(0, min(k_next, room, max_tokens - produced - 1)),
                                                  sampler)
                todo = _sync_cache(t, seq_arr)
                rows = t._run(np.concatenate([todo, np.asarray(drafts, dtype=np.int32)]), all_logits=True)
                rows = rows[len(todo) - 1:]   # row i: the distribution after seq + drafts[:i]
                new: list[int] = []
                hist = seq_arr.tolist()
                rejected = False
                for i, d in enumerate(drafts):
                    if mode == "greedy":
                        tok = int(sampler.sample(rows[i], hist))
                        ok = tok == d
                    else:
                        p = sampler_probs(sampler, rows[i], hist)
                        ok, tok = accept_or_resample(p, None if qs is None else qs[i], d, sampler.rng)
                    new.append(tok)
                    hist.append(tok)
                    if not ok:
                        rejected = True
                        break
                n_ok = len(new) - rejected
                if not rejected:   # all kept (or nothing drafted): one more token from the target
                    new.append(int(sampler.sample(rows[len(drafts)], hist)))
                    st.bonus += bool(drafts)
                st.rounds += 1
                st.drafted += len(drafts)
                st.accepted += n_ok
                st.rejected += rejected
                if self.adaptive and drafts:
                    k_next = n_ok + 1 if rejected else min(self.k, k_next + 2)
                # keep K/V of seq and the kept drafts; the last new token is not run yet
                t.truncate(len(seq) + n_ok)
                for tok in new:
                    seq.append(tok)
                    if tok in eog:
                        return
                    produced += 1
                    st.emitted += 1
                    yield tok
                    if produced >= max_tokens:
                        return
                seq_arr = np.asarray(seq, dtype=np.int32)
        finally:
            self._finish(seq)
            log.debug("speculative: %s", st.as_dict())

    def _finish(self, seq: list[int]) -> None:
        """Leave the target's session as plain generation does: seq[:-1] cached, the last token pending."""
        t = self.target
        cached = t.session.cached
        if len(cached) >= len(seq) - 1 and cached[:len(seq) - 1] == seq[:-1]:
            t.truncate(len(seq) - 1)
            t.session.pending = seq[-1]
        else:   # interrupted inside a forward: drop the session rather than leave it inconsistent
            t.reset()

    def generate(self, prompt, *, max_tokens: int = 256, stop=(), stream: bool = False,
                 callback: Callable[[str], None] | None = None, seed: int | None = None, **sampling):
        """Like InferenceEngine.generate (text, or an iterator of pieces with stream=True)."""
        tokens = self.generate_tokens(prompt, max_tokens=max_tokens, seed=seed, **sampling)
        pieces = text_pieces(self.target.tokenizer, tokens, stop or (), callback)
        return pieces if stream else "".join(pieces)
