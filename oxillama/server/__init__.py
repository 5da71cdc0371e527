"""`oxillama serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn + sse-starlette) on the
continuous-batching Scheduler. Needs the server extra: pip install "oxillama[server]".

    from oxillama.server import ServerConfig, create_app, serve
    serve(ServerConfig(model="smollm2-135m", port=8000, parallel=8))
"""
from oxillama.server.app import create_app, serve
from oxillama.server.state import ServerConfig

__all__ = ["ServerConfig", "create_app", "serve"]
