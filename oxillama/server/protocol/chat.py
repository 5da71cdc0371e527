"""POST /v1/chat/completions."""
from __future__ import annotations

import time
from typing import Any, Literal, Union

from pydantic import Field

from oxillama.server.protocol.common import OpenAIBaseModel, SamplingFields, StrictBool, StrictInt, UsageInfo


class TextContentPart(OpenAIBaseModel):
    type: Literal["text"]
    text: str


class FunctionCall(OpenAIBaseModel):
    name: str
    arguments: str                    # a JSON object, as text (OpenAI's shape)


class ToolCall(OpenAIBaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(OpenAIBaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextContentPart], None] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None          # an assistant's earlier calls
    tool_call_id: str | None = None                   # role "tool": the call this result answers

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def to_dict(self) -> dict:
        """The plain message oxillama.tools / the chat template take."""
        return self.model_dump(exclude_none=True) | {"content": self.text()}


class FunctionDefinition(OpenAIBaseModel):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ToolDefinition(OpenAIBaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(OpenAIBaseModel):
    name: str


class NamedToolChoice(OpenAIBaseModel):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(SamplingFields):
    reasoning_format: Literal["none", "auto", "deepseek"] | None = None     # llama.cpp's: thinking apart
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    tools: list[ToolDefinition] | None = Field(None, max_length=128)
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: StrictBool | None = None


FinishReason = Literal["stop", "length", "cancelled", "tool_calls"]


class TopLogprob(OpenAIBaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(OpenAIBaseModel):
    content: list[TokenLogprob] | None = None


class AssistantMessage(OpenAIBaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None              # a reasoning model's thinking (llama.cpp's field)
    tool_calls: list[ToolCall] | None = None


class ChatCompletionChoice(OpenAIBaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionResponse(OpenAIBaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None


class DeltaFunctionCall(OpenAIBaseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(OpenAIBaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(OpenAIBaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatCompletionStreamChoice(OpenAIBaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(OpenAIBaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
