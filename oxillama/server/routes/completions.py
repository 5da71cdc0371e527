"""POST /v1/completions (legacy text completions): one or several prompts, n choices each."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request

from oxillama.openai.shapes import completion_choice
from oxillama.openai.stream import CompletionChoiceStream
from oxillama.server import convert, sse
from oxillama.server.auth import require_api_key
from oxillama.server.errors import APIError
from oxillama.server.protocol.completions import (CompletionChoice, CompletionRequest,
                                                  CompletionResponse)
from oxillama.server.routes import ready_state
from oxillama.server.routes._generation import (ChunkFrames, error_event, results_or_cancel, streamed_choices,
                                                submit_all, usage_info)
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])

MAX_PROMPTS = 64


def _prompts(req: CompletionRequest) -> list:
    p = req.prompt
    if isinstance(p, str):
        return [p]
    if not p:
        raise APIError(400, "prompt must not be empty", param="prompt")
    if isinstance(p[0], int):
        return [list(p)]
    if len(p) > MAX_PROMPTS:
        raise APIError(400, f"at most {MAX_PROMPTS} prompts per request, got {len(p)}", param="prompt")
    return list(p)


def text_of_choice(c: dict) -> tuple | None:
    """("text", text) of a streamed choice that carries only text, else None
    (oxillama.server.routes._generation.ChunkFrames)"""
    return ("text", c["text"]) if c["logprobs"] is None and c["finish_reason"] is None else None


def text_choice(index: int, field: str, text: str) -> dict:
    return completion_choice(text, index)


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request, state: ServerState = Depends(ready_state)):
    state = await state.serving(req.model)
    state.metrics.api_requests.labels(state.model_name, "completions").inc()
    if req.suffix:
        raise APIError(400, "suffix (fill-in-the-middle) is not supported", param="suffix")
    engine = state.engine
    prompts = _prompts(req)
    kwargs = convert.generate_kwargs(req, engine.n_vocab, engine.tokenizer.eog_ids)
    loras = convert.request_loras(req, state)
    if loras:
        kwargs["lora"] = loras
    handles = submit_all(state.scheduler, prompts, req.n, req.seed, kwargs)
    request_id = convert.new_id("cmpl")
    echoes = [(p if isinstance(p, str) else engine.detokenize(p)) if req.echo else "" for p in prompts]

    def logprobs_of(c, offset):
        if req.logprobs is None:
            return None
        return convert.completion_logprobs(engine.tokenizer, c.tokens, c.logprobs or [], req.logprobs, offset)

    if not req.stream:
        results = await results_or_cancel(request, handles)
        if results is None:
            return None
        choices = []
        for i, c in enumerate(results):
            echo = echoes[i // req.n]
            choices.append(CompletionChoice(index=i, text=echo + str(c), finish_reason=c.finish_reason,
                                            logprobs=logprobs_of(c, len(echo))))
        return CompletionResponse(id=request_id, model=state.model_name, choices=choices,
                                  usage=usage_info(handles, req.n, results, engine.tokenizer.eog_ids))

    created = int(time.time())
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(choices: list[dict], usage=None) -> CompletionResponse:
        return CompletionResponse(id=request_id, created=created, model=state.model_name,
                                  choices=[CompletionChoice.model_validate(c) for c in choices], usage=usage)

    frames = ChunkFrames(chunk, text_of_choice, text_choice)

    async def events():
        try:
            # each text chunk carries the logprobs of the tokens behind it (oxillama.openai.stream)
            streams = [CompletionChoiceStream(i, h, engine.tokenizer, req.logprobs, echoes[i // req.n])
                       for i, h in enumerate(handles)]
            for s in streams:
                for choice in s.opening():
                    yield frames.choice(choice)
            results = [None] * len(handles)
            async for choice in streamed_choices(handles, streams, results):
                yield frames.choice(choice)
            if include_usage:
                yield frames.chunk([], usage=usage_info(handles, req.n, results, engine.tokenizer.eog_ids))
            yield sse.DONE
        except Exception as e:     # after the headers: the error becomes the stream's last event
            yield error_event(e)
        finally:                   # the client went away (or the drain ran out): free the slots
            for h in handles:
                if not h.done:
                    h.cancel()

    return sse.EventStream(events(), state.config.drain_timeout)
