"""Several models in one server process (`oxillama serve -m A -m B --max-loaded N`).

Each served model is a `ModelSlot`: its name (the file's stem, a known model's name or --alias), the
GGUF path, and once loaded its engine, scheduler and prompt cache. The first model is the default: it
loads at startup and serves requests that name no model. The others load when a request first names
them; with --max-loaded N, loading one more unloads the least recently used idle model (no request
running or waiting on it). Requests for different models run side by side, each model on its own
scheduler thread.

Routes see one model through a `ModelView`: the server's state with that model's engine, scheduler,
adapters and name, so a handler reads `state.engine` whichever model the request picked.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

UNLOADED, LOADING, LOADED, FAILED = "unloaded", "loading", "loaded", "failed"


@dataclass(frozen=True)
class ModelSpec:
    name: str                 # the id clients send as "model"
    path: str                 # the GGUF file
    aliases: tuple = ()       # other ids for it
    n_ctx: int = 0            # per-sequence context; 0: the server's --n-ctx


class ModelSlot:
    """One served model and, while loaded, its engine and scheduler."""

    def __init__(self, spec: ModelSpec, default: bool = False):
        self.spec = spec
        self.default = default
        self.engine = None
        self.scheduler = None
        self.loras: dict = {}           # the default model's --lora adapters
        self.status = UNLOADED
        self.load_error: str | None = None
        self.last_used = 0.0            # time.monotonic() of the last request that picked it
        self.loads = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def idle(self) -> bool:
        """No request running or waiting on it."""
        if self.scheduler is None:
            return True
        m = self.scheduler.metrics()
        return m["num_requests_running"] + m["num_requests_waiting"] == 0

    def touch(self) -> None:
        self.last_used = time.monotonic()


class ModelView:
    """The server's state as one request sees it: this model's engine, scheduler, loras and name;
    every other attribute (config, metrics, keys, responses, ...) is the server's."""

    def __init__(self, state, slot: ModelSlot):
        self._state = state
        self.slot = slot
        self.engine = slot.engine
        self.scheduler = slot.scheduler
        self.loras = slot.loras
        self.model_name = slot.name

    def __getattr__(self, name):
        return getattr(self._state, name)

    def adapter(self, name: str):
        from oxillama.server.state import ServerState
        return ServerState.adapter(self, name)


def unload_slot(state, slot: ModelSlot) -> None:
    """Stop the model's scheduler (unfinished requests end "cancelled") and free its engine."""
    scheduler, engine = slot.scheduler, slot.engine
    slot.scheduler, slot.engine = None, None
    slot.status = UNLOADED
    if scheduler is not None:
        state.metrics.detach(slot.name)
        scheduler.stop()
    if engine is not None:
        with state.embed_lock:          # an embedding running on it finishes first
            engine.close()

