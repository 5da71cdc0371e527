"""The FastAPI app and the process around it.

Startup binds the port at once and loads the (default) model on a worker thread (/health answers 503
until its scheduler runs). Every generation goes through its model's `Scheduler`, whose thread runs the
forwards; the event loop only submits, awaits and streams. With several models (-m repeated), the others
load on first use and the least recently used idle one unloads beyond --max-loaded
(oxillama.server.model_slots). SIGINT/SIGTERM drain: no new connections, running requests get
`drain_timeout` seconds to finish (then are cancelled), the scheduler stops, and the process exits 0.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading

import uvicorn
from fastapi import FastAPI

from oxillama.server import errors
from oxillama.server.logs import AccessLog
from oxillama.server.state import ServerConfig, ServerState

log = logging.getLogger("oxillama")
server_log = logging.getLogger("oxillama.server")     # what `oxillama serve` says at INFO by default


def load(state: ServerState) -> None:
    """Load the default model and start its scheduler (blocking; runs on a worker thread at startup)."""
    load_slot(state, state.default)
    state.started = True


def load_slot(state: ServerState, slot) -> None:
    """Load one served model: its engine, adapters (the default model's), prompt cache and scheduler."""
    from oxillama.runtime import InferenceEngine, PrefixKvCache
    from oxillama.runtime.scheduler import Scheduler
    from oxillama.server.model_slots import FAILED, LOADED, LOADING

    c = state.config
    slot.status = LOADING
    try:
        engine = InferenceEngine.from_gguf(slot.spec.path, n_ctx=slot.spec.n_ctx or c.n_ctx, n_threads=c.threads,
                                           repack=c.repack)
    except BaseException as e:
        slot.status, slot.load_error = FAILED, f"{type(e).__name__}: {e}"
        raise
    try:
        slot.loras = load_adapters(engine, c.loras) if slot.default else {}
        # --cache-ram is the whole process's: each model gets its share
        cache_bytes = c.cache_ram_bytes() // len(state.slots)
        prompt_cache = PrefixKvCache(max_bytes=cache_bytes) if cache_bytes else None
        scheduler = Scheduler(engine, n_seq_max=c.parallel, max_batch_tokens=c.max_batch_tokens,
                              max_decode_slowdown=c.max_decode_slowdown, max_queue=c.max_queue,
                              n_ctx=slot.spec.n_ctx or c.n_ctx or None, prompt_cache=prompt_cache,
                              admission_window=c.admission_window)
        state.metrics.attach(scheduler, slot.name)
        if state.keys is not None:
            scheduler.add_listener(state.keys.observe)
        scheduler.start()
    except BaseException as e:
        engine.close()
        slot.status, slot.load_error = FAILED, f"{type(e).__name__}: {e}"
        raise
    slot.engine, slot.scheduler = engine, scheduler
    slot.status, slot.load_error = LOADED, None
    slot.loads += 1
    slot.touch()
    server_log.info("model %s loaded as %r: n_ctx %d per sequence, %d parallel sequences, %d threads",
                    slot.spec.path, slot.name, scheduler.n_ctx, c.parallel, engine.n_threads)


def load_adapters(engine, loras) -> dict:
    """name -> LoraAdapter for `--lora NAME=PATH`, each checked against the model now (a bad file stops
    the server at startup, not a request later)."""
    from oxillama.errors import LoraError, OxillamaError
    from oxillama.lora import LoraAdapter
    adapters = {}
    for name, path in loras:
        try:
            adapter = LoraAdapter.from_gguf(path)
            adapter.bind(engine)
        except (OxillamaError, OSError) as e:
            raise LoraError(f"--lora {name}={path}: {e}") from None
        adapters[name] = adapter
        log.info("LoRA adapter %r: %s (rank %d)", name, path, adapter.rank)
    return adapters


def unload(state: ServerState) -> None:
    from oxillama.server.model_slots import unload_slot
    for slot in state.slots:
        if slot.scheduler is not None or slot.engine is not None:
            unload_slot(state, slot)


def create_app(config: ServerConfig, *, on_load_error=None, load_before_serving: bool = False) -> FastAPI:
    """The app for one model. on_load_error(exc) is called if loading fails (the CLI stops the process).
    The model loads in the background while the port already answers (/health: 503), or, with
    load_before_serving (a Ray Serve replica, which takes traffic once its startup returns), before
    the lifespan's startup completes."""
    state = ServerState(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async def load_in_background():
            try:
                await asyncio.to_thread(load, state)
            except Exception as e:
                state.load_error = f"{type(e).__name__}: {e}"
                log.error("could not load %s: %s", config.model, state.load_error)
                if on_load_error is not None:
                    on_load_error(e)

        loader = asyncio.ensure_future(load_in_background())
        if load_before_serving:
            await loader
            if state.load_error is not None:
                raise RuntimeError(f"could not load {config.model}: {state.load_error}")
        try:
            yield
        finally:
            if not loader.done():
                await loader
            await asyncio.to_thread(unload, state)

    from oxillama.server.routes import (chat, completions, embeddings, messages, models, props, responses, tokenize,
                                        webui)

    app = FastAPI(title="oxillama", version=_version(), lifespan=lifespan)
    app.state.server = state
    app.add_middleware(BodyLimit, max_bytes=config.max_body_mb << 20)
    app.add_middleware(ReplicaHeader)
    app.add_middleware(AccessLog)
    errors.install(app)
    for module in (models, tokenize, embeddings, completions, chat, responses, messages, props, webui):
        if hasattr(module, "public"):
            app.include_router(module.public)
        if hasattr(module, "router"):
            app.include_router(module.router)
    return app


class BodyLimit:
    """Request bodies over `max_bytes` get a 413 error object before any handler runs, whether the
    client declared the length or streams the body in chunks (read here up to the limit, then handed
    on as it came)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, scope, send, what: str) -> None:
        from oxillama.server.errors import error_response_for
        response = error_response_for(scope.get("path", ""), 413, f"the request body is {what}; the limit is "
                                      f"{self.max_bytes} bytes (oxillama serve --max-body-mb)", "invalid_request_error")
        await response({"type": "http"}, None, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if declared > self.max_bytes:
                return await self._refuse(scope, send, f"{declared} bytes")
            return await self.app(scope, receive, send)
        chunks, size = [], 0            # no declared length: read it here, bounded
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(scope, send, "larger than that")
            chunks.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            return chunks.pop(0) if chunks else await receive()
        await self.app(scope, replay, send)


class ReplicaHeader:
    """Every response names the process that served it: `X-Oxillama-Replica: <host>:<pid>` (with
    several replicas behind Ray Serve, which one answered). Plain ASGI, so streams pass untouched."""

    def __init__(self, app):
        self.app = app
        self.value = f"{socket.gethostname()}:{os.getpid()}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_header(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-oxillama-replica", self.value)]}
            await send(message)
        await self.app(scope, receive, send_with_header)


def _version() -> str:
    from oxillama import __version__
    return __version__


class DrainingServer(uvicorn.Server):
    """uvicorn's Server, except that after a drain caused by SIGINT/SIGTERM the process exits 0: uvicorn
    would raise the signal again once shut down, which turns SIGTERM into death by signal. It says
    where it listens, when it drains and when it has stopped."""

    def __init__(self, config: uvicorn.Config, state: ServerState | None = None):
        super().__init__(config)
        self.state = state

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            for server in self.servers:
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    host = f"[{host}]" if ":" in host else host
                    server_log.info("listening on http://%s:%d (Ctrl-C to stop)", host, port)

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            running = 0
            for scheduler in self.state.schedulers() if self.state is not None else ():
                metrics = scheduler.metrics()
                running += metrics["num_requests_running"] + metrics["num_requests_waiting"]
            if running:
                server_log.info("shutting down: %d running requests get up to %.0f s to finish (Ctrl-C again to "
                                "stop them now)", running, self.state.config.drain_timeout)
            else:
                server_log.info("shutting down")
        elif sig == signal.SIGINT:
            server_log.info("stopping now")
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(config: ServerConfig) -> int:
    """Run the server until SIGINT/SIGTERM; 0 after a clean drain, 1 if the model failed to load."""
    failed = threading.Event()
    server: DrainingServer | None = None

    def on_load_error(exc):
        failed.set()
        if server is not None:
            server.should_exit = True

    app = create_app(config, on_load_error=on_load_error)
    uv_config = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                               timeout_graceful_shutdown=config.drain_timeout + 5, access_log=False)
    server = DrainingServer(uv_config, app.state.server)
    try:
        server.run()
    except (KeyboardInterrupt, asyncio.CancelledError):
        # a Ctrl-C outside uvicorn's signal handlers (asyncio's own, while the loop starts or ends)
        server_log.info("interrupted")
    if failed.is_set():
        return 1
    server_log.info("stopped")
    return 0
