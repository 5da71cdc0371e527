"""What one server process holds: its settings, its models (oxillama.server.model_slots: each with an
engine and scheduler once loaded), its metrics."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import logging

from oxillama.errors import InvalidArgumentError
from oxillama.server.errors import APIError


log = logging.getLogger("oxillama.server")

DEFAULT_CACHE_RAM = 8 << 30


@dataclass
class ServerConfig:
    model: str                       # a GGUF path or a known model name (oxillama.hub)
    host: str = "127.0.0.1"
    port: int = 8000
    parallel: int = 8                # sequences batched together (Scheduler n_seq_max)
    n_ctx: int = 0                   # per-sequence context; 0: the engine's default
    threads: int | None = None
    repack: bool = True              # the weights' repacked copy for the faster kernels (serve --no-repack)
    api_key: str | None = None
    api_keys: dict | None = None     # --api-key-file: {key: (rpm or None, tpm or None)} (server.api_keys)
    alias: str | None = None         # the model id clients see; default: the file's stem
    max_queue: int | None = None     # waiting requests beyond which submissions get 429
    max_batch_tokens: int = 512
    max_decode_slowdown: float | None = None   # Scheduler's: cap prefill while requests decode
    # Scheduler's: seconds an idle scheduler waits for the next of a burst of requests, so that they share
    # the first step (HTTP hands them over one by one, ~0.2-1 ms apart)
    admission_window: float = 0.003
    drain_timeout: float = 30.0      # on SIGINT/SIGTERM: seconds running requests get to finish
    loras: tuple = ()                # ((name, path), ...): LoRA adapters requests may pick
    max_body_mb: int = 16            # larger request bodies get 413
    reasoning_format: str = "auto"   # thinking apart from the answer: none | auto | deepseek (oxillama.tools.reasoning)
    responses_store: int = 1024      # /v1/responses kept for GET and previous_response_id (count) ...
    responses_store_mb: int = 64     # ... and their JSON size
    cache_ram_mb: int | None = None  # prompt cache (finished requests' K/V by prefix), MiB; 0: off; None: default
    models: tuple = ()               # ModelSpec of every model served (-m repeated); () : just `model`
    max_loaded: int | None = None    # models loaded at once (least recently used unloaded); None: all

    def model_specs(self) -> tuple:
        """Every served model, the default (`model`) first."""
        from oxillama.server.model_slots import ModelSpec
        if self.models:
            return tuple(self.models)
        return (ModelSpec(self.model_name(), str(self.model)),)

    def cache_ram_bytes(self) -> int:
        """The prompt cache's byte budget: --cache-ram, else llama.cpp server's 8 GiB capped at a quarter
        of the memory available now (the cache fills only as requests finish)."""
        if self.cache_ram_mb is not None:
            return self.cache_ram_mb << 20
        from oxillama._system import available_memory
        avail = available_memory()
        return DEFAULT_CACHE_RAM if avail is None else min(DEFAULT_CACHE_RAM, avail // 4)

    def model_name(self) -> str:
        if self.alias:
            return self.alias
        from pathlib import Path
        return Path(str(self.model)).stem if str(self.model).endswith(".gguf") else str(self.model)


@dataclass
class ScaleOut:
    """`oxillama serve --replicas/--autoscale`: the Ray Serve deployment's shape (oxillama.server.ray_serve)."""
    replicas: int = 1
    ray_address: str | None = None                # None: start a local Ray instance
    threads_per_replica: int = 1
    autoscale: tuple[int, int] | None = None     # (min, max) replicas instead of a fixed count


def parse_autoscale(text: str) -> tuple[int, int]:
    """"MIN:MAX" -> (MIN, MAX), 0 <= MIN <= MAX, MAX >= 1."""
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise InvalidArgumentError(f"--autoscale must be MIN:MAX (two integers), got {text!r}") from None
    if not 0 <= lo <= hi or hi < 1:
        raise InvalidArgumentError(f"--autoscale needs 0 <= MIN <= MAX and MAX >= 1, got {text!r}")
    return lo, hi


class ServerState:
    """Filled by the app's lifespan: `engine` and `scheduler` are None until the model is loaded
    (/health answers 503 until then, and so does every endpoint that needs the model)."""

    def __init__(self, config: ServerConfig):
        from oxillama.server.metrics import ServerMetrics
        from oxillama.server.model_slots import ModelSlot
        self.config = config
        specs = config.model_specs()
        self.slots = [ModelSlot(spec, default=i == 0) for i, spec in enumerate(specs)]
        self._by_name: dict = {}
        for slot in self.slots:
            for name in (slot.name, *slot.spec.aliases):
                if name in self._by_name:
                    raise InvalidArgumentError(f"two served models are both called {name!r}")
                self._by_name[name] = slot
        self.default = self.slots[0]
        self.model_name = self.default.name
        self.metrics = ServerMetrics(self.model_name)
        self.started = False             # the default model loaded at startup
        self._load_lock = None           # asyncio.Lock: one load or unload at a time
        self.load_error: str | None = None
        self.embed_lock = threading.Lock()   # embeddings run one at a time, off the event loop
        from oxillama.server.api_keys import KeyRing
        keys = dict(config.api_keys or {})
        if keys and config.api_key:
            keys.setdefault(config.api_key, (None, None))
        self.keys = KeyRing(keys, self.metrics.registry) if keys else None
        from oxillama.server.response_store import ResponseStore
        self.responses = ResponseStore(config.responses_store, config.responses_store_mb << 20)

    # the default model's, as the single-model server had them
    @property
    def engine(self):
        return self.default.engine

    @property
    def scheduler(self):
        return self.default.scheduler

    @property
    def loras(self) -> dict:
        return self.default.loras         # name -> LoraAdapter, validated against the model at load

    @property
    def ready(self) -> bool:
        return self.started

    def schedulers(self) -> list:
        return [slot.scheduler for slot in self.slots if slot.scheduler is not None]

    def resolve(self, model: str | None):
        """The ModelSlot a request's "model" names: a served name or alias, or (the default model's
        adapters) "<name>:<lora>" or a --lora name. No name picks the default; so does any name when
        only one model is served (clients send their own model names). Otherwise 404 naming them."""
        if not model:
            return self.default
        slot = self._by_name.get(model)
        if slot is not None:
            return slot
        if len(self.slots) == 1 or model in self.config_lora_names():
            return self.default
        for slot in self.slots:
            if model.startswith(slot.name + ":"):      # "<name>:<lora>" (the name may hold a ':' itself)
                return slot
        served = ", ".join(repr(name) for name in self._by_name)
        raise APIError(404, f"the model {model!r} is not served here; served: {served}", "not_found_error",
                       "model", code="model_not_found")

    def config_lora_names(self) -> set:
        return {name for name, _ in self.config.loras}

    async def serving(self, model: str | None):
        """A ModelView of the model a request names, loaded first if it is not (503 if that fails)."""
        import asyncio

        from oxillama.server.model_slots import LOADED, ModelView
        slot = self.resolve(model)
        if slot.status != LOADED:
            if self._load_lock is None:
                self._load_lock = asyncio.Lock()
            async with self._load_lock:
                if slot.status != LOADED:
                    await self._make_room(slot)
                    from oxillama.server.app import load_slot
                    try:
                        await asyncio.to_thread(load_slot, self, slot)
                    except Exception as e:
                        raise APIError(503, f"the model {slot.name!r} failed to load: {type(e).__name__}: {e}",
                                       "server_error") from None
        slot.touch()
        return ModelView(self, slot)

    async def _make_room(self, slot) -> None:
        """Unload the least recently used idle models until one more fits --max-loaded."""
        import asyncio

        from oxillama.server.model_slots import LOADED, unload_slot
        limit = self.config.max_loaded
        if limit is None:
            return
        loaded = [s for s in self.slots if s.status == LOADED and s is not slot]
        while len(loaded) >= limit:
            idle = [s for s in loaded if s.idle()]
            if not idle:
                log.warning("--max-loaded %d: every loaded model is busy; loading %r beside them", limit, slot.name)
                return
            victim = min(idle, key=lambda s: s.last_used)
            await asyncio.to_thread(unload_slot, self, victim)
            log.info("model %r unloaded (--max-loaded %d) to load %r", victim.name, limit, slot.name)
            loaded.remove(victim)

    def adapter(self, name: str):
        """The LoRA adapter served as `name` (404 naming the ones there are)."""
        try:
            return self.loras[name]
        except KeyError:
            known = ", ".join(f"{self.model_name}:{n}" for n in self.loras) or "none (start with --lora NAME=PATH)"
            raise APIError(404, f"no LoRA adapter named {name!r}; served: {known}", "not_found_error",
                           "lora", code="model_not_found") from None

    def require_ready(self) -> None:
        if self.load_error is not None:
            raise APIError(503, f"the model failed to load: {self.load_error}", "server_error")
        if not self.ready:
            raise APIError(503, "the model is loading", "server_error")
