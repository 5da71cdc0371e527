"""The API key check, a FastAPI dependency on every route but /health and /metrics."""
from __future__ import annotations

import secrets

from fastapi import Request

from oxillama.server.errors import APIError


async def require_api_key(request: Request) -> None:
    key = request.app.state.server.config.api_key
    if not key:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        token = request.headers.get("x-api-key", "")        # Anthropic's clients send it so
    if not secrets.compare_digest(token.strip().encode(), key.encode()):
        raise APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                       "authentication_error")
