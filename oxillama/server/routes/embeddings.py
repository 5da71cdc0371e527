"""POST /v1/embeddings: engine.embed_batch, run off the event loop (one request at a time)."""
from __future__ import annotations

import asyncio
import base64

import numpy as np
from fastapi import APIRouter, Depends

from oxillama.server.auth import require_api_key
from oxillama.server.errors import APIError
from oxillama.server.protocol.common import UsageInfo
from oxillama.server.protocol.embeddings import EmbeddingData, EmbeddingRequest, EmbeddingResponse
from oxillama.server.routes import ready_state
from oxillama.server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])

MAX_INPUTS = 2048        # OpenAI's limit on inputs per request


def _inputs(req: EmbeddingRequest) -> list:
    """The request's inputs as a list of texts or token-id lists."""
    x = req.input
    if isinstance(x, str):
        return [x]
    if not x:
        raise APIError(400, "input must not be empty", param="input")
    if isinstance(x[0], int):
        return [x]          # one list of token ids
    if len(x) > MAX_INPUTS:
        raise APIError(400, f"at most {MAX_INPUTS} inputs per request, got {len(x)}", param="input")
    return list(x)


@router.post("/v1/embeddings", response_model=EmbeddingResponse)
async def embeddings(req: EmbeddingRequest, state: ServerState = Depends(ready_state)):
    state = await state.serving(req.model)
    engine = state.engine
    inputs = _inputs(req)
    n_embd = engine.plan.n_embd
    if req.dimensions is not None and req.dimensions != n_embd:
        raise APIError(400, f"this model's embeddings have {n_embd} dimensions; dimensions={req.dimensions} "
                            "is not supported", param="dimensions")
    # token counts as embed() tokenizes (BOS included where the model adds one); also validates ids
    n_tokens = sum(len(engine.tokenize(x, add_special=True)) if isinstance(x, str) else
                   len(engine.check_tokens(x)) for x in inputs)

    def run() -> np.ndarray:
        with state.embed_lock:
            return engine.embed_batch(inputs, pooling=req.pooling, normalize=req.normalize)

    vectors = await asyncio.to_thread(run)
    data = []
    for i, v in enumerate(vectors):
        if req.encoding_format == "base64":   # little-endian float32 bytes, as OpenAI sends them
            emb = base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")
        else:
            emb = v.astype(np.float64).tolist()
        data.append(EmbeddingData(index=i, embedding=emb))
    return EmbeddingResponse(data=data, model=state.model_name,
                             usage=UsageInfo(prompt_tokens=n_tokens, total_tokens=n_tokens))
