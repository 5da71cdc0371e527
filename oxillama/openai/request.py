"""An OpenAI-shaped request's fields -> generate() / Scheduler.submit() keywords, the one translation the
HTTP server and `oxillama.Llama` both run: sampling fields passed under their own names when set,
max_tokens (None: until the end of generation or of the context, as OpenAI means it), stop strings,
logit_bias with string keys, ignore_eos, a grammar or a response_format compiled to one, logprobs.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from oxillama.errors import InvalidArgumentError
from oxillama.grammar import Grammar, grammar_from_response_format

__all__ = ["generate_kwargs", "openai_logit_bias", "max_tokens_of", "chat_logprobs_count", "choice_seed",
           "LOGIT_BIAS_BOUND"]

# OpenAI accepts biases in [-100, 100]
LOGIT_BIAS_BOUND = 100.0


def generate_kwargs(sampling: Mapping[str, Any], *, max_tokens: int | None = None, stop=None, logit_bias=None,
                    n_vocab: int | None = None, bias_bound: float | None = None, ban=(), grammar=None,
                    response_format=None, logprobs: int | None = None) -> dict:
    """Engine keywords for one request.

    sampling: generate() keyword -> value; None values are left out (the engine's defaults apply).
    max_tokens: always passed (None: until the end of generation or of the context). stop: a string or
    strings. logit_bias: {token id, or its decimal string: bias}, checked against n_vocab and, when
    bias_bound is given, within [-bias_bound, bias_bound]; ban: token ids made impossible (ignore_eos bans
    the end-of-generation tokens, as llama.cpp does). grammar: GBNF text or a Grammar; response_format:
    OpenAI's dict, compiled here so that an invalid schema fails before anything is queued."""
    kw = {name: value for name, value in sampling.items() if value is not None}
    kw["max_tokens"] = max_tokens
    if stop:
        kw["stop"] = [stop] if isinstance(stop, str) else list(stop)
    bias = openai_logit_bias(logit_bias, n_vocab, bias_bound) if logit_bias else {}
    bias.update({int(t): -math.inf for t in ban})
    if bias:
        kw["logit_bias"] = bias
    if response_format is not None and response_format.get("type") == "text":
        response_format = None
    if grammar is not None and response_format is not None:
        raise InvalidArgumentError("give grammar or response_format, not both")
    if grammar is not None:
        kw["grammar"] = grammar if isinstance(grammar, Grammar) else Grammar(grammar)
    elif response_format is not None:
        kw["grammar"] = grammar_from_response_format(response_format)
    if logprobs is not None:
        kw["logprobs"] = logprobs
    return kw


def openai_logit_bias(bias: Mapping, n_vocab: int | None, bound: float | None = LOGIT_BIAS_BOUND) -> dict[int, float]:
    """{"token id as a string" (or an int): bias} -> {token_id: bias}, ids within the vocabulary and
    biases within [-bound, bound] (bound None: any number, as llama-cpp-python takes)."""
    out = {}
    for key, value in bias.items():
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"logit_bias key {key!r} is not a token id") from None
        if tid < 0 or (n_vocab is not None and tid >= n_vocab):
            top = "" if n_vocab is None else f"0..{n_vocab - 1}"
            raise InvalidArgumentError(f"logit_bias token id {tid} is outside the vocabulary ({top})")
        if bound is not None and not -bound <= value <= bound:
            raise InvalidArgumentError(f"logit_bias[{key}] must be in [{-bound:g}, {bound:g}], got {value}")
        out[tid] = float(value)
    return out


def max_tokens_of(max_tokens: int | None, max_completion_tokens: int | None = None) -> int | None:
    """The chat request's token limit: max_completion_tokens (OpenAI's newer name) or max_tokens; None
    when neither is given, which means until the end of generation or of the context."""
    if max_completion_tokens is None:
        return max_tokens
    if max_tokens is not None and max_tokens != max_completion_tokens:
        raise InvalidArgumentError(f"max_tokens={max_tokens} and max_completion_tokens={max_completion_tokens} "
                                   "disagree; give one")
    return max_completion_tokens


def chat_logprobs_count(logprobs: bool | None, top_logprobs: int | None) -> int | None:
    """How many top log-probabilities per token a chat request asks for (logprobs=true, top_logprobs=N),
    or None for none."""
    if top_logprobs is not None and not logprobs:
        raise InvalidArgumentError("top_logprobs needs logprobs=true")
    return (top_logprobs or 0) if logprobs else None


def choice_seed(seed: int | None, index: int) -> int | None:
    """Choice i of a seeded n > 1 request samples with seed + i: choice 0 is the seeded single request,
    the others differ from it."""
    return None if seed is None else seed + index
