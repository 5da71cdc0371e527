"""GET /props and GET /slots, as llama.cpp's server has them (read-only): the server's settings and
model, and what each sequence of the batch is doing. /props is public (the chat page reads the model's
name from it); /slots, which shows requests, needs the API key."""
from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Depends

from oxillama.server.auth import require_api_key
from oxillama.server.routes import ready_state
from oxillama.server.state import ServerState

public = APIRouter()
router = APIRouter(dependencies=[Depends(require_api_key)])

# the default sampling settings /props reports (a request's own fields override them)
_PARAMS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
           "presence_penalty", "frequency_penalty", "seed")


def _default_params() -> dict:
    from oxillama.sampling import SamplerConfig
    config = asdict(SamplerConfig())
    return {name: config[name] for name in _PARAMS if name in config}


@public.get("/props")
async def props(state: ServerState = Depends(ready_state)):
    from oxillama import __version__
    state = await state.serving(None)
    engine, scheduler, tok = state.engine, state.scheduler, state.engine.tokenizer

    def token(i):
        return tok.token_text(i) if i is not None else ""
    return {
        "default_generation_settings": {"n_ctx": scheduler.n_ctx, "params": _default_params()},
        "total_slots": scheduler.n_seq_max,
        "model_alias": state.model_name,
        "model_path": str(state.slot.spec.path),
        "n_ctx": scheduler.n_ctx,
        "n_vocab": tok.n_vocab,
        "chat_template": tok.chat_template or "",
        "bos_token": token(tok.bos_id),
        "eos_token": token(tok.eos_id),
        "modalities": {"vision": False, "audio": False},
        "build_info": f"oxillama {__version__}",
        "webui": True,
        "n_threads": engine.n_threads,
    }


@router.get("/slots")
async def slots(state: ServerState = Depends(ready_state)):
    state = await state.serving(None)
    n_ctx = state.scheduler.n_ctx
    return [{**slot, "n_ctx": n_ctx} for slot in state.scheduler.slots()]
