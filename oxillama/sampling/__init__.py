"""Sampling: choose the next token from a row of logits.

`Sampler(SamplerConfig(...), seed).sample(logits, tokens)` is the whole API most code needs. The
stages are usable alone (`TopP(0.9)(tokens, logits)`) or in a custom `SamplerChain`; the default
order is documented once, on SamplerChain.
"""
from oxillama.sampling.base import Selector, Stage, StepContext
from oxillama.sampling.chain import SamplerChain, build_chain
from oxillama.sampling.config import (DEFAULT_STAGE_ORDER, STAGE_NAMES, SamplerConfig, resolve_generate_kwargs,
                                      validate_generate_kwargs)
from oxillama.sampling.logprobs import token_logprobs, top_logprobs
from oxillama.sampling.penalties import (DRY, BanTokens, FrequencyPresencePenalty, LogitBias, LogitsProcessorStage,
                                         RepetitionPenalty, dry_breakers_from_vocab)
from oxillama.sampling.rng import SamplerRNG
from oxillama.sampling.sampler import Sampler
from oxillama.sampling.selection import Greedy, MirostatV1, MirostatV2, WeightedDraw
from oxillama.sampling.stopping import MaxNewTokens, StoppingCriteria, StoppingCriteriaList, StopStrings, StopTokens
from oxillama.sampling.temperature import Temperature
from oxillama.sampling.truncation import XTC, EpsilonCutoff, EtaCutoff, MinP, TopA, TopK, TopP, TypicalP
from oxillama.sampling.validation import check_generate_kwargs, check_prompt

__all__ = [
    "Sampler", "SamplerConfig", "SamplerChain", "SamplerRNG", "build_chain", "resolve_generate_kwargs",
    "check_generate_kwargs", "validate_generate_kwargs", "check_prompt",
    "STAGE_NAMES", "DEFAULT_STAGE_ORDER", "Stage", "Selector", "StepContext",
    "LogitBias", "BanTokens", "LogitsProcessorStage", "RepetitionPenalty", "FrequencyPresencePenalty", "DRY",
    "dry_breakers_from_vocab", "TopK", "TopP", "MinP", "TypicalP", "TopA", "EpsilonCutoff", "EtaCutoff", "XTC",
    "Temperature", "Greedy", "WeightedDraw", "MirostatV1", "MirostatV2",
    "top_logprobs", "token_logprobs",
    "StoppingCriteria", "StoppingCriteriaList", "MaxNewTokens", "StopTokens", "StopStrings",
]
