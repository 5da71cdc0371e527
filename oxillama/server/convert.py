"""The server's pydantic request bodies -> the OpenAI layer (oxillama.openai), which turns them into
generate() keywords the same way for `oxillama.Llama`; and the adapters a request asks for. Handlers stay
thin."""
from __future__ import annotations

from oxillama.errors import InvalidArgumentError
from oxillama.openai import request as openai_request
from oxillama.openai import shapes
from oxillama.openai.request import choice_seed  # noqa: F401  (the routes' name for it)
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
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest):
        max_tokens = openai_request.max_tokens_of(max_tokens, req.max_completion_tokens)
    response_format = None if req.response_format is None else req.response_format.to_dict()
    return openai_request.generate_kwargs(
        {name: getattr(req, name) for name in _PASSTHROUGH}, max_tokens=max_tokens, stop=req.stop,
        logit_bias=req.logit_bias, n_vocab=n_vocab, bias_bound=openai_request.LOGIT_BIAS_BOUND,
        ban=eog_ids if req.ignore_eos else (), grammar=req.grammar, response_format=response_format,
        logprobs=requested_logprobs(req))


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
        return openai_request.chat_logprobs_count(req.logprobs, req.top_logprobs)
    if isinstance(req, CompletionRequest):
        return req.logprobs
    return None


def logit_bias(bias: dict[str, float], n_vocab: int) -> dict[int, float]:
    """OpenAI's {"token id as a string": bias in [-100, 100]} -> {token_id: bias}."""
    return openai_request.openai_logit_bias(bias, n_vocab)


def chat_logprobs(tokenizer, tokens: list[int], logprobs: list[dict[int, float]], n_top: int) -> ChoiceLogprobs:
    """OpenAI chat shape: per generated token its text, bytes, log-probability and top alternatives
    (the dict `oxillama.Llama` returns, as the response model)."""
    return ChoiceLogprobs.model_validate(shapes.chat_logprobs(tokenizer, tokens, logprobs, n_top))


def completion_logprobs(tokenizer, tokens: list[int], logprobs: list[dict[int, float]], n_top: int,
                        offset: int = 0) -> CompletionLogprobs:
    """OpenAI legacy-completions shape: parallel lists of tokens, their log-probabilities, the top
    alternatives and each token's character offset in the text."""
    return CompletionLogprobs.model_validate(shapes.completion_logprobs(tokenizer, tokens, logprobs, n_top, offset))
