"""Shapes shared by every API family: strict scalars, errors, usage, models, and the sampling fields
that /v1/completions and /v1/chat/completions both take."""
from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, Strict

# JSON numbers only: pydantic's lax mode would take "0.7" for 0.7 and true for 1
StrictFloat = Annotated[float, Strict()]
StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]


class OpenAIBaseModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ErrorInfo(OpenAIBaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None           # OpenAI's: a string such as "invalid_api_key", or null


class ErrorResponse(OpenAIBaseModel):
    error: ErrorInfo


class UsageInfo(OpenAIBaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: dict[str, int] | None = None


class ModelCard(OpenAIBaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "oxillama"
    root: str | None = None           # a LoRA adapter's file (vLLM's fields)
    parent: str | None = None         # a LoRA adapter's base model
    max_model_len: int | None = None
    status: str | None = None         # several models (oxillama serve -m A -m B): loaded, unloaded, loading, failed
    aliases: list[str] | None = None
    default: bool | None = None       # the model requests naming none get


class LoraChoice(OpenAIBaseModel):
    """One adapter for a request: by the name it is served under (--lora NAME=PATH) or by its
    position in the --lora list (llama.cpp's "id")."""
    name: str | None = None
    id: StrictInt | None = Field(None, ge=0)
    scale: StrictFloat = Field(1.0, ge=-100.0, le=100.0)


class ModelList(OpenAIBaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class StreamOptions(OpenAIBaseModel):
    include_usage: StrictBool = False


class JsonSchemaSpec(OpenAIBaseModel):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(OpenAIBaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")   # llama.cpp's json_object + schema

    def to_dict(self) -> dict:
        """The dict engine.generate(response_format=...) takes."""
        if self.type == "json_schema":
            if self.json_schema is None:
                return {"type": "json_schema"}      # the grammar layer names what is missing
            return {"type": "json_schema", "json_schema": {"name": self.json_schema.name,
                                                           "schema": self.json_schema.schema_}}
        if self.type == "json_object" and self.schema_ is not None:
            return {"type": "json_object", "schema": self.schema_}
        return {"type": self.type}


StopField = Union[str, list[str], None]


class SamplingFields(OpenAIBaseModel):
    """The generation options /v1/completions and /v1/chat/completions share (OpenAI's, then the
    llama.cpp / vLLM extras)."""
    model: str | None = None
    n: StrictInt = Field(1, ge=1, le=16)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    seed: StrictInt | None = None
    stop: StopField = None
    max_tokens: StrictInt | None = Field(None, ge=1)
    temperature: StrictFloat | None = Field(None, ge=0.0, le=2.0)
    top_p: StrictFloat | None = Field(None, gt=0.0, le=1.0)
    presence_penalty: StrictFloat | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: StrictFloat | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, StrictFloat] | None = None
    response_format: ResponseFormat | None = None
    # extras
    top_k: StrictInt | None = Field(None, ge=0)
    min_p: StrictFloat | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: StrictFloat | None = Field(None, gt=0.0)
    grammar: str | None = None
    ignore_eos: StrictBool = False
    lora: list[LoraChoice] | None = Field(None, max_length=16)
