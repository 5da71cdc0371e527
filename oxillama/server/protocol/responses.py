"""POST /v1/responses (OpenAI's Responses API): the request body, its translation into the chat
request every family shares, and the response object's pieces (output items, usage).

The input is a text or a list of items: messages (role + text or input_text/output_text parts),
earlier function calls and their outputs, and reasoning items (accepted and left out of the prompt,
as a chat template drops earlier thinking). `instructions` is a leading system message; a
`previous_response_id` puts that response's conversation (its input and output) before the input.
"""
from __future__ import annotations

import json
import time
from typing import Any, Literal, Union

from pydantic import Field

from oxillama.server.protocol.chat import ChatCompletionRequest
from oxillama.server.protocol.common import OpenAIBaseModel, StrictBool, StrictFloat, StrictInt
from oxillama.server.protocol.extras import SamplerExtras


class TextPart(OpenAIBaseModel):
    type: Literal["input_text", "output_text", "text"]
    text: str


class MessageItem(OpenAIBaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, list[TextPart]]
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(OpenAIBaseModel):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(OpenAIBaseModel):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Union[str, list[TextPart]]
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class ReasoningItem(OpenAIBaseModel):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None


InputItem = Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem]


class FunctionTool(OpenAIBaseModel):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class FunctionToolChoice(OpenAIBaseModel):
    type: Literal["function"]
    name: str


class TextFormat(OpenAIBaseModel):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: StrictBool | None = None


class TextConfig(OpenAIBaseModel):
    format: TextFormat | None = None


class ResponsesRequest(SamplerExtras):
    model: str | None = None
    input: Union[str, list[InputItem]]
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    tool_choice: Union[Literal["none", "auto", "required"], FunctionToolChoice, None] = None
    parallel_tool_calls: StrictBool | None = None
    text: TextConfig | None = None
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    temperature: StrictFloat | None = Field(None, ge=0.0, le=2.0)
    top_p: StrictFloat | None = Field(None, gt=0.0, le=1.0)
    store: StrictBool = True
    previous_response_id: str | None = None
    stream: StrictBool = False
    metadata: dict[str, str] | None = None
    stop: Union[str, list[str], None] = None         # an extra (the Responses API has none)

    def input_messages(self) -> list[dict]:
        """The input as chat messages (OpenAI chat shape), without instructions."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        return items_to_messages(self.input)

    def to_chat(self, history: list[dict]) -> ChatCompletionRequest:
        """The chat request this asks for, after `history` (the previous response's conversation)."""
        messages = ([{"role": "system", "content": self.instructions}] if self.instructions else []) \
            + history + self.input_messages()
        body: dict[str, Any] = {"messages": messages, "model": self.model, "stream": self.stream,
                                **self.extras()}
        for name in ("temperature", "top_p", "stop", "parallel_tool_calls"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        if self.tools:
            body["tools"] = [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                             for t in self.tools]
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice if isinstance(self.tool_choice, str) else \
                {"type": "function", "function": {"name": self.tool_choice.name}}
        fmt = self.text.format if self.text is not None else None
        if fmt is not None and fmt.type == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": fmt.name or "response", "schema": fmt.schema_ if fmt.schema_ is not None else {}}}
            if fmt.schema_ is None:
                body["response_format"] = {"type": "json_schema"}     # the grammar layer names what is missing
        elif fmt is not None and fmt.type == "json_object":
            body["response_format"] = {"type": "json_object"}
        return ChatCompletionRequest.model_validate(body)


def items_to_messages(items: list) -> list[dict]:
    """Responses input items -> chat messages: consecutive function calls become one assistant
    message's tool_calls, each output a "tool" message; reasoning items are left out."""
    out: list[dict] = []
    for item in items:
        if isinstance(item, MessageItem):
            out.append({"role": item.role, "content": item.text()})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    return out


def output_to_messages(output: list[dict]) -> list[dict]:
    """A response's output items as the chat messages that continue its conversation."""
    items = []
    for item in output:
        if item["type"] == "message":
            items.append(MessageItem(role="assistant", content="".join(p["text"] for p in item["content"])))
        elif item["type"] == "function_call":
            items.append(FunctionCallItem.model_validate(item))
    return items_to_messages(items)


# ---- the response object (plain dicts: built by the routes, stored, and validated by the client) ----

def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [output_text(text)]}


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(item_id: str, call, status: str = "completed") -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
            "arguments": call.arguments_json() if status == "completed" else "", "status": status}


def reasoning_item(item_id: str, text: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def usage(input_tokens: int, output_tokens: int, cached: int = 0, reasoning: int = 0) -> dict:
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": input_tokens + output_tokens}


def response_object(response_id: str, req: ResponsesRequest, model: str, *, status: str, output: list[dict],
                    usage_: dict | None = None, created_at: int | None = None, error: dict | None = None) -> dict:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    tool_choice = req.tool_choice if isinstance(req.tool_choice, str) else \
        (req.tool_choice.model_dump() if req.tool_choice is not None else ("auto" if req.tools else "none"))
    fmt = req.text.format.model_dump(by_alias=True, exclude_none=True) if req.text and req.text.format else \
        {"type": "text"}
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()), "status": status,
        "error": error, "incomplete_details": incomplete, "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens, "model": model, "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id, "reasoning": {"effort": None, "summary": None},
        "store": req.store, "temperature": req.temperature, "top_p": req.top_p, "text": {"format": fmt},
        "tool_choice": tool_choice,
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or ()], "truncation": "disabled",
        "usage": usage_, "metadata": req.metadata or {}, "user": None,
    }


def output_text_of(output: list[dict]) -> str:
    return "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])


def json_size(obj) -> int:
    return len(json.dumps(obj, ensure_ascii=False))
