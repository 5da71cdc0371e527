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
    """The model, then one card per LoRA adapter ("<model>:<name>"; a request's `model` may name one)."""
    paths = dict(state.config.loras)
    cards = [ModelCard(id=state.model_name, max_model_len=state.engine.n_ctx)]
    cards += [ModelCard(id=f"{state.model_name}:{name}", root=paths[name], parent=state.model_name,
                        max_model_len=state.engine.n_ctx) for name in state.loras]
    return ModelList(data=cards)


@router.get("/lora-adapters")
async def lora_adapters(state: ServerState = Depends(ready_state)):
    """llama.cpp's listing: [{"id", "path", "scale"}] (plus "name"). Adapters apply per request, so
    the scale here is 0: none is on unless a request asks for it."""
    paths = dict(state.config.loras)
    return [{"id": i, "name": name, "path": paths[name], "scale": 0.0} for i, name in enumerate(state.loras)]
