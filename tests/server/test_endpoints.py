"""/health, /v1/models, /tokenize, /detokenize, /v1/embeddings, /metrics, request validation and auth,
against the real server process."""
from __future__ import annotations

import asyncio
import base64
import signal

import numpy as np
import pytest

openai = pytest.importorskip("openai")

EMBED_TOL = 1e-6      # float32 values through JSON and base64


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


@pytest.fixture(scope="module")
def keyed_server(server_factory, tiny_models):
    """The tiny random llama (content does not matter here) behind --api-key."""
    s = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "2", api_key="sekrit")
    yield s
    s.stop()


def test_health_and_models(server):
    with server.client() as c:
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "ok"
    models = server.openai().models.list()
    assert [m.id for m in models.data] == ["smol"]
    assert models.data[0].owned_by == "oxillama"


def test_tokenize_detokenize_round_trip(server):
    text = "Hello, world! Ünïcödé text\nwith a newline and <|im_start|> a control token."
    with server.client() as c:
        r = c.post("/tokenize", json={"content": text})
        assert r.status_code == 200
        tokens = r.json()["tokens"]
        assert tokens and all(isinstance(t, int) for t in tokens)
        back = c.post("/detokenize", json={"tokens": tokens})
        assert back.status_code == 200
        assert back.json()["content"] == text
        # the control token is one token when parsed, several when not
        parsed = c.post("/tokenize", json={"content": "<|im_start|>"}).json()["tokens"]
        literal = c.post("/tokenize", json={"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
        assert len(parsed) == 1 and len(literal) > 1


def test_detokenize_rejects_ids_outside_vocabulary(server):
    with server.client() as c:
        r = c.post("/detokenize", json={"tokens": [1, 10**9]})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "1000000000" in err["message"]


def test_embeddings_float_and_base64_agree(server):
    client = server.openai()
    texts = ["The cat sat on the mat.", "Stock markets fell sharply today."]
    as_float = client.embeddings.create(model="smol", input=texts, encoding_format="float")
    with server.client() as c:
        raw = c.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()
    assert [d.index for d in as_float.data] == [0, 1]
    f = np.array([d.embedding for d in as_float.data], dtype=np.float32)
    b = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]])
    assert f.shape == b.shape == (2, 576)
    np.testing.assert_allclose(f, b, atol=EMBED_TOL)
    np.testing.assert_allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-5)   # normalised by default
    assert not np.allclose(f[0], f[1])
    # usage counts the tokens embed() runs: each text with its BOS where the model adds one
    with server.client() as c:
        n = sum(len(c.post("/tokenize", json={"content": t, "add_special": True}).json()["tokens"]) for t in texts)
    assert as_float.usage.prompt_tokens == as_float.usage.total_tokens == n


@pytest.mark.parametrize("pooling, normalize", [("last", True), ("mean", False)])
def test_embeddings_equal_engine_embed_batch(server, smollm2_path, pooling, normalize):
    """The server's vectors are engine.embed_batch's, bit for bit (base64 carries the float32 bytes; a
    vector depends only on its own tokens, whatever the threads or the other inputs)."""
    from oxillama import InferenceEngine
    inputs = ["The cat sat on the mat.", "Stock markets fell sharply today, and then recovered.", [1, 2, 3, 4]]
    with server.client() as c:
        r = c.post("/v1/embeddings", json={"input": inputs[:2], "encoding_format": "base64", "pooling": pooling,
                                           "normalize": normalize})
        ids = c.post("/v1/embeddings", json={"input": [inputs[2]], "encoding_format": "base64",
                                             "pooling": pooling, "normalize": normalize})
    assert r.status_code == 200 and ids.status_code == 200, (r.text, ids.text)
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                    for d in r.json()["data"] + ids.json()["data"]])
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=512) as e:
        want = e.embed_batch(inputs, pooling=pooling, normalize=normalize)
    assert got.shape == want.shape == (3, 576)
    assert np.array_equal(got, want)


def test_embeddings_default_client_decodes_base64(server):
    # the openai client asks for base64 by default and decodes it itself
    one = server.openai().embeddings.create(model="smol", input="hello there")
    assert len(one.data) == 1 and len(one.data[0].embedding) == 576
    ids = server.openai().embeddings.create(model="smol", input=[[1, 2, 3]], encoding_format="float")
    assert ids.usage.prompt_tokens == 3


def test_embeddings_async_client_concurrent(server):
    async def main():
        client = server.async_openai()
        texts = [f"sentence number {i}" for i in range(4)]
        outs = await asyncio.gather(*(client.embeddings.create(model="smol", input=t, encoding_format="float")
                                      for t in texts))
        together = await client.embeddings.create(model="smol", input=texts, encoding_format="float")
        return outs, together

    outs, together = asyncio.run(main())
    for i, out in enumerate(outs):   # each text embedded independently of the others
        np.testing.assert_allclose(out.data[0].embedding, together.data[i].embedding, atol=EMBED_TOL)


@pytest.mark.parametrize("body, param", [
    ({"input": []}, "input"),
    ({"input": "x", "dimensions": 3}, "dimensions"),
    ({"input": 5}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
])
def test_embeddings_bad_input(server, body, param):
    with server.client() as c:
        r = c.post("/v1/embeddings", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] is None
    assert (err["param"] or "").startswith(param)


@pytest.mark.parametrize("body, param", [
    ({"messages": "hello"}, "messages"),                                              # not a list
    ({"messages": [{"content": "hi"}]}, "messages.0.role"),                            # no role
    ({"messages": [{"role": "user", "content": 42}]}, "messages.0.content"),          # numeric content
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": "0.5"}, "temperature"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_p": 0}, "top_p"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}, "response_format"),
])
def test_chat_malformed_bodies_are_400(server, body, param):
    with server.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["param"].startswith(param)
    assert "Traceback" not in r.text


def test_malformed_json_and_unknown_route(server):
    with server.client() as c:
        r = c.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json=["a", "list"])
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = c.get("/v2/nothing")
        assert r.status_code == 404 and r.json()["error"]["code"] is None
        r = c.get("/v1/chat/completions")
        assert r.status_code == 405 and "error" in r.json()


def test_openai_client_raises_bad_request(server):
    with pytest.raises(openai.BadRequestError) as e:
        server.openai().chat.completions.create(model="smol", messages=[{"role": "user", "content": "x"}],
                                                temperature=5.0)
    assert e.value.status_code == 400


def test_metrics_exposes_vllm_names(server):
    with server.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    for name in ("oxillama:time_to_first_token_seconds_bucket", "oxillama:inter_token_latency_seconds_bucket",
                 "oxillama:e2e_request_latency_seconds_count", "oxillama:request_queue_time_seconds_sum",
                 "oxillama:prompt_tokens_total", "oxillama:generation_tokens_total",
                 "oxillama:prefix_cache_hits_total", "oxillama:num_requests_running",
                 "oxillama:num_requests_waiting", "oxillama:kv_cache_usage_perc"):
        assert name in r.text, name


# Routes anyone may call; every other route of the app needs the key. FastAPI's own documentation
# routes are listed by name so that a new route is keyed unless it is added here on purpose.
# "/" is the chat page and "/props" what it reads to name the model, public as in llama.cpp's server
PUBLIC_ROUTES = {"/", "/props", "/health", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _walk(routes, prefix=""):
    for r in routes:
        sub = getattr(r, "original_router", None)      # FastAPI >= 0.16x keeps included routers whole
        if sub is not None:
            yield from _walk(sub.routes, prefix + (getattr(r.include_context, "prefix", "") or ""))
        elif getattr(r, "methods", None) and getattr(r, "path", None):
            yield from ((m, prefix + r.path) for m in r.methods if m not in ("HEAD", "OPTIONS"))


def app_routes() -> list[tuple[str, str]]:
    """(method, path) of every HTTP route the server's app declares (built without loading a model): the
    routes found by walking the app, and those its OpenAPI schema lists."""
    from oxillama.server.app import create_app
    from oxillama.server.state import ServerConfig
    app = create_app(ServerConfig(model="unused.gguf"))
    routes = set(_walk(app.routes))
    routes |= {(m.upper(), path) for path, ops in app.openapi()["paths"].items() for m in ops}
    return sorted(routes, key=lambda mp: (mp[1], mp[0]))


def test_every_route_but_the_public_ones_needs_the_key(keyed_server):
    import httpx
    routes = app_routes()
    keyed = [(m, p) for m, p in routes if p not in PUBLIC_ROUTES]
    # the routes the server has today are among them (a route that vanished from the list is a bug too)
    for must in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/tokenize",
                 "/detokenize"):
        assert any(p == must for _, p in keyed), must
    s = keyed_server
    with httpx.Client(base_url=s.base_url, timeout=30) as bare:
        assert bare.get("/health").status_code == 200          # no key needed
        assert bare.get("/metrics").status_code == 200
        for method, path in keyed:
            url = path.replace("{", "").replace("}", "")       # a path parameter: any value
            body = {} if method in ("POST", "PUT", "PATCH") else None
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekrit"}):
                r = bare.request(method, url, json=body, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
                err = r.json()["error"]
                assert err["type"] == "authentication_error" and "API key" in err["message"], (method, path)
                if path.startswith("/v1/messages"):     # Anthropic's error shape: no code
                    assert r.json()["type"] == "error", (method, path)
                else:
                    assert err["code"] == "invalid_api_key", (method, path)
            # with the key the same request gets past the check (an empty body is then a 400, not a 401)
            r = bare.request(method, url, json=body, headers={"Authorization": "Bearer sekrit"})
            assert r.status_code != 401, (method, path)


def test_auth_with_clients(keyed_server):
    s = keyed_server
    with s.client() as c:
        assert c.post("/tokenize", json={"content": "hi"}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=s.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert [m.id for m in s.openai().models.list().data] == ["llama"]


def test_sigint_exits_zero(server_factory, tiny_models):
    # (SIGTERM with a request running: tests/server/test_lifecycle.py)
    s = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "1")
    assert s.stop(signal.SIGINT) == 0, s.log()


def test_unloadable_model_exits_nonzero(tmp_path, server_factory):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(RuntimeError, match="exited with 1"):
        server_factory(str(bad))
