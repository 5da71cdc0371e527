"""POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the same chat
road as /v1/chat/completions (routes._chat_run), streamed with the Responses event sequence
(response.created, response.in_progress, output_item.added, content_part.added, output_text.delta ...,
output_item.done, response.completed or response.incomplete; every event numbered)."""
from __future__ import annotations

import json
import secrets
import time

from fastapi import APIRouter, Depends, Request

from oxillama.errors import OxillamaError
from oxillama.server import sse
from oxillama.server.auth import require_api_key
from oxillama.server.errors import APIError, classify
from oxillama.server.protocol import responses as shapes
from oxillama.server.protocol.responses import ResponsesRequest
from oxillama.server.routes import ready_state
from oxillama.server.routes._chat_run import OutputEvents, finished_output, prepare
from oxillama.server.routes._generation import results_or_cancel, submit_all, usage_info
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


@router.post("/v1/responses")
async def create_response(req: ResponsesRequest, request: Request, state: ServerState = Depends(ready_state)):
    state = await state.serving(req.model)
    state.metrics.api_requests.labels(state.model_name, "responses").inc()
    history: list[dict] = []
    if req.previous_response_id is not None:
        previous = state.responses.get(req.previous_response_id)
        if previous is None:
            raise APIError(404, f"Previous response with id {req.previous_response_id!r} not found (stored "
                                "responses live in the server's memory, up to its store's bounds)",
                           "invalid_request_error", "previous_response_id")
        history = previous.conversation
    chat = req.to_chat(history)
    plan, kwargs, reasoning = prepare(state, chat)
    (handle,) = submit_all(state.scheduler, [plan.prompt], 1, req.seed, kwargs)
    response_id = new_id("resp")
    created_at = int(time.time())
    conversation = history + req.input_messages()
    eog = state.engine.tokenizer.eog_ids

    def finish(c, output: list[dict]) -> dict:
        u = usage_info([handle], 1, [c], eog)
        status = "incomplete" if c.finish_reason == "length" else "completed"
        cached = (u.prompt_tokens_details or {}).get("cached_tokens", 0)
        thinking = sum(len(state.engine.tokenizer.encode(p["text"], add_special=False))
                       for item in output if item["type"] == "reasoning" for p in item["content"])
        body = shapes.response_object(response_id, req, state.model_name, status=status, output=output,
                                      created_at=created_at, usage_=shapes.usage(u.prompt_tokens, u.completion_tokens, cached,
                                                          min(thinking, u.completion_tokens)))
        if req.store:
            state.responses.put(body, conversation + shapes.output_to_messages(output))
        return body

    if not req.stream:
        done = await results_or_cancel(request, [handle])
        if done is None:
            return None
        (c,) = done
        thinking, content, calls = finished_output(plan, str(c), reasoning)
        output = []
        if thinking:
            output.append(shapes.reasoning_item(new_id("rs"), thinking))
        if content or not calls:
            status = "incomplete" if c.finish_reason == "length" else "completed"
            output.append(shapes.message_item(new_id("msg"), content or "", status))
        output += [shapes.function_call_item(new_id("fc"), call) for call in calls]
        return finish(c, output)

    writer = ResponseEvents(shapes.response_object(response_id, req, state.model_name, status="in_progress",
                                                   output=[], created_at=created_at))

    async def events():
        try:
            yield writer.event("response.created", response=writer.snapshot("in_progress"))
            yield writer.event("response.in_progress", response=writer.snapshot("in_progress"))
            source = OutputEvents(plan, reasoning)
            async for piece, _mark in handle.astream_marked():
                for e in writer.on_events(source.feed(piece)):
                    yield e
            c = await handle.aresult()
            for e in writer.on_events(source.finish()):
                yield e
            for e in writer.close(empty_message=True, cut=c.finish_reason == "length"):
                yield e
            body = finish(c, writer.output)
            kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
            yield writer.event(kind, response=body)
        except Exception as e:      # after the headers: the error ends the stream
            status, kind = classify(e)
            message = str(e) if isinstance(e, OxillamaError) else f"internal error ({type(e).__name__})"
            yield writer.event("error", code=kind, message=message, param=None)
            yield writer.event("response.failed", response=writer.snapshot(
                "failed", error={"code": "server_error" if status >= 500 else "invalid_prompt", "message": message}))
        finally:
            if not handle.done:
                handle.cancel()

    return sse.EventStream(events(), state.config.drain_timeout)


class ResponseEvents:
    """Writes the Responses stream: output items opened and closed around the ("reasoning" | "text",
    delta) and ("call", ToolCall) events of OutputEvents; `output` holds the finished items."""

    def __init__(self, base: dict):
        self.base = base
        self.seq = 0
        self.output: list[dict] = []
        self._open: dict | None = None       # the message or reasoning item being written

    def snapshot(self, status: str, **fields) -> dict:
        return {**self.base, "status": status, "output": list(self.output), **fields}

    def event(self, kind: str, **fields) -> bytes:
        body = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return sse.frame(json.dumps(body, ensure_ascii=False), event=kind)

    def on_events(self, events) -> list[bytes]:
        out = []
        for kind, value in events:
            if kind == "call":
                out += self.close()
                out += self._call(value)
                continue
            item_type = "reasoning" if kind == "reasoning" else "message"
            if self._open is not None and self._open["item"]["type"] != item_type:
                out += self.close()
            if self._open is None:
                out += self._start(item_type)
            self._open["text"] += value
            delta = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            extra = {} if kind == "reasoning" else {"logprobs": []}
            out.append(self.event(delta, item_id=self._open["item"]["id"], output_index=self._open["index"],
                                  content_index=0, delta=value, **extra))
        return out

    def _start(self, item_type: str) -> list[bytes]:
        if item_type == "reasoning":
            item = {"type": "reasoning", "id": new_id("rs"), "summary": [], "content": []}
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {"type": "message", "id": new_id("msg"), "status": "in_progress", "role": "assistant",
                    "content": []}
            part = shapes.output_text("")
        self._open = {"item": item, "index": len(self.output), "text": ""}
        self.output.append(item)
        return [self.event("response.output_item.added", output_index=self._open["index"], item=item),
                self.event("response.content_part.added", item_id=item["id"], output_index=self._open["index"],
                           content_index=0, part=part)]

    def close(self, empty_message: bool = False, cut: bool = False) -> list[bytes]:
        """Finish the open item (cut: by max_output_tokens, so a message is "incomplete"); with
        empty_message, a response with no output gets an empty message."""
        out = []
        if self._open is None and empty_message and not self.output:
            out += self._start("message")
        if self._open is None:
            return out
        item, index, text = self._open["item"], self._open["index"], self._open["text"]
        self._open = None
        if item["type"] == "reasoning":
            done = shapes.reasoning_item(item["id"], text)
            out.append(self.event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                  content_index=0, text=text))
        else:
            done = shapes.message_item(item["id"], text, "incomplete" if cut else "completed")
            out.append(self.event("response.output_text.done", item_id=item["id"], output_index=index,
                                  content_index=0, text=text, logprobs=[]))
        out.append(self.event("response.content_part.done", item_id=item["id"], output_index=index,
                              content_index=0, part=done["content"][0]))
        self.output[index] = done
        out.append(self.event("response.output_item.done", output_index=index, item=done))
        return out

    def _call(self, call) -> list[bytes]:
        item_id, index = new_id("fc"), len(self.output)
        added = shapes.function_call_item(item_id, call, status="in_progress")
        done = shapes.function_call_item(item_id, call)
        self.output.append(done)
        return [self.event("response.output_item.added", output_index=index, item=added),
                self.event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                           delta=done["arguments"]),
                self.event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                           name=call.name, arguments=done["arguments"]),
                self.event("response.output_item.done", output_index=index, item=done)]


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, state: ServerState = Depends(ready_state)):
    stored = state.responses.get(response_id)
    if stored is None:
        raise APIError(404, f"No response with id {response_id!r} is stored", "invalid_request_error", "response_id")
    return stored.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, state: ServerState = Depends(ready_state)):
    if not state.responses.delete(response_id):
        raise APIError(404, f"No response with id {response_id!r} is stored", "invalid_request_error", "response_id")
    return {"id": response_id, "object": "response", "deleted": True}
