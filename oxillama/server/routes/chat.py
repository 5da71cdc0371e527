"""POST /v1/chat/completions: the messages rendered with the model's chat template, then n
submissions to the scheduler; streamed as Server-Sent Events when asked."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from oxillama.server import convert
from oxillama.server.auth import require_api_key
from oxillama.server.protocol.chat import (AssistantMessage, ChatCompletionChoice, ChatCompletionChunk,
                                           ChatCompletionRequest, ChatCompletionResponse,
                                           ChatCompletionStreamChoice, DeltaMessage)
from oxillama.server.routes import ready_state
from oxillama.server.routes._generation import (error_event, merged_stream, results_or_cancel, submit_all,
                                                usage_info)
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def chat_prompt(state: ServerState, req: ChatCompletionRequest) -> str:
    # OpenAI's newer "developer" role is what templates call "system"
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in req.messages]
    return state.engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True)


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, state: ServerState = Depends(ready_state)):
    kwargs = convert.generate_kwargs(req, state.engine.n_vocab, state.engine.tokenizer.eog_ids)
    n_top = convert.requested_logprobs(req)
    prompt = chat_prompt(state, req)
    handles = submit_all(state.scheduler, [prompt], req.n, req.seed, kwargs)
    request_id = convert.new_id("chatcmpl")
    tokenizer = state.engine.tokenizer

    def logprobs_of(c):
        return None if n_top is None else convert.chat_logprobs(tokenizer, c.tokens, c.logprobs or [], n_top)

    if not req.stream:
        completions = await results_or_cancel(request, handles)
        if completions is None:
            return None     # nobody is listening
        choices = [ChatCompletionChoice(index=i, message=AssistantMessage(content=str(c)),
                                        finish_reason=c.finish_reason, logprobs=logprobs_of(c))
                   for i, c in enumerate(completions)]
        return ChatCompletionResponse(id=request_id, model=state.model_name, choices=choices,
                                      usage=usage_info(handles, req.n, completions))

    created = int(time.time())
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(choices, usage=None) -> ServerSentEvent:
        body = ChatCompletionChunk(id=request_id, created=created, model=state.model_name, choices=choices,
                                   usage=usage)
        return ServerSentEvent(data=body.model_dump_json())

    async def events():
        try:
            for i in range(len(handles)):   # every choice opens with the role
                yield chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
            completions = [None] * len(handles)
            async for i, piece, final in merged_stream(handles):
                if final is None:
                    yield chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage(content=piece))])
                else:
                    completions[i] = final
                    # logprobs of the whole choice ride on its last chunk (pieces are not tokens)
                    yield chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage(), logprobs=logprobs_of(final),
                                                            finish_reason=final.finish_reason)])
            if include_usage:
                yield chunk([], usage=usage_info(handles, req.n, completions))
            yield ServerSentEvent(data="[DONE]")
        except Exception as e:     # after the headers: the error becomes the stream's last event
            yield error_event(e)
        finally:                   # the client went away (or the drain ran out): free the slots
            for h in handles:
                if not h.done:
                    h.cancel()

    return EventSourceResponse(events(), sep="\n", shutdown_grace_period=state.config.drain_timeout)
