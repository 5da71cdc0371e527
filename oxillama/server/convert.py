"""Translation between the API's pydantic bodies and the engine/scheduler's Python face: request ->
(prompt, generate() keywords), Completion -> choices, logprobs in OpenAI's two shapes. Handlers stay
thin, and the same conversion can serve any OpenAI-shaped front end."""
from __future__ import annotations

import math

from oxillama.compat import openai_shapes as shapes
from oxillama.errors import InvalidArgumentError
from oxillama.server.protocol.chat import ChatCompletionRequest, ChoiceLogprobs
from oxillama.server.protocol.common import SamplingFields
from oxillama.server.protocol.completions import CompletionLogprobs, CompletionRequest

# request fields passed to generate() under the same name when the client set them
_PASSTHROUGH = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                "frequency_penalty")


new_id = shapes.new_id


def generate_kwargs(req: SamplingFields, n_vocab: int, eog_ids=()) -> dict:
    """generate()/Scheduler.submit() keywords for a request (without seed: see choice_seed).
    eog_ids: the end-of-generation tokens, banned when the request says ignore_eos (as llama.cpp does)."""
    kw: dict = {}
    for name in _PASSTHROUGH:
        value = getattr(req, name)
        if value is not None:
            kw[name] = value
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != req.max_completion_tokens:
            raise InvalidArgumentError(f"max_tokens={max_tokens} and max_completion_tokens="
                                       f"{req.max_completion_tokens} disagree; give one")
        max_tokens = req.max_completion_tokens
    kw["max_tokens"] = max_tokens          # None: until the context is full, as OpenAI's default
    if req.stop is not None:
        kw["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    bias = logit_bias(req.logit_bias, n_vocab) if req.logit_bias else {}
    if req.ignore_eos:
        bias.update({int(t): -math.inf for t in eog_ids})
    if bias:
        kw["logit_bias"] = bias
    if req.grammar is not None and req.response_format is not None and req.response_format.type != "text":
        raise InvalidArgumentError("give grammar or response_format, not both")
    if req.grammar is not None:
        from oxillama.grammar import Grammar
        kw["grammar"] = Grammar(req.grammar)
    elif req.response_format is not None and req.response_format.type != "text":
        # compiled here so that an invalid schema is a 400 before anything is queued
        from oxillama.grammar import grammar_from_response_format
        kw["grammar"] = grammar_from_response_format(req.response_format.to_dict())
    n_logprobs = requested_logprobs(req)
    if n_logprobs is not None:
        kw["logprobs"] = n_logprobs
    return kw


def request_loras(req: SamplingFields, state) -> list:
    """[(LoraAdapter, scale)] a request asks for: the adapter its `model` names ("<base>:NAME", or
    "NAME" alone when that is an adapter's name) at scale 1, then its `lora` list. Another `model`
    is not checked (as llama.cpp's server: one model per process)."""
    chosen = []
    model = req.model or ""
    if model.startswith(state.model_name + ":"):        # the served name may itself hold a ':'
        name = model[len(state.model_name) + 1:]
        chosen.append((name, state.adapter(name), 1.0))
    elif model in state.loras:
        chosen.append((model, state.loras[model], 1.0))
    names = list(state.loras)
    for i, item in enumerate(req.lora or ()):
        if (item.name is None) == (item.id is None):
            raise InvalidArgumentError(f"lora[{i}]: give the adapter's name or its id, one of them")
        if item.id is not None:
            if item.id >= len(names):
                raise InvalidArgumentError(f"lora[{i}]: id {item.id} is not an adapter (the server has {len(names)})")
            key = names[item.id]
        else:
            key = item.name
        chosen.append((key, state.adapter(key), item.scale))
    seen = set()
    for key, _, _ in chosen:
        if key in seen:
            raise InvalidArgumentError(f"the LoRA adapter {key!r} is asked for twice")
        seen.add(key)
    for key, _, _ in chosen:
        state.metrics.lora_requests.labels(state.model_name, key).inc()
    return [(adapter, scale) for _, adapter, scale in chosen]


def requested_logprobs(req: SamplingFields) -> int | None:
    """How many top log-probabilities per token the request asks for, or None for none."""
    if isinstance(req, ChatCompletionRequest):
        if req.top_logprobs is not None and not req.logprobs:
            raise InvalidArgumentError("top_logprobs needs logprobs=true")
        return (req.top_logprobs or 0) if req.logprobs else None
    if isinstance(req, CompletionRequest):
        return req.logprobs
    return None


def choice_seed(seed: int | None, index: int) -> int | None:
    """Choice i of a seeded n > 1 request samples with seed + i: choice 0 is the seeded single request,
    the others differ from it."""
    return None if seed is None else seed + index


def logit_bias(bias: dict[str, float], n_vocab: int) -> dict[int, float]:
    """OpenAI's {"token id as a string": bias in [-100, 100]} -> {token_id: bias}."""
    out = {}
    for key, value in bias.items():
        try:
            tid = int(key)
        except ValueError:
            raise InvalidArgumentError(f"logit_bias key {key!r} is not a token id") from None
        if not 0 <= tid < n_vocab:
            raise InvalidArgumentError(f"logit_bias token id {tid} is outside the vocabulary (0..{n_vocab - 1})")
        if not -100.0 <= value <= 100.0:
            raise InvalidArgumentError(f"logit_bias[{key}] must be in [-100, 100], got {value}")
        out[tid] = float(value)
    return out


def chat_logprobs(tokenizer, tokens: list[int], logprobs: list[dict[int, float]], n_top: int) -> ChoiceLogprobs:
    """OpenAI chat shape: per generated token its text, bytes, log-probability and top alternatives
    (the dict `oxillama.Llama` returns, as the response model)."""
    return ChoiceLogprobs.model_validate(shapes.chat_logprobs(tokenizer, tokens, logprobs, n_top))


def completion_logprobs(tokenizer, tokens: list[int], logprobs: list[dict[int, float]], n_top: int,
                        offset: int = 0) -> CompletionLogprobs:
    """OpenAI legacy-completions shape: parallel lists of tokens, their log-probabilities, the top
    alternatives and each token's character offset in the text."""
    return CompletionLogprobs.model_validate(shapes.completion_logprobs(tokenizer, tokens, logprobs, n_top, offset))
