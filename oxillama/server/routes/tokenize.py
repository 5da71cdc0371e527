"""POST /tokenize and POST /detokenize."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from oxillama.server.auth import require_api_key
from oxillama.server.protocol.tokenize import (DetokenizeRequest, DetokenizeResponse, TokenizeRequest,
                                               TokenizeResponse)
from oxillama.server.routes import ready_state
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/tokenize", response_model=TokenizeResponse)
async def tokenize(req: TokenizeRequest, state: ServerState = Depends(ready_state)):
    state = await state.serving(None)
    tokens = state.engine.tokenize(req.content, add_special=req.add_special, parse_special=req.parse_special)
    return TokenizeResponse(tokens=tokens)


@router.post("/detokenize", response_model=DetokenizeResponse)
async def detokenize(req: DetokenizeRequest, state: ServerState = Depends(ready_state)):
    state = await state.serving(None)
    ids = state.engine.check_tokens(req.tokens).tolist()      # ids outside the vocabulary: 400
    return DetokenizeResponse(content=state.engine.detokenize(ids))
