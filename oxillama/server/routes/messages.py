"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the same chat road as
/v1/chat/completions (routes._chat_run), streamed with Anthropic's events (message_start, ping,
content_block_start / _delta / _stop per block, message_delta with the stop reason and usage,
message_stop). The key may come as `x-api-key` (Anthropic's clients) or as a Bearer token."""
from __future__ import annotations

import json
import secrets

from fastapi import APIRouter, Depends, Request

from oxillama.errors import OxillamaError
from oxillama.server import sse
from oxillama.server.auth import require_api_key
from oxillama.server.errors import anthropic_error_body, classify
from oxillama.server.protocol import messages as shapes
from oxillama.server.protocol.messages import CountTokensRequest, MessagesRequest
from oxillama.server.routes import ready_state
from oxillama.server.routes._chat_run import OutputEvents, finished_output, prepare
from oxillama.server.routes._generation import results_or_cancel, submit_all, usage_info
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@router.post("/v1/messages")
async def create_message(req: MessagesRequest, request: Request, state: ServerState = Depends(ready_state)):
    state = await state.serving(req.model)
    state.metrics.api_requests.labels(state.model_name, "messages").inc()
    plan, kwargs, reasoning = prepare(state, req.to_chat())
    (handle,) = submit_all(state.scheduler, [plan.prompt], 1, req.seed, kwargs)
    message_id = new_id("msg")
    eog = state.engine.tokenizer.eog_ids

    def usage_of(c) -> dict:
        u = usage_info([handle], 1, [c], eog)
        return shapes.usage(u.prompt_tokens, u.completion_tokens, (u.prompt_tokens_details or {}).get("cached_tokens", 0))

    if not req.stream:
        done = await results_or_cancel(request, [handle])
        if done is None:
            return None
        (c,) = done
        thinking, content, calls = finished_output(plan, str(c), reasoning)
        blocks = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": thinking, "signature": ""})
        if content:
            blocks.append({"type": "text", "text": content})
        blocks += [shapes.tool_use_block(call) for call in calls]
        stop, sequence = shapes.stop_reason(c.finish_reason, handle.stats.get("stop_string"), bool(calls))
        return shapes.message_object(message_id, state.model_name, blocks, stop, sequence, usage_of(c))

    def event(kind: str, **fields) -> bytes:
        return sse.frame(json.dumps({"type": kind, **fields}, ensure_ascii=False), event=kind)

    async def events():
        n_prompt = int(handle.stats.get("n_prompt_tokens") or 0)
        start = shapes.message_object(message_id, state.model_name, [], None, None, shapes.usage(n_prompt, 0))
        yield event("message_start", message=start)
        yield event("ping")
        index, open_kind, n_calls = -1, None, 0
        try:
            source = OutputEvents(plan, reasoning)

            def blocks(items):
                nonlocal index, open_kind, n_calls
                for kind, value in items:
                    if open_kind is not None and (kind == "call" or kind != open_kind):
                        yield event("content_block_stop", index=index)
                        open_kind = None
                    if kind == "call":
                        n_calls += 1
                        index += 1
                        yield event("content_block_start", index=index, content_block={
                            "type": "tool_use", "id": value.id, "name": value.name, "input": {}})
                        yield event("content_block_delta", index=index, delta={
                            "type": "input_json_delta", "partial_json": value.arguments_json()})
                        yield event("content_block_stop", index=index)
                        continue
                    if open_kind is None:
                        index += 1
                        open_kind = kind
                        block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "reasoning" \
                            else {"type": "text", "text": ""}
                        yield event("content_block_start", index=index, content_block=block)
                    delta = {"type": "thinking_delta", "thinking": value} if kind == "reasoning" \
                        else {"type": "text_delta", "text": value}
                    yield event("content_block_delta", index=index, delta=delta)

            async for piece, _mark in handle.astream_marked():
                for e in blocks(source.feed(piece)):
                    yield e
            c = await handle.aresult()
            for e in blocks(source.finish()):
                yield e
            if open_kind is not None:
                yield event("content_block_stop", index=index)
            stop, sequence = shapes.stop_reason(c.finish_reason, handle.stats.get("stop_string"), n_calls > 0)
            u = usage_of(c)
            yield event("message_delta", delta={"stop_reason": stop, "stop_sequence": sequence}, usage=u)
            yield event("message_stop")
        except Exception as e:      # after the headers: the error ends the stream
            status, kind = classify(e)
            message = str(e) if isinstance(e, OxillamaError) else f"internal error ({type(e).__name__})"
            yield sse.frame(json.dumps(anthropic_error_body(status, message, kind)), event="error")
        finally:
            if not handle.done:
                handle.cancel()

    return sse.EventStream(events(), state.config.drain_timeout)


@router.post("/v1/messages/count_tokens")
async def count_tokens(req: CountTokensRequest, state: ServerState = Depends(ready_state)):
    """The prompt's tokens as /v1/messages would run it (template, tools and all)."""
    state = await state.serving(req.model)
    plan, _, _ = prepare(state, req.to_chat())
    return {"input_tokens": len(state.engine.encode_prompt(plan.prompt))}

