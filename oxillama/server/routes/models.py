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
    """Every served model, the default first, with its state ("loaded", "unloaded", "loading",
    "failed") and aliases; then one card per LoRA adapter of the default model ("<model>:<name>"; a
    request's `model` may name one)."""
    cards = []
    for slot in state.slots:
        n_ctx = slot.engine.n_ctx if slot.engine is not None else (slot.spec.n_ctx or state.config.n_ctx or None)
        cards.append(ModelCard(id=slot.name, max_model_len=n_ctx, status=slot.status,
                               aliases=list(slot.spec.aliases) or None, default=slot.default or None))
    paths = dict(state.config.loras)
    base = state.default
    cards += [ModelCard(id=f"{base.name}:{name}", root=paths[name], parent=base.name,
                        max_model_len=base.engine.n_ctx if base.engine is not None else None) for name in base.loras]
    return ModelList(data=cards)


@router.get("/lora-adapters")
async def lora_adapters(state: ServerState = Depends(ready_state)):
    """llama.cpp's listing: [{"id", "path", "scale"}] (plus "name"). Adapters apply per request, so
    the scale here is 0: none is on unless a request asks for it."""
    paths = dict(state.config.loras)
    return [{"id": i, "name": name, "path": paths[name], "scale": 0.0} for i, name in enumerate(state.loras)]
