"""POST /tokenize and /detokenize (llama.cpp server's shapes)."""
from __future__ import annotations

from oxillama.server.protocol.common import OpenAIBaseModel, StrictBool, StrictInt


class TokenizeRequest(OpenAIBaseModel):
    content: str
    add_special: StrictBool = False      # BOS/EOS as the vocabulary asks; off so that detokenize round-trips
    parse_special: StrictBool = True     # "<|im_start|>" written in the text is the control token


class TokenizeResponse(OpenAIBaseModel):
    tokens: list[int]


class DetokenizeRequest(OpenAIBaseModel):
    tokens: list[StrictInt]


class DetokenizeResponse(OpenAIBaseModel):
    content: str
