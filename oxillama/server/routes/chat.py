"""POST /v1/chat/completions: the messages (and tools) rendered with the model's chat template, then n
submissions to the scheduler; streamed as Server-Sent Events when asked. The conversion (tool_choice,
the forcing grammar, reading tool calls back, streamed tool-call deltas) is `oxillama.openai`, the same
code `oxillama.Llama.create_chat_completion` runs."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request

from oxillama.openai import shapes
from oxillama.openai.stream import ChatChoiceStream
from oxillama.server import convert, sse
from oxillama.server.auth import require_api_key
from oxillama.server.protocol.chat import (AssistantMessage, ChatCompletionChoice, ChatCompletionChunk,
                                           ChatCompletionRequest, ChatCompletionResponse,
                                           ChatCompletionStreamChoice, ToolCall)
from oxillama.server.routes import ready_state
from oxillama.server.routes._chat_run import ChatStreamDeltas, finished_output, prepare
from oxillama.server.routes._generation import (ChunkFrames, error_event, results_or_cancel, streamed_choices,
                                                submit_all, usage_info)
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def assistant_message(content: str | None, calls, reasoning: str | None = None) -> AssistantMessage:
    return AssistantMessage(content=content, reasoning_content=reasoning,
                            tool_calls=[ToolCall.model_validate(c.to_openai()) for c in calls] or None)


def text_of_choice(c: dict) -> tuple | None:
    """(field, text) of a streamed choice whose delta is only answer text or only thinking text, else None
    (oxillama.server.routes._generation.ChunkFrames)"""
    delta = c["delta"]
    if c["logprobs"] is None and c["finish_reason"] is None and len(delta) == 1:
        for field in ("content", "reasoning_content"):
            text = delta.get(field)
            if text is not None:
                return field, text
    return None


def text_choice(index: int, field: str, text: str) -> dict:
    return {"index": index, "delta": {field: text}, "logprobs": None, "finish_reason": None}


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, state: ServerState = Depends(ready_state)):
    state = await state.serving(req.model)
    state.metrics.api_requests.labels(state.model_name, "chat").inc()
    plan, kwargs, reasoning = prepare(state, req)
    tokenizer = state.engine.tokenizer
    n_top = convert.requested_logprobs(req)
    handles = submit_all(state.scheduler, [plan.prompt], req.n, req.seed, kwargs)
    request_id = convert.new_id("chatcmpl")

    def logprobs_of(c):
        return None if n_top is None else convert.chat_logprobs(tokenizer, c.tokens, c.logprobs or [], n_top)

    if not req.stream:
        completions = await results_or_cancel(request, handles)
        if completions is None:
            return None     # nobody is listening
        choices = []
        for i, c in enumerate(completions):
            thinking, content, calls = finished_output(plan, str(c), reasoning)
            choices.append(ChatCompletionChoice(index=i, message=assistant_message(content, calls, thinking),
                                                finish_reason=shapes.chat_finish_reason(c.finish_reason, calls),
                                                logprobs=logprobs_of(c)))
        return ChatCompletionResponse(id=request_id, model=state.model_name, choices=choices,
                                      usage=usage_info(handles, req.n, completions, tokenizer.eog_ids))

    created = int(time.time())
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(choices: list[dict], usage=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=request_id, created=created, model=state.model_name,
                                   choices=[ChatCompletionStreamChoice.model_validate(c) for c in choices],
                                   usage=usage)

    frames = ChunkFrames(chunk, text_of_choice, text_choice)

    async def events():
        try:
            # each delta carries the logprobs of the tokens behind it (oxillama.openai.stream)
            streams = [ChatChoiceStream(i, plan, h, tokenizer, n_top, deltas=ChatStreamDeltas(plan, reasoning))
                       for i, h in enumerate(handles)]
            for s in streams:       # every choice opens with the role
                yield frames.chunk(s.opening(content=""))
            completions = [None] * len(handles)
            async for choice in streamed_choices(handles, streams, completions):
                yield frames.choice(choice)
            if include_usage:
                yield frames.chunk([], usage=usage_info(handles, req.n, completions, tokenizer.eog_ids))
            yield sse.DONE
        except Exception as e:     # after the headers: the error becomes the stream's last event
            yield error_event(e)
        finally:                   # the client went away (or the drain ran out): free the slots
            for h in handles:
                if not h.done:
                    h.cancel()

    return sse.EventStream(events(), state.config.drain_timeout)
