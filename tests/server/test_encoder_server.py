"""An embedding model (a tiny bert) behind the real server: POST /v1/embeddings pools as the GGUF declares
(llama.cpp's server does the same), and text generation is refused with a 400 naming the reason."""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

BERT = Path(__file__).parents[1] / "models" / "data" / "encoders" / "bert.gguf"


@pytest.fixture(scope="module")
def bert_server(server_factory):
    s = server_factory(str(BERT), "--parallel", "2")
    yield s
    s.stop()


def test_embeddings_are_the_declared_pooling(bert_server):
    from oxillama import InferenceEngine
    texts = ["Hello world!", "The quick brown fox jumps over the lazy dog."]
    with bert_server.client() as c:
        r = c.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"})
        n = sum(len(c.post("/tokenize", json={"content": t, "add_special": True}).json()["tokens"]) for t in texts)
    assert r.status_code == 200, r.text
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]])
    with InferenceEngine.from_gguf(str(BERT)) as e:
        want = e.embed_batch(texts)                     # pooling_type 1: mean, L2-normalised
        mean = e.embed_batch(texts, pooling="mean")
    assert got.shape == (2, 64) and np.array_equal(got, want) and np.array_equal(want, mean)
    assert r.json()["usage"]["prompt_tokens"] == n      # [CLS] and [SEP] counted


def test_generation_is_refused(bert_server):
    with bert_server.client() as c:
        r = c.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "encoder" in r.text
