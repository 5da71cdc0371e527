"""POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API): the request body, its
translation into the chat request every family shares, and the message object's pieces.

Blocks: text, tool_use (an assistant's call) and tool_result (the user's answer to one) in the
messages; thinking and redacted_thinking blocks are accepted and left out of the prompt (as chat
templates drop earlier thinking). `system` is a leading system message. Errors are Anthropic's
{"type": "error", "error": {"type", "message"}} (oxillama.server.errors picks the shape by path)."""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from oxillama.server.protocol.chat import ChatCompletionRequest
from oxillama.server.protocol.common import OpenAIBaseModel, StrictBool, StrictFloat, StrictInt
from oxillama.server.protocol.extras import SamplerExtras


class TextBlock(OpenAIBaseModel):
    type: Literal["text"]
    text: str


class ToolUseBlock(OpenAIBaseModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(OpenAIBaseModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Union[str, list[TextBlock], None] = None
    is_error: StrictBool | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        text = self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)
        return f"Error: {text}" if self.is_error else text


class ThinkingBlock(OpenAIBaseModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(OpenAIBaseModel):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock],
                         Field(discriminator="type")]


class Message(OpenAIBaseModel):
    role: Literal["user", "assistant"]
    content: Union[str, list[ContentBlock]]


class Tool(OpenAIBaseModel):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoice(OpenAIBaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: StrictBool | None = None


class OutputFormat(OpenAIBaseModel):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(OpenAIBaseModel):
    format: OutputFormat | None = None
    effort: str | None = None            # accepted; a local model has one effort


class CountTokensRequest(SamplerExtras):
    model: str
    messages: list[Message] = Field(min_length=1)
    system: Union[str, list[TextBlock], None] = None
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None

    def chat_messages(self) -> list[dict]:
        out = []
        if self.system:
            text = self.system if isinstance(self.system, str) else "".join(b.text for b in self.system)
            out.append({"role": "system", "content": text})
        for m in self.messages:
            out += message_to_chat(m)
        return out

    def to_chat(self, **fields) -> ChatCompletionRequest:
        body: dict[str, Any] = {"messages": self.chat_messages(), "model": self.model, **self.extras(), **fields}
        if self.tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, "parameters": t.input_schema,
                **({"description": t.description} if t.description is not None else {})}} for t in self.tools]
        choice = self.tool_choice
        if choice is not None:
            if choice.type == "tool":
                if not choice.name:
                    from oxillama.errors import InvalidArgumentError
                    raise InvalidArgumentError("tool_choice of type 'tool' needs the tool's name")
                body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
            else:
                body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
            if choice.disable_parallel_tool_use is not None:
                body["parallel_tool_calls"] = not choice.disable_parallel_tool_use
        return ChatCompletionRequest.model_validate(body)


class MessagesRequest(CountTokensRequest):
    max_tokens: StrictInt = Field(ge=1)
    stop_sequences: list[str] | None = Field(None, max_length=16)
    stream: StrictBool = False
    temperature: StrictFloat | None = Field(None, ge=0.0, le=1.0)
    top_p: StrictFloat | None = Field(None, gt=0.0, le=1.0)
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None      # {"type": "enabled", "budget_tokens": N}: the model decides
    output_config: OutputConfig | None = None    # format: structured output (a JSON schema for the answer)

    def to_chat(self, **fields) -> ChatCompletionRequest:
        own: dict[str, Any] = {"max_tokens": self.max_tokens, "stream": self.stream}
        for name in ("temperature", "top_p"):
            if getattr(self, name) is not None:
                own[name] = getattr(self, name)
        if self.stop_sequences:
            own["stop"] = list(self.stop_sequences)
        if self.output_config is not None and self.output_config.format is not None:
            own["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": self.output_config.format.schema_}}
        return super().to_chat(**own, **fields)


def message_to_chat(m: Message) -> list[dict]:
    """One Anthropic message as chat messages: a user's tool results become "tool" messages (before
    its text), an assistant's tool_use blocks its tool_calls; thinking blocks are dropped."""
    if isinstance(m.content, str):
        return [{"role": m.role, "content": m.content}]
    text = "".join(b.text for b in m.content if isinstance(b, TextBlock))
    out: list[dict] = []
    if m.role == "user":
        out += [{"role": "tool", "tool_call_id": b.tool_use_id, "content": b.text()}
                for b in m.content if isinstance(b, ToolResultBlock)]
        if text or not out:
            out.append({"role": "user", "content": text})
        return out
    calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
             for b in m.content if isinstance(b, ToolUseBlock)]
    msg: dict = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = calls
    return [msg]


# ---- the message object (plain dicts) ----

def stop_reason(finish_reason: str | None, stop_string: str | None, has_calls: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) from the engine's finish reason."""
    if has_calls:
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stop_string:
        return "stop_sequence", stop_string
    return "end_turn", None


def tool_use_block(call) -> dict:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}


def usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict:
    """Anthropic counts cache reads apart from input_tokens."""
    return {"input_tokens": input_tokens - cached, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def message_object(message_id: str, model: str, content: list[dict], stop: str | None, stop_sequence: str | None,
                   usage_: dict) -> dict:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": stop_sequence, "usage": usage_}
