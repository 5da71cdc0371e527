"""POST /v1/chat/completions: the messages (and tools) rendered with the model's chat template, then n
submissions to the scheduler; streamed as Server-Sent Events when asked. The conversion (tool_choice,
the forcing grammar, reading tool calls back, streamed tool-call deltas) is `oxillama.compat.
openai_shapes`, the same code `oxillama.Llama.create_chat_completion` runs."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from oxillama.compat import openai_shapes as shapes
from oxillama.server import convert
from oxillama.server.auth import require_api_key
from oxillama.server.protocol.chat import (AssistantMessage, ChatCompletionChoice, ChatCompletionChunk,
                                           ChatCompletionRequest, ChatCompletionResponse,
                                           ChatCompletionStreamChoice, DeltaMessage, ToolCall)
from oxillama.server.routes import ready_state
from oxillama.server.routes._chat_run import ChatStreamDeltas, finished_output, prepare
from oxillama.server.routes._generation import (error_event, merged_stream, results_or_cancel, submit_all,
                                                usage_info)
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def assistant_message(content: str | None, calls, reasoning: str | None = None) -> AssistantMessage:
    return AssistantMessage(content=content, reasoning_content=reasoning,
                            tool_calls=[ToolCall.model_validate(c.to_openai()) for c in calls] or None)


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request, state: ServerState = Depends(ready_state)):
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

    def chunk(choices, usage=None) -> ServerSentEvent:
        body = ChatCompletionChunk(id=request_id, created=created, model=state.model_name, choices=choices,
                                   usage=usage)
        return ServerSentEvent(data=body.model_dump_json())

    def delta_chunk(i: int, delta: dict, logprobs=None) -> ServerSentEvent:
        return chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage.model_validate(delta), logprobs=logprobs)])

    def chunk_logprobs(tokens, entries):
        return convert.chat_logprobs(tokenizer, tokens, entries, n_top)

    async def events():
        try:
            for i in range(len(handles)):   # every choice opens with the role
                yield chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
            streamers = [ChatStreamDeltas(plan, reasoning) for _ in handles]
            # each delta carries the logprobs of the tokens behind it; tokens whose text is held back (a
            # tool call being parsed, a possible stop string) go with the next delta or the last chunk
            lps = [shapes.StreamedLogprobs(h, chunk_logprobs) if n_top is not None else None for h in handles]
            completions = [None] * len(handles)
            async for i, piece, mark, final in merged_stream(handles):
                deltas = streamers[i].feed(piece) if final is None else streamers[i].finish()
                for delta in deltas:
                    yield delta_chunk(i, delta, lps[i] and lps[i].take(mark))
                if final is None:
                    continue
                completions[i] = final
                finish = shapes.chat_finish_reason(final.finish_reason, range(streamers[i].n_calls))
                yield chunk([ChatCompletionStreamChoice(index=i, delta=DeltaMessage(),
                                                        logprobs=lps[i] and lps[i].take(mark), finish_reason=finish)])
            if include_usage:
                yield chunk([], usage=usage_info(handles, req.n, completions, tokenizer.eog_ids))
            yield ServerSentEvent(data="[DONE]")
        except Exception as e:     # after the headers: the error becomes the stream's last event
            yield error_event(e)
        finally:                   # the client went away (or the drain ran out): free the slots
            for h in handles:
                if not h.done:
                    h.cancel()

    return EventSourceResponse(events(), sep="\n", shutdown_grace_period=state.config.drain_timeout)
