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

import shlex
import time
from dataclasses import dataclass

from oxillama.errors import InvalidArgumentError

UNLOADED, LOADING, LOADED, FAILED = "unloaded", "loading", "loaded", "failed"


@dataclass(frozen=True)
class ModelSpec:
    name: str                 # the id clients send as "model"
    path: str                 # the GGUF file
    aliases: tuple = ()       # other ids for it
    n_ctx: int = 0            # per-sequence context; 0: the server's --n-ctx


def parse_models_file(path: str) -> list[tuple[str, str, tuple, int]]:
    """(name, model, aliases, n_ctx) per model of an `oxillama serve --models-file FILE`: one model a line,
    `NAME MODEL [aliases=A,B] [n_ctx=N]`, MODEL a GGUF path (relative to the file's folder), a known
    model's name or hf://ORG/REPO[:QUANT]; blank lines and # comments ignored. A bad line raises
    naming the file and line."""
    import os
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"--models-file {path}: {getattr(e, 'strerror', None) or e}") from None
    folder = os.path.dirname(os.path.abspath(path))
    out = []
    for no, line in enumerate(lines, 1):
        where = f"--models-file {path}, line {no}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise InvalidArgumentError(f"{where}: {e}") from None
        if not words:
            continue
        if len(words) < 2 or "=" in words[0] or "=" in words[1]:
            raise InvalidArgumentError(f"{where}: expected 'NAME MODEL [aliases=A,B] [n_ctx=N]', got {line.strip()!r}")
        name, model = words[0], words[1]
        if ":" in name:
            raise InvalidArgumentError(f"{where}: a model name cannot hold ':' (it picks a LoRA adapter), got {name!r}")
        from oxillama import hub
        local = model.endswith(".gguf") or os.sep in model
        resolved = os.path.join(folder, model) if local and not hub.is_hf(model) and not os.path.isabs(model) else model
        aliases, n_ctx = (), 0
        for option in words[2:]:
            key, sep, value = option.partition("=")
            if key == "aliases" and sep:
                aliases = tuple(a for a in value.split(",") if a)
                if not aliases or any(":" in a for a in aliases):
                    raise InvalidArgumentError(f"{where}: aliases= takes names without ':' separated by commas, "
                                               f"got {value!r}")
            elif key == "n_ctx" and sep:
                try:
                    n_ctx = int(value)
                except ValueError:
                    n_ctx = -1
                if n_ctx < 0:
                    raise InvalidArgumentError(f"{where}: n_ctx= takes a whole number >= 0, got {value!r}")
            else:
                raise InvalidArgumentError(f"{where}: unknown option {option!r} (aliases=A,B or n_ctx=N)")
        out.append((name, resolved, aliases, n_ctx))
    if not out:
        raise InvalidArgumentError(f"--models-file {path} lists no model")
    return out


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

