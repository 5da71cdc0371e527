"""One generate() request, checked once: `Request.from_kwargs(kwargs, n_vocab=...)` validates every
keyword in one call (types, ranges, token ids within the vocabulary; InvalidArgumentError naming the
keyword) and resolves aliases into a SamplerConfig and the other options; `prepare()` makes what decoding
it needs: the sampler, the grammar matcher and the stop-string matcher (`Prepared`).

InferenceEngine.generate, Scheduler.submit, speculative decoding and beam search all start here.

max_tokens: absent, DEFAULT_MAX_TOKENS; None (or <= 0, llama.cpp's n_predict=-1) means until the end
of generation or of the context, as OpenAI and llama-cpp-python mean it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oxillama.errors import ContextOverflowError, InvalidArgumentError
from oxillama.grammar import Grammar, GrammarMatcher, grammar_from_response_format
from oxillama.sampling import SamplerConfig, StoppingCriteriaList, StopStrings, validate_generate_kwargs

__all__ = ["Request", "Prepared", "DEFAULT_MAX_TOKENS", "NON_SAMPLING_KEYS"]

DEFAULT_MAX_TOKENS = 256
_MAX_TOKENS_NAMES = ("max_tokens", "max_new_tokens", "n_predict")
# keywords that do not describe the sampler: continuing a session with only these keeps its sampler state
NON_SAMPLING_KEYS = frozenset(_MAX_TOKENS_NAMES + ("stop", "stop_strings", "logprobs", "stopping_criteria"))
_BEAM_KEYS = ("length_penalty", "early_stopping")
# keywords that are neither sampler options nor in NON_SAMPLING_KEYS' list
_NOT_SAMPLER = frozenset(("seed", "response_format", "num_beams", "speculative_k", "ignore_eos", "prompt", "stream",
                          "callback") + _BEAM_KEYS)


@dataclass
class Prepared:
    """What a request decodes with: its sampler, grammar matcher (None: unconstrained) and stop strings."""
    sampler: Any
    matcher: GrammarMatcher | None
    stops: StopStrings


@dataclass
class Request:
    """generate()'s keywords, checked and resolved (see the module docstring)."""
    config: SamplerConfig
    max_tokens: int | None = DEFAULT_MAX_TOKENS   # None: until the end of generation or of the context
    stop: list[str] = field(default_factory=list)
    n_logprobs: int | None = None                 # top log-probabilities per token; None: not asked
    processors: Any = None                        # logits_processor: a callable or a list of them
    criteria: StoppingCriteriaList = field(default_factory=StoppingCriteriaList)
    grammar: Grammar | None = None
    seed: int | None = None
    ignore_eos: bool = False
    num_beams: int = 1
    speculative: Any = None                       # "ngram", a draft engine, or None
    speculative_k: int = 4
    beam_options: dict = field(default_factory=dict)   # length_penalty, early_stopping
    sampler_keys: frozenset = frozenset()         # the sampling keywords given (see NON_SAMPLING_KEYS)
    prompt: Any = None                            # text, checked token ids, or None (continue a session)
    stream: bool = False
    callback: Any = None

    @classmethod
    def from_kwargs(cls, kwargs: dict, *, n_vocab: int) -> "Request":
        """The request of generate()-style keywords (plus seed, grammar, response_format, num_beams,
        speculative, speculative_k, ignore_eos, length_penalty, early_stopping), validated in one call."""
        kwargs = dict(kwargs)
        given = [n for n in _MAX_TOKENS_NAMES if n in kwargs]
        until_end = bool(given) and all(kwargs[n] is None for n in given)
        grammar = kwargs.pop("grammar", None)
        speculative = kwargs.pop("speculative", None)
        config, other = validate_generate_kwargs(kwargs, n_vocab=n_vocab)
        response_format = other.pop("response_format", None)
        if grammar is not None and not isinstance(grammar, Grammar):
            raise InvalidArgumentError(f"grammar must be an oxillama.Grammar, got {type(grammar).__name__}")
        if grammar is not None and response_format is not None:
            raise InvalidArgumentError("give grammar or response_format, not both")
        if response_format is not None:
            grammar = grammar_from_response_format(response_format)
        ignore_eos = other.pop("ignore_eos", None)
        if ignore_eos is not None and not isinstance(ignore_eos, bool):
            raise InvalidArgumentError(f"ignore_eos must be a bool, got {ignore_eos!r}")
        criteria = other.pop("stopping_criteria", None)
        prompt, stream, callback = other.pop("prompt", None), other.pop("stream", None), other.pop("callback", None)
        max_tokens = None if until_end else other.pop("max_tokens", DEFAULT_MAX_TOKENS)
        other.pop("max_tokens", None)
        req = cls(config=config, max_tokens=max_tokens, stop=other.pop("stop", []),
                  n_logprobs=other.pop("logprobs", None), processors=other.pop("logits_processor", None),
                  criteria=StoppingCriteriaList(criteria if isinstance(criteria, (list, tuple)) else
                                                [criteria] if criteria is not None else []),
                  grammar=grammar, seed=other.pop("seed", None), ignore_eos=bool(ignore_eos),
                  num_beams=other.pop("num_beams", None) or 1, speculative=speculative,
                  speculative_k=other.pop("speculative_k", None) or 4,
                  beam_options={k: other.pop(k) for k in _BEAM_KEYS if other.get(k) is not None},
                  sampler_keys=frozenset(k for k in kwargs if k not in NON_SAMPLING_KEYS | _NOT_SAMPLER),
                  prompt=prompt, stream=bool(stream), callback=callback)
        for k in _BEAM_KEYS:
            other.pop(k, None)
        if other:
            raise InvalidArgumentError(f"unknown generate() argument(s): {', '.join(sorted(other))}")
        return req

    @property
    def decoding(self) -> str:
        """"beam", "speculative" or "sample" (one token per step, what a Scheduler runs)."""
        if self.num_beams > 1:
            return "beam"
        return "speculative" if self.speculative not in (None, False) else "sample"

    def token_limit(self, n_context: int, n_ctx: int) -> int:
        """max_tokens resolved against the context: the room left when None, else max_tokens, which must
        fit. n_context: the tokens before the first generated one (all but the last of them are in the
        cache when it is sampled); the last generated token is never run."""
        room = n_ctx - (n_context - 1)
        if self.max_tokens is None:
            return room
        if self.max_tokens > room:
            raise_overflow(n_context, self.max_tokens, n_ctx)
        return self.max_tokens

    def prepare(self, model) -> Prepared:
        """A fresh sampler, grammar matcher and stop-string matcher for this request. model: what holds
        the tokenizer and the vocabulary's per-model caches (InferenceEngine.new_sampler / new_matcher)."""
        return Prepared(self.new_sampler(model),
                        None if self.grammar is None else model.new_matcher(self.grammar), StopStrings(self.stop))

    def new_sampler(self, model):
        return model.new_sampler(self.config, self.seed, self.processors)


def raise_overflow(n_context: int, max_tokens: int, n_ctx: int):
    raise ContextOverflowError(f"{n_context} tokens + max_tokens={max_tokens} exceed n_ctx={n_ctx}")
