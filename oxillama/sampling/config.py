"""SamplerConfig: every sampling parameter, validated, serialisable to and from a plain dict.

Names and defaults follow llama.cpp (the `common_params_sampling` defaults), so a user who knows
`--top-k 40 --min-p 0.05` or llama-cpp-python's `create_completion(...)` finds the same knobs.
`resolve_generate_kwargs` also accepts Hugging Face `generate()` names (`max_new_tokens`,
`repetition_penalty`, `do_sample`, ...) and maps them here.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from oxillama.errors import InvalidArgumentError, SamplerError
from oxillama.sampling.validation import check_generate_kwargs, check_token_id

__all__ = ["SamplerConfig", "STAGE_NAMES", "DEFAULT_STAGE_ORDER", "resolve_generate_kwargs",
           "validate_generate_kwargs"]

log = logging.getLogger("oxillama.sampling")

# Stage names for a custom order (`SamplerConfig.samplers`, llama.cpp's `--samplers`).
# See oxillama.sampling.chain for what each does and for the default order.
STAGE_NAMES = ("penalties", "dry", "top_k", "typical_p", "top_p", "min_p", "top_a", "epsilon_cutoff",
               "eta_cutoff", "xtc", "temperature")
DEFAULT_STAGE_ORDER = ("penalties", "dry", "top_k", "typical_p", "top_p", "min_p", "top_a",
                       "epsilon_cutoff", "eta_cutoff", "xtc", "temperature")

# llama.cpp's default DRY sequence breakers
DEFAULT_DRY_BREAKERS = ("\n", ":", "\"", "*")


_INT32_MAX = 2**31 - 1


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SamplerConfig:
    """How the next token is chosen from a row of logits. Defaults are llama.cpp's.

    Truncation (each keeps at least `min_keep` tokens):
      top_k: keep the k most likely (0 or -1: off).
      top_p: keep the smallest most-likely prefix whose probability mass reaches top_p (1.0: off).
      min_p: keep tokens with p >= min_p * p_max (0: off).
      typical_p: locally typical sampling, keep the tokens whose surprise is closest to the
        entropy until their mass exceeds typical_p (1.0: off).
      top_a: keep tokens with p >= top_a * p_max**2 (0: off).
      epsilon_cutoff: keep tokens with p >= epsilon_cutoff (0: off; a probability, as in
        Hugging Face, e.g. 3e-4).
      eta_cutoff: keep tokens with p >= min(eta, sqrt(eta) * exp(-entropy)) (0: off).
      xtc_probability, xtc_threshold: with probability xtc_probability, remove every token with
        p >= xtc_threshold except the least likely of them (llama.cpp's "exclude top choices").
    Temperature:
      temperature: divide logits by it; 0 means greedy (argmax).
      dynatemp_range, dynatemp_exponent: dynamic temperature in
        [temperature - range, temperature + range] from the normalised entropy ** exponent.
    Penalties over the last `repeat_last_n` tokens of the history (-1: all of it, 0: off):
      repeat_penalty: divide positive logits / multiply negative ones of seen tokens (1.0: off).
      frequency_penalty, presence_penalty: subtract count * frequency + presence (0: off).
      dry_*: DRY ("don't repeat yourself"): a token that would extend a repeated sequence longer
        than dry_allowed_length gets dry_multiplier * dry_base ** (length - dry_allowed_length)
        subtracted; dry_sequence_breakers (strings) stop the match; dry_penalty_last_n as above.
    Mirostat (replaces the truncation stages, like llama.cpp): mirostat 1 or 2, mirostat_tau
      (target surprise, bits), mirostat_eta (learning rate), mirostat_m (v1's fitting window).
    Others:
      logit_bias: {token_id: bias} added to the logits first; -inf bans the token.
      banned_tokens: token ids that are never sampled.
      samplers: a custom stage order (names from STAGE_NAMES), None for the default.
    """

    temperature: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_a: float = 0.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    min_keep: int = 1
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple = DEFAULT_DRY_BREAKERS
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    mirostat_m: int = 100
    logit_bias: dict = field(default_factory=dict)
    banned_tokens: tuple = ()
    samplers: tuple | None = None

    def __post_init__(self):
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)

        def num(name, lo=-math.inf, hi=math.inf, lo_open=False, hi_open=False):
            v = getattr(self, name)
            if not _is_num(v) or math.isnan(v):
                raise SamplerError(f"{name} must be a number, got {v!r}")
            if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
                lb, hb = "(" if lo_open else "[", ")" if hi_open else "]"
                raise SamplerError(f"{name} must be in {lb}{lo}, {hi}{hb}, got {v!r}")
            fix(name, float(v))

        def integer(name, lo):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
                raise SamplerError(f"{name} must be an int, got {v!r}")
            if not lo <= v <= _INT32_MAX:
                raise SamplerError(f"{name} must be in [{lo}, {_INT32_MAX}], got {v!r}")
            fix(name, int(v))

        num("temperature", 0.0)
        num("dynatemp_range", 0.0)
        num("dynatemp_exponent", 0.0)
        integer("top_k", -1)
        num("top_p", 0.0, 1.0, lo_open=True)
        num("min_p", 0.0, 1.0)
        num("typical_p", 0.0, 1.0, lo_open=True)
        num("top_a", 0.0)
        num("epsilon_cutoff", 0.0, 1.0, hi_open=True)
        num("eta_cutoff", 0.0, 1.0, hi_open=True)
        num("xtc_probability", 0.0, 1.0)
        num("xtc_threshold", 0.0, 1.0)
        integer("min_keep", 1)
        num("repeat_penalty", 0.0, lo_open=True)
        integer("repeat_last_n", -1)
        num("frequency_penalty")
        num("presence_penalty")
        num("dry_multiplier", 0.0)
        num("dry_base", 1.0)
        integer("dry_allowed_length", 0)
        integer("dry_penalty_last_n", -1)
        integer("mirostat", 0)
        if self.mirostat not in (0, 1, 2):
            raise SamplerError(f"mirostat must be 0 (off), 1 or 2, got {self.mirostat}")
        num("mirostat_tau", 0.0)
        num("mirostat_eta", 0.0)
        integer("mirostat_m", 1)
        for name in ("frequency_penalty", "presence_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise SamplerError(f"{name} must be finite, got {getattr(self, name)}")

        breakers = self.dry_sequence_breakers
        if isinstance(breakers, str):
            raise SamplerError("dry_sequence_breakers must be a list of strings, not one string")
        if not isinstance(breakers, (list, tuple)):
            raise SamplerError(f"dry_sequence_breakers must be a list of strings, got {type(breakers).__name__}")
        breakers = tuple(breakers)
        for b in breakers:
            if not isinstance(b, str) or not b:
                raise SamplerError(f"dry_sequence_breakers entries must be non-empty strings, got {b!r}")
        fix("dry_sequence_breakers", breakers)

        bias = {}
        if not isinstance(self.logit_bias, dict):
            raise SamplerError(f"logit_bias must be a dict {{token_id: bias}}, got {type(self.logit_bias).__name__}")
        for k, v in self.logit_bias.items():
            try:
                tid = int(k)  # JSON turns int keys into strings
            except (TypeError, ValueError):
                raise SamplerError(f"logit_bias key {k!r} is not a token id") from None
            if not 0 <= tid <= _INT32_MAX:
                raise SamplerError(f"logit_bias token id must be in [0, {_INT32_MAX}], got {tid}")
            if not _is_num(v) or math.isnan(v) or v == math.inf:
                raise SamplerError(f"logit_bias[{tid}] must be a finite number or -inf, got {v!r}")
            bias[tid] = float(v)
        fix("logit_bias", bias)

        banned = []
        if not isinstance(self.banned_tokens, (list, tuple)):
            raise SamplerError(f"banned_tokens must be a list of token ids, got {type(self.banned_tokens).__name__}")
        for t in self.banned_tokens:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= _INT32_MAX:
                raise SamplerError(f"banned_tokens must be token ids >= 0, got {t!r}")
            banned.append(int(t))
        fix("banned_tokens", tuple(banned))

        if self.samplers is not None:
            if isinstance(self.samplers, str):
                # llama.cpp's --samplers takes "top_k;top_p;temperature"
                names = tuple(s.strip() for s in self.samplers.replace(",", ";").split(";") if s.strip())
            elif isinstance(self.samplers, (list, tuple)):
                names = tuple(self.samplers)
            else:
                raise SamplerError(f"samplers must be a list of stage names or a string, got "
                                   f"{type(self.samplers).__name__}")
            unknown = [n for n in names if n not in STAGE_NAMES]
            if unknown:
                raise SamplerError(f"unknown sampler stage(s) {unknown}; known: {', '.join(STAGE_NAMES)}")
            if len(set(names)) != len(names):
                raise SamplerError(f"samplers lists a stage twice: {names}")
            fix("samplers", names)

    @property
    def greedy(self) -> bool:
        """True when the token is the argmax of the penalised logits (temperature 0)."""
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        """A plain dict (str keys; lists, numbers, strings, None) that from_dict() turns back into an
        equal config. logit_bias is written as [[token_id, bias], ...] so JSON and msgpack keep it."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "logit_bias":
                v = [[k, b] for k, b in sorted(v.items())]
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "SamplerConfig":
        """Inverse of to_dict(); unknown keys raise SamplerError (a typo must not pass silently)."""
        if not isinstance(d, dict):
            raise SamplerError(f"SamplerConfig.from_dict needs a dict, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise SamplerError(f"unknown SamplerConfig field(s): {', '.join(map(str, unknown))}")
        kw = dict(d)
        if "logit_bias" in kw and isinstance(kw["logit_bias"], list):
            try:
                kw["logit_bias"] = {int(k): v for k, v in kw["logit_bias"]}
            except (TypeError, ValueError):
                raise SamplerError("logit_bias must be a list of [token_id, bias] pairs or a dict") from None
        for name in ("dry_sequence_breakers", "banned_tokens", "samplers"):
            if isinstance(kw.get(name), list):
                kw[name] = tuple(kw[name])
        return cls(**kw)

    def replace(self, **changes) -> "SamplerConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


# --- generate() keyword arguments ------------------------------------------------------------

# canonical SamplerConfig field -> names accepted for it (llama.cpp / llama-cpp-python / HF / server)
_CONFIG_ALIASES = {
    "temperature": ("temperature", "temp"),
    "top_k": ("top_k",),
    "top_p": ("top_p",),
    "min_p": ("min_p",),
    "typical_p": ("typical_p", "typical", "typ_p"),
    "top_a": ("top_a",),
    "epsilon_cutoff": ("epsilon_cutoff",),
    "eta_cutoff": ("eta_cutoff",),
    "xtc_probability": ("xtc_probability",),
    "xtc_threshold": ("xtc_threshold",),
    "min_keep": ("min_keep", "min_tokens_to_keep"),
    "repeat_penalty": ("repeat_penalty", "repetition_penalty"),
    "repeat_last_n": ("repeat_last_n", "penalty_last_n", "last_n_tokens_size"),
    "frequency_penalty": ("frequency_penalty",),
    "presence_penalty": ("presence_penalty",),
    "dry_multiplier": ("dry_multiplier",),
    "dry_base": ("dry_base",),
    "dry_allowed_length": ("dry_allowed_length",),
    "dry_penalty_last_n": ("dry_penalty_last_n",),
    "dry_sequence_breakers": ("dry_sequence_breakers", "dry_sequence_breaker"),
    "dynatemp_range": ("dynatemp_range",),
    "dynatemp_exponent": ("dynatemp_exponent",),
    "mirostat": ("mirostat", "mirostat_mode"),
    "mirostat_tau": ("mirostat_tau",),
    "mirostat_eta": ("mirostat_eta",),
    "mirostat_m": ("mirostat_m",),
    "logit_bias": ("logit_bias",),
    "banned_tokens": ("banned_tokens", "suppress_tokens"),
    "samplers": ("samplers",),
}

# canonical generate() option -> accepted names; these are returned in other_kwargs
_OTHER_ALIASES = {
    "max_tokens": ("max_tokens", "max_new_tokens", "n_predict"),
    "stop": ("stop", "stop_strings"),
}

_SAME = object()


def _pick(kwargs: dict, names: tuple, what: str):
    """The one value given under any of `names` (popped from kwargs); conflicting values raise."""
    found = [(n, kwargs.pop(n)) for n in names if n in kwargs]
    found = [(n, v) for n, v in found if v is not None]
    if not found:
        return _SAME
    name0, v0 = found[0]
    for n, v in found[1:]:
        if not _equal(v, v0):
            raise SamplerError(f"conflicting values for {what}: {name0}={v0!r} and {n}={v!r}")
    return v0


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays
        return a is b


def resolve_generate_kwargs(**kwargs) -> tuple[SamplerConfig, dict[str, Any]]:
    """Split generate()-style keyword arguments into a SamplerConfig and everything else.

    Accepts llama.cpp / llama-cpp-python names and Hugging Face names for the same thing
    (temp/temperature, repeat_penalty/repetition_penalty, max_tokens/max_new_tokens/n_predict,
    stop/stop_strings, typical_p, min_tokens_to_keep, suppress_tokens, ...). Giving two aliases
    with different values raises SamplerError. `sampler=SamplerConfig(...)` (or a dict) is the
    base that the other sampling arguments override. `do_sample=False` means greedy (as in
    Hugging Face, whatever temperature says); `do_sample=True` with temperature 0 is a conflict.
    `tfs_z` (removed from llama.cpp) is accepted only at its neutral value 1.0.

    Returns (config, other): other holds the remaining arguments with canonical names
    (`max_tokens`, `stop` as a list of strings, and anything not about sampling, such as `seed`,
    `logprobs`, `logits_processor`, `stopping_criteria`, `stream`, unchanged).
    """
    return _resolve_checked(check_generate_kwargs(kwargs))    # types and ranges of every known keyword


def validate_generate_kwargs(kwargs: dict[str, Any], *, n_vocab: int | None = None):
    """(SamplerConfig, other options) from generate()-style keywords, every value checked once (token ids
    against n_vocab): the one call a request, a scheduler, a server or a drop-in face needs before it
    queues anything."""
    checked = check_generate_kwargs(kwargs, n_vocab=n_vocab)
    base = checked.get("sampler")
    if base is not None and not isinstance(base, (SamplerConfig, dict)):
        raise InvalidArgumentError(f"sampler must be a SamplerConfig or a dict, got {type(base).__name__}")
    config, other = _resolve_checked(checked)
    if n_vocab is not None:     # ids that came in through sampler=
        for tid in list(config.logit_bias) + list(config.banned_tokens):
            check_token_id("sampler token id", tid, n_vocab)
    return config, other


def _resolve_checked(kwargs: dict[str, Any]) -> tuple[SamplerConfig, dict[str, Any]]:
    """resolve_generate_kwargs on keywords check_generate_kwargs has already checked."""
    kwargs = dict(kwargs)
    base = kwargs.pop("sampler", None)
    if base is None:
        base = SamplerConfig()
    elif isinstance(base, dict):
        base = SamplerConfig.from_dict(base)
    elif not isinstance(base, SamplerConfig):
        raise SamplerError(f"sampler must be a SamplerConfig or a dict, got {type(base).__name__}")

    changes = {}
    for field_name, names in _CONFIG_ALIASES.items():
        v = _pick(kwargs, names, field_name)
        if v is not _SAME:
            changes[field_name] = v

    tfs_z = kwargs.pop("tfs_z", None)   # a float (check_generate_kwargs)
    if tfs_z is not None and tfs_z != 1.0:
        raise SamplerError(f"tfs_z (tail-free sampling) is not supported (removed from llama.cpp); got {tfs_z}")

    # Hugging Face bad_words_ids: single-token entries are banned tokens
    bad = kwargs.pop("bad_words_ids", None)
    if bad is not None:
        extra = []
        for seq in bad:     # lists of ints (check_generate_kwargs)
            if len(seq) != 1:
                raise SamplerError(f"bad_words_ids entries of more than one token are not supported: {seq}")
            extra.append(int(seq[0]))
        changes["banned_tokens"] = tuple(changes.get("banned_tokens", base.banned_tokens)) + tuple(extra)

    do_sample = kwargs.pop("do_sample", None)
    if do_sample is not None:
        if not isinstance(do_sample, bool):
            raise SamplerError(f"do_sample must be True or False, got {do_sample!r}")
        if do_sample is False:
            ignored = [k for k in ("top_k", "top_p", "min_p", "typical_p") if k in changes]
            if "temperature" in changes and changes["temperature"] != 0:
                ignored.append("temperature")
            if ignored:
                log.warning("do_sample=False means greedy decoding; ignoring %s", ", ".join(ignored))
            changes["temperature"] = 0.0
        elif changes.get("temperature", base.temperature) == 0:
            raise SamplerError("do_sample=True conflicts with temperature=0 (which means greedy)")

    other = {}
    for canon, names in _OTHER_ALIASES.items():
        v = _pick(kwargs, names, canon)
        if v is not _SAME:
            other[canon] = v
    if "stop" in other:
        stop = other["stop"]
        if isinstance(stop, str):
            stop = [stop]
        stop = list(stop)   # strings (check_generate_kwargs)
        if not all(isinstance(s, str) for s in stop):
            raise SamplerError(f"stop must be a string or a list of strings, got {stop!r}")
        other["stop"] = [s for s in stop if s]
    if "max_tokens" in other:
        mt = other["max_tokens"]
        if isinstance(mt, bool) or not isinstance(mt, int):
            raise SamplerError(f"max_tokens must be an int, got {mt!r}")
        # llama.cpp's n_predict=-1 and llama-cpp-python's max_tokens<=0 mean "until the context is full"
        other["max_tokens"] = None if mt <= 0 else mt
    other.update(kwargs)

    config = base.replace(**changes) if changes else base
    return config, other
