"""The endpoints, one module per API family; each handler translates between the protocol models and
the engine or scheduler (oxillama.server.convert) and raises on failure (oxillama.server.errors)."""
from __future__ import annotations

from fastapi import Request

from oxillama.server.state import ServerState


def ready_state(request: Request) -> ServerState:
    """FastAPI dependency: the server's state once the model is loaded (else a 503)."""
    state: ServerState = request.app.state.server
    state.require_ready()
    return state
