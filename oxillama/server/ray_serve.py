"""`oxillama serve --replicas N`: the same FastAPI app as `oxillama serve`, as a Ray Serve deployment.

Each replica is a Ray actor that builds the app (`create_app`) in its own process: its own engine,
scheduler and `threads_per_replica` threads (`ray_actor_options={"num_cpus": T}`). Ray's HTTP proxy
listens on --host/--port and routes every request to a replica; Ray restarts a replica whose process
dies and routes around it meanwhile. Without `ray_address` a local Ray instance starts (and stops
with the command); with one (`auto`, `ray://host:10001`, `host:6379`) the deployment joins that
cluster and is deleted from it when the command stops.

Imported only for --replicas: the core and the single-process server never import Ray.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading

from ray import serve

from oxillama.server.state import ScaleOut, ServerConfig

log = logging.getLogger("oxillama")

APP_NAME = "oxillama"


@serve.ingress()
class OxillamaReplica:
    """One replica: the single-process server's app over its own engine. The model loads during the
    app's startup, so Ray sends traffic only to replicas that can answer."""

    def __init__(self, config: dict):
        self.config = ServerConfig(**config)
        self.state = None

    def __serve_build_asgi_app__(self):
        from oxillama.server.app import create_app
        app = create_app(self.config, load_before_serving=True)
        self.state = app.state.server
        app.add_middleware(MultiplexedAdapters, replica=self)
        return app

    @serve.multiplexed(max_num_models_per_replica=64)
    async def adapter(self, name: str):
        """Ray's model multiplexing: a request sent with the header `serve_multiplexed_model_id: NAME`
        goes to a replica that has served adapter NAME before (every replica loads every --lora adapter
        at startup; this records which ones each replica is using, for Ray's router)."""
        return self.state.loras[name]


class MultiplexedAdapters:
    """Marks the adapter a request's `serve_multiplexed_model_id` header names as used on this replica.
    Only a POST (a request that can generate with it) marks it: a GET carrying the header is routed
    like the adapter's requests but changes nothing, so a client can see where they would go."""

    def __init__(self, app, replica: OxillamaReplica):
        self.app, self.replica = app, replica

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            name = serve.get_multiplexed_model_id()
            if name and self.replica.state is not None and name in self.replica.state.loras:
                await self.replica.adapter(name)
        await self.app(scope, receive, send)


def deployment_options(config: ServerConfig, scale: ScaleOut) -> dict:
    """Ray Serve options: replicas (or autoscaling on ongoing requests), CPUs per replica, and enough
    ongoing requests per replica to keep its batch full plus a queue behind it."""
    options = {
        "name": APP_NAME,
        "ray_actor_options": {"num_cpus": scale.threads_per_replica},
        # the scheduler batches `parallel` sequences; as many again wait in its queue, the rest in Ray's
        "max_ongoing_requests": max(2 * config.parallel, config.parallel + (config.max_queue or 0)),
        "health_check_period_s": 5,
        "graceful_shutdown_timeout_s": config.drain_timeout,
    }
    if scale.autoscale is not None:
        lo, hi = scale.autoscale
        options["autoscaling_config"] = {"min_replicas": lo, "max_replicas": hi, "initial_replicas": max(lo, 1),
                                         "target_ongoing_requests": config.parallel}
    else:
        options["num_replicas"] = scale.replicas
    return options


def wait_for_replicas(n: int, timeout: float = 600.0) -> None:
    """Until n replicas run (the first to load already answers through the proxy)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = serve.status().applications.get(APP_NAME)
        states = app.deployments[APP_NAME].replica_states if app and APP_NAME in app.deployments else {}
        if sum(count for state, count in states.items() if str(state).endswith("RUNNING")) >= n:
            return
        time.sleep(0.5)
    log.warning("not all %d replicas were running after %.0f s", n, timeout)


def serve_replicated(config: ServerConfig, scale: ScaleOut) -> int:
    """Deploy and serve until SIGINT/SIGTERM; 0 after a clean stop."""
    import ray

    local = scale.ray_address is None
    init = {"address": scale.ray_address, "logging_level": logging.WARNING, "log_to_driver": False}
    if local:
        # a local instance gets at least the CPUs the replicas ask for (on a small machine they share)
        want = scale.threads_per_replica * (scale.autoscale[1] if scale.autoscale else scale.replicas)
        init.update(num_cpus=max(os.cpu_count() or 1, want), include_dashboard=False)
    ray.init(**init)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        replica_config = dataclasses.asdict(config) | {"threads": scale.threads_per_replica}
        app = serve.deployment(OxillamaReplica, **deployment_options(config, scale)).bind(replica_config)
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
        wait_for_replicas(scale.autoscale[0] if scale.autoscale else scale.replicas)
        log.warning("serving %s on http://%s:%d with %s replica(s) of %d thread(s) (Ray Serve)", config.model,
                    config.host, config.port, f"{scale.autoscale[0]}..{scale.autoscale[1]}" if scale.autoscale
                    else scale.replicas, scale.threads_per_replica)
        stop.wait()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            if local:
                serve.shutdown()
            else:
                serve.delete(APP_NAME)
        finally:
            if local:
                ray.shutdown()
