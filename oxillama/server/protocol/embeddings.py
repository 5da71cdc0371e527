"""POST /v1/embeddings."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from oxillama.server.protocol.common import OpenAIBaseModel, StrictInt, UsageInfo


class EmbeddingRequest(OpenAIBaseModel):
    model: str | None = None
    # a text, texts, token ids, or lists of token ids (OpenAI's four shapes)
    input: Union[str, list[str], list[StrictInt], list[list[StrictInt]]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(None, ge=1)
    # extra: how hidden states are pooled; None: the model's own (an encoder's declared pooling_type, else last)
    pooling: Literal["last", "mean", "max", "cls"] | None = None
    normalize: bool = True                                      # extra: L2-normalised vectors


class EmbeddingData(OpenAIBaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingResponse(OpenAIBaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: UsageInfo
