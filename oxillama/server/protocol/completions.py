"""POST /v1/completions (OpenAI's legacy text completions)."""
from __future__ import annotations

import time
from typing import Literal, Union

from pydantic import Field

from oxillama.server.protocol.common import OpenAIBaseModel, SamplingFields, StrictBool, StrictInt, UsageInfo


class CompletionRequest(SamplingFields):
    # a text, or token ids; one prompt per request (a list of several texts is refused by the handler)
    prompt: Union[str, list[StrictInt], list[str]]
    logprobs: StrictInt | None = Field(None, ge=0, le=20)
    echo: StrictBool = False
    suffix: str | None = None


class CompletionLogprobs(OpenAIBaseModel):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(OpenAIBaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "cancelled"] | None = None


class CompletionResponse(OpenAIBaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
