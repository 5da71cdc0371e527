"""The OpenAI error object on an app with nothing but the error handlers (no model, no socket): `code`
is a string as OpenAI sends it, or null, and the HTTP status carries the number."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from oxillama import errors as ox  # noqa: E402
from oxillama.server import errors  # noqa: E402


class Body(BaseModel):
    n: int


def make_app() -> FastAPI:
    app = FastAPI()
    errors.install(app)
    raises = {
        "bad": errors.APIError(400, "prompt must not be empty", param="prompt"),
        "auth": errors.APIError(401, "missing or wrong API key", "authentication_error"),
        "context": ox.ContextOverflowError("the prompt has 600 tokens; n_ctx=512"),
        "queue": ox.QueueFullError("the queue is full"),
        "stopped": ox.SchedulerStoppedError("shutting down"),
        "crash": RuntimeError("boom"),
    }

    @app.get("/raise/{what}")
    async def _raise(what: str):
        raise raises[what]

    @app.post("/body")
    async def _body(body: Body):
        return {}
    return app


@pytest.mark.parametrize("what, status, type_, code", [
    ("bad", 400, "invalid_request_error", None),
    ("auth", 401, "authentication_error", "invalid_api_key"),
    ("context", 400, "exceed_context_size_error", "context_length_exceeded"),
    ("queue", 429, "rate_limit_error", "rate_limit_exceeded"),
    ("stopped", 503, "server_error", None),
    ("crash", 500, "server_error", None),
])
def test_error_code_is_a_string_or_null_and_the_status_stays(what, status, type_, code):
    with TestClient(make_app(), raise_server_exceptions=False) as c:
        r = c.get(f"/raise/{what}")
    assert r.status_code == status
    err = r.json()["error"]
    assert err["type"] == type_ and err["code"] == code
    assert isinstance(err["message"], str) and "Traceback" not in r.text


def test_validation_and_unknown_routes_have_a_null_code():
    with TestClient(make_app()) as c:
        r = c.post("/body", json={"n": "x"})
        assert r.status_code == 400 and r.json()["error"]["code"] is None
        assert r.json()["error"]["param"] == "n"
        r = c.get("/nowhere")
        assert r.status_code == 404 and r.json()["error"]["code"] is None


def test_the_openai_client_reads_the_error():
    openai = pytest.importorskip("openai")
    with TestClient(make_app()) as http:      # an httpx.Client that talks to the app in process
        client = openai.OpenAI(base_url="http://testserver", api_key="x", max_retries=0, http_client=http)
        with pytest.raises(openai.AuthenticationError) as e:
            client.get("/raise/auth", cast_to=object)
    assert e.value.code == "invalid_api_key" and e.value.status_code == 401
