"""What one server process holds: its settings, the engine and scheduler once loaded, its metrics."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from oxillama.errors import InvalidArgumentError
from oxillama.server.errors import APIError


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
    drain_timeout: float = 30.0      # on SIGINT/SIGTERM: seconds running requests get to finish
    loras: tuple = ()                # ((name, path), ...): LoRA adapters requests may pick
    max_body_mb: int = 16            # larger request bodies get 413
    reasoning_format: str = "auto"   # thinking apart from the answer: none | auto | deepseek (oxillama.tools.reasoning)
    responses_store: int = 1024      # /v1/responses kept for GET and previous_response_id (count) ...
    responses_store_mb: int = 64     # ... and their JSON size

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
        self.config = config
        self.model_name = config.model_name()
        self.metrics = ServerMetrics(self.model_name)
        self.engine = None
        self.scheduler = None
        self.loras: dict = {}            # name -> LoraAdapter, validated against the model at load
        self.load_error: str | None = None
        self.embed_lock = threading.Lock()   # embeddings run one at a time, off the event loop
        from oxillama.server.api_keys import KeyRing
        keys = dict(config.api_keys or {})
        if keys and config.api_key:
            keys.setdefault(config.api_key, (None, None))
        self.keys = KeyRing(keys, self.metrics.registry) if keys else None
        from oxillama.server.response_store import ResponseStore
        self.responses = ResponseStore(config.responses_store, config.responses_store_mb << 20)

    @property
    def ready(self) -> bool:
        return self.scheduler is not None

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
