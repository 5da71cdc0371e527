"""POST /v1/completions (legacy text completions): one or several prompts, n choices each."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from oxillama.compat import openai_shapes as shapes
from oxillama.server import convert
from oxillama.server.auth import require_api_key
from oxillama.server.errors import APIError
from oxillama.server.protocol.completions import (CompletionChoice, CompletionLogprobs, CompletionRequest,
                                                  CompletionResponse)
from oxillama.server.routes import ready_state
from oxillama.server.routes._generation import (error_event, merged_stream, results_or_cancel, submit_all,
                                                usage_info)
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


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request, state: ServerState = Depends(ready_state)):
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

    def chunk(choices, usage=None) -> ServerSentEvent:
        body = CompletionResponse(id=request_id, created=created, model=state.model_name, choices=choices,
                                  usage=usage)
        return ServerSentEvent(data=body.model_dump_json())

    def streamed_logprobs(i: int):
        """choice i's logprobs chunk by chunk, text offsets running on from its echo"""
        to_dicts = shapes.completion_logprobs_from(engine.tokenizer, req.logprobs, len(echoes[i // req.n]))
        return shapes.StreamedLogprobs(handles[i], lambda t, e: CompletionLogprobs.model_validate(to_dicts(t, e)))

    async def events():
        try:
            if req.echo:
                for i in range(len(handles)):
                    yield chunk([CompletionChoice(index=i, text=echoes[i // req.n])])
            results = [None] * len(handles)
            # each text chunk carries the logprobs of the tokens behind it (the last one those left)
            lps = [streamed_logprobs(i) if req.logprobs is not None else None for i in range(len(handles))]
            async for i, piece, mark, final in merged_stream(handles):
                if final is None:
                    yield chunk([CompletionChoice(index=i, text=piece, logprobs=lps[i] and lps[i].take(mark))])
                else:
                    results[i] = final
                    yield chunk([CompletionChoice(index=i, text="", finish_reason=final.finish_reason,
                                                  logprobs=lps[i] and lps[i].take(mark))])
            if include_usage:
                yield chunk([], usage=usage_info(handles, req.n, results, engine.tokenizer.eog_ids))
            yield ServerSentEvent(data="[DONE]")
        except Exception as e:     # after the headers: the error becomes the stream's last event
            yield error_event(e)
        finally:                   # the client went away (or the drain ran out): free the slots
            for h in handles:
                if not h.done:
                    h.cancel()

    return EventSourceResponse(events(), sep="\n", shutdown_grace_period=state.config.drain_timeout)
