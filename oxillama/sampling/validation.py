"""One validation layer for generate()-style keyword arguments, shared by every entry point.

`InferenceEngine.generate`, the scheduler, the HTTP server and the llama-cpp-python-style face all
take the same keywords from callers they do not control (a request body is JSON from anyone). They
call `check_generate_kwargs` first: it checks each keyword's type and range, turns NumPy scalars
into Python numbers, checks token ids against the vocabulary, and raises InvalidArgumentError
naming the keyword -- never a bare TypeError, an OverflowError deep in C or "truth value of an array
is ambiguous". `oxillama.sampling.config.validate_generate_kwargs` adds the split into a SamplerConfig and
the other options. This module is a leaf: it imports nothing of oxillama but the errors.

Bounds that protect the process rather than the caller: num_beams <= MAX_NUM_BEAMS,
speculative_k <= MAX_SPECULATIVE_K, at most MAX_STOP_STRINGS stop strings of MAX_STOP_CHARS each,
seeds within 64 bits, integer sampler fields within int32 (top_k, min_keep, ...).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from oxillama.errors import InvalidArgumentError, SamplerError

__all__ = ["check_generate_kwargs", "check_prompt", "check_token_id", "MAX_NUM_BEAMS",
           "MAX_SPECULATIVE_K", "MAX_STOP_STRINGS", "MAX_STOP_CHARS"]

MAX_NUM_BEAMS = 64
MAX_SPECULATIVE_K = 64
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 4096
_INT32_MAX = 2**31 - 1
_SEED_MAX = 2**64 - 1

# keyword -> kind. Aliases of one SamplerConfig field share a kind.
_FLOATS = ("temperature", "temp", "top_p", "min_p", "typical_p", "typical", "typ_p", "top_a", "epsilon_cutoff",
           "eta_cutoff", "xtc_probability", "xtc_threshold", "repeat_penalty", "repetition_penalty",
           "frequency_penalty", "presence_penalty", "dry_multiplier", "dry_base", "dynatemp_range",
           "dynatemp_exponent", "mirostat_tau", "mirostat_eta", "tfs_z", "length_penalty")
_INTS = ("top_k", "min_keep", "min_tokens_to_keep", "repeat_last_n", "penalty_last_n", "last_n_tokens_size",
         "dry_allowed_length", "dry_penalty_last_n", "mirostat", "mirostat_mode", "mirostat_m")
_BOOLS = ("stream", "do_sample", "early_stopping")
_TOKEN_LISTS = ("banned_tokens", "suppress_tokens")
_STRING_LISTS = ("dry_sequence_breakers", "dry_sequence_breaker")


def _fail(name: str, want: str, value) -> InvalidArgumentError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidArgumentError(f"{name} must be {want}, got {type(value).__name__} {shown}")


def _scalar(name: str, value):
    """A NumPy scalar or 0-d array as the Python number it holds; arrays of more are an error."""
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise _fail(name, "a single value, not an array", value)
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
    return value


def _float(name: str, value) -> float:
    value = _scalar(name, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, "a number", value)
    try:
        f = float(value)
    except OverflowError:
        raise _fail(name, "a number within float range", value) from None
    if math.isnan(f):
        raise _fail(name, "a number (not NaN)", value)
    return f


def _int(name: str, value, lo: int = -_INT32_MAX - 1, hi: int = _INT32_MAX) -> int:
    value = _scalar(name, value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, "an int", value)
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _bool(name: str, value) -> bool:
    value = _scalar(name, value)
    if not isinstance(value, bool):
        raise _fail(name, "True or False", value)
    return value


def check_token_id(name: str, value, n_vocab: int | None) -> int:
    """value as a token id (an int in [0, n_vocab)), or InvalidArgumentError naming `name`."""
    return _token_id(name, value, n_vocab)


def _token_id(name: str, value, n_vocab: int | None) -> int:
    tid = _int(name, value, 0, _INT32_MAX)
    if n_vocab is not None and tid >= n_vocab:
        raise InvalidArgumentError(f"{name}: token id {tid} is outside the vocabulary (0..{n_vocab - 1})")
    return tid


def _sequence(name: str, value, want: str) -> list:
    """A list, tuple or 1-D array as a list (one string or a scalar is not a sequence here)."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise _fail(name, want, value)
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    raise _fail(name, want, value)


def _token_list(name: str, value, n_vocab: int | None) -> list[int]:
    items = _sequence(name, value, "a list of token ids")
    return [_token_id(f"{name}[{i}]", t, n_vocab) for i, t in enumerate(items)]


def _callables(name: str, value):
    if callable(value):
        return value
    if isinstance(value, (list, tuple)):
        for i, f in enumerate(value):
            if not callable(f):
                raise _fail(f"{name}[{i}]", "callable", f)
        return value
    raise _fail(name, "a callable or a list of callables", value)


def _stop(name: str, value) -> str | list[str]:
    if isinstance(value, str):
        items = [value]
    else:
        items = _sequence(name, value, "a string or a list of strings")
    if len(items) > MAX_STOP_STRINGS:
        raise InvalidArgumentError(f"{name} has {len(items)} strings (at most {MAX_STOP_STRINGS})")
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise _fail(f"{name}[{i}]", "a string", s)
        if len(s) > MAX_STOP_CHARS:
            raise InvalidArgumentError(f"{name}[{i}] is {len(s)} characters long (at most {MAX_STOP_CHARS})")
    return value if isinstance(value, str) else items


def _logit_bias(name: str, value, n_vocab: int | None) -> dict[int, float]:
    if not isinstance(value, Mapping):
        raise _fail(name, "a dict {token_id: bias}", value)
    out = {}
    for k, v in value.items():
        if isinstance(k, str):      # JSON object keys are strings
            try:
                k = int(k.strip())
            except ValueError:
                raise InvalidArgumentError(f"{name} key {k!r} is not a token id") from None
        tid = _token_id(f"{name} key", k, n_vocab)
        bias = _float(f"{name}[{tid}]", v)
        if bias == math.inf:
            raise InvalidArgumentError(f"{name}[{tid}] must be finite or -inf (a ban), got inf")
        out[tid] = bias
    return out


def _bad_words(name: str, value, n_vocab: int | None) -> list[list[int]]:
    seqs = _sequence(name, value, "a list of token-id lists")
    return [_token_list(f"{name}[{i}]", s, n_vocab) for i, s in enumerate(seqs)]


def _samplers(name: str, value):
    if value is None or isinstance(value, str):
        return value
    items = _sequence(name, value, "a list of stage names or a ';'-separated string")
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise _fail(f"{name}[{i}]", "a stage name", s)
    return items


def check_prompt(prompt, n_vocab: int | None = None):
    """A prompt is text, a sequence of token ids (list, tuple or 1-D integer array) or None (continue)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (bytes, bytearray)):
        raise _fail("prompt", "text (str), a list of token ids or None; decode bytes first", prompt)
    if isinstance(prompt, np.ndarray):
        if prompt.ndim != 1 or (prompt.size and not np.issubdtype(prompt.dtype, np.integer)):
            raise _fail("prompt", "a 1-D array of token ids", prompt)
        prompt = prompt.tolist()
    if not isinstance(prompt, (list, tuple)):
        raise _fail("prompt", "text (str), a list of token ids or None", prompt)
    return [_token_id(f"prompt[{i}]", t, n_vocab) for i, t in enumerate(prompt)]


def check_generate_kwargs(kwargs: Mapping[str, Any], *, n_vocab: int | None = None) -> dict[str, Any]:
    """`kwargs` with every known keyword checked and normalised (Python numbers, lists); unknown
    keywords pass through unchanged for the caller to refuse or use. None means "not given" for every
    keyword. Raises InvalidArgumentError naming the keyword."""
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        try:
            out[name] = _check_one(name, value, n_vocab)
        except InvalidArgumentError as exc:
            if name in _SAMPLER_KEYS and not isinstance(exc, SamplerError):
                raise SamplerError(str(exc)) from None   # still an InvalidArgumentError
            raise
    return out


# keywords that configure the sampler: their errors are SamplerErrors (a kind of InvalidArgumentError)
_SAMPLER_KEYS = frozenset(_FLOATS + _INTS + _TOKEN_LISTS + _STRING_LISTS + (
    "do_sample", "logit_bias", "bad_words_ids", "samplers", "stop", "stop_strings", "max_tokens",
    "max_new_tokens", "n_predict", "seed", "logprobs"))


def _check_one(name: str, value, n_vocab: int | None):
    """One keyword checked and normalised (see check_generate_kwargs)."""
    if value is None:
        return None
    elif name in _FLOATS:
        return _float(name, value)
    elif name in _INTS:
        return _int(name, value)
    elif name in _BOOLS:
        return _bool(name, value)
    elif name in _TOKEN_LISTS:
        return _token_list(name, value, n_vocab)
    elif name in _STRING_LISTS:
        items = _sequence(name, value, "a list of strings")
        for i, s in enumerate(items):
            if not isinstance(s, str):
                raise _fail(f"{name}[{i}]", "a string", s)
        return items
    elif name in ("stop", "stop_strings"):
        return _stop(name, value)
    elif name in ("max_tokens", "max_new_tokens", "n_predict"):
        return _int(name, value, -(2**63), 2**63 - 1)
    elif name == "seed":
        return _int(name, value, -1, _SEED_MAX)
    elif name == "logprobs":
        return _int(name, value, 0, n_vocab if n_vocab is not None else _INT32_MAX)
    elif name == "num_beams":
        return _int(name, value, 1, MAX_NUM_BEAMS)
    elif name == "speculative_k":
        return _int(name, value, 1, MAX_SPECULATIVE_K)
    elif name == "logit_bias":
        return _logit_bias(name, value, n_vocab)
    elif name == "bad_words_ids":
        return _bad_words(name, value, n_vocab)
    elif name == "samplers":
        return _samplers(name, value)
    elif name in ("logits_processor", "stopping_criteria"):
        return _callables(name, value)
    elif name == "callback":
        if not callable(value):
            raise _fail(name, "a callable", value)
        return value
    elif name == "response_format":
        if not isinstance(value, Mapping):
            raise _fail(name, 'a dict such as {"type": "json_object", "schema": {...}}', value)
        return value
    elif name == "prompt":
        return check_prompt(value, n_vocab)
    else:
        return value
