"""GET /health, GET /metrics (no key needed) and GET /v1/models."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from oxillama.server.auth import require_api_key
from oxillama.server.protocol.common import ModelCard, ModelList
from oxillama.server.routes import ready_state
from oxillama.server.state import ServerState

public = APIRouter()
router = APIRouter(dependencies=[Depends(require_api_key)])


@public.get("/health")
async def health(request: Request):
    state: ServerState = request.app.state.server
    if state.load_error is not None:
        return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
    if not state.ready:
        return JSONResponse({"status": "loading"}, status_code=503)
    return {"status": "ok"}


@public.get("/metrics")
async def metrics(request: Request):
    m = request.app.state.server.metrics
    return Response(m.render(), media_type=m.content_type)


@router.get("/v1/models", response_model=ModelList)
async def list_models(state: ServerState = Depends(ready_state)):
    return ModelList(data=[ModelCard(id=state.model_name, max_model_len=state.engine.n_ctx)])
