"""Request bodies over --max-body-mb are refused with a 413 error object before any handler reads
them, whether the client declares the length or streams the body in chunks; the server stays up."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def server(server_factory, tiny_models):
    server = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "2", "--n-ctx", "64",
                            "--max-body-mb", "1")
    yield server
    server.stop()


def big_body() -> bytes:
    return json.dumps({"model": "m", "prompt": "x" * (2 << 20), "max_tokens": 1}).encode()


def test_declared_length_over_the_limit_is_413(server):
    with server.client() as http:
        r = http.post("/v1/completions", content=big_body(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
        assert http.get("/health").status_code == 200


def test_chunked_body_over_the_limit_is_413(server):
    body = big_body()

    def chunks():
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]
    with server.client() as http:
        r = http.post("/v1/completions", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"


def test_chunked_body_under_the_limit_is_served(server):
    body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 2}).encode()
    with server.client() as http:
        r = http.post("/v1/completions", content=iter([body[:10], body[10:]]),
                      headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] is not None
