"""The sampler extras every API family's body accepts beside its own fields (the llama.cpp / vLLM
options /v1/chat/completions takes), so that a client can send the same `seed`, `top_k`, `min_p`,
`grammar`, ... to /v1/responses and /v1/messages."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from oxillama.server.protocol.common import LoraChoice, OpenAIBaseModel, StrictBool, StrictFloat, StrictInt

ReasoningFormat = Literal["none", "auto", "deepseek"]


class SamplerExtras(OpenAIBaseModel):
    seed: StrictInt | None = None
    top_k: StrictInt | None = Field(None, ge=0)
    min_p: StrictFloat | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: StrictFloat | None = Field(None, gt=0.0)
    presence_penalty: StrictFloat | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: StrictFloat | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, StrictFloat] | None = None
    grammar: str | None = None
    ignore_eos: StrictBool = False
    lora: list[LoraChoice] | None = Field(None, max_length=16)
    reasoning_format: ReasoningFormat | None = None     # llama.cpp's: split thinking from the answer

    def extras(self) -> dict:
        """The extras the client set, as ChatCompletionRequest fields."""
        return self.model_dump(include=set(SamplerExtras.model_fields), exclude_none=True, exclude_defaults=True)
