"""The API key check, a FastAPI dependency on every route but /health and /metrics: one --api-key, or
the keys of an --api-key-file with their rate limits (oxillama.server.api_keys)."""
from __future__ import annotations

import secrets

from fastapi import Request

from oxillama.server.api_keys import current_key, retry_after
from oxillama.server.errors import APIError


async def require_api_key(request: Request) -> None:
    state = request.app.state.server
    keys, key = state.keys, state.config.api_key
    if keys is None and not key:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        token = request.headers.get("x-api-key", "")        # Anthropic's clients send it so
    token = token.strip()
    if keys is not None:
        found = keys.find(token)
        if found is None:
            raise APIError(401, "unknown API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>' with a "
                                "key of the server's --api-key-file", "authentication_error")
        over = keys.admit(found)
        if over is not None:
            limit, wait = over
            raise APIError(429, f"this key is over its {limit} limit ({limit}="
                                f"{(found.rpm if limit == 'rpm' else found.tpm).per_minute}); retry in "
                                f"{retry_after(wait)} s", "rate_limit_error",
                           headers={"Retry-After": retry_after(wait)})
        current_key.set(found)
        return
    if not secrets.compare_digest(token.encode(), key.encode()):
        raise APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                       "authentication_error")
