"""LoRA adapters over HTTP (`oxillama serve --lora NAME=PATH`), with SmolLM2-135M and two adapters on
every projection: a request picks adapters by `"model": "<model>:NAME"` or by `"lora": [...]` in the
body, its text equals `generate(lora=...)` on the engine, requests with different adapters share
batches without changing each other's text, /v1/models lists the adapters, and mistakes are 4xx."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from oxillama.gguf import GGUFFile

from .conftest import ServerProcess, start_server

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lora"))
from lora_fixture import write_formula_adapter  # noqa: E402

PROMPT = "The three primary colours are"
ALPHAS = {"style": 16.0, "loud": 40.0}


@pytest.fixture(scope="module")
def adapters(smollm2_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapters")
    with GGUFFile(smollm2_path) as g:
        return {name: str(write_formula_adapter(g, folder / f"{name}.gguf", alpha=alpha))
                for name, alpha in ALPHAS.items()}


@pytest.fixture(scope="module")
def server(smollm2_path, adapters):
    args = [a for name, path in adapters.items() for a in ("--lora", f"{name}={path}")]
    server = start_server(smollm2_path, "--parallel", "4", "--n-ctx", "256", "--alias", "smol", *args)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def solo(smollm2_path, adapters):
    """text of PROMPT (greedy, 12 tokens) on the engine alone, per adapter setting"""
    from oxillama import InferenceEngine, LoraAdapter
    loaded = {name: LoraAdapter.from_gguf(path) for name, path in adapters.items()}
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=256) as engine:
        def run(*pairs):
            engine.reset()
            return engine.generate(PROMPT, max_tokens=12, temperature=0,
                                   lora=[(loaded[n], s) for n, s in pairs] or None)
        return {(): run(), ("style",): run(("style", 1.0)), ("loud",): run(("loud", 1.0)),
                ("style", 0.5): run(("style", 0.5)), ("style", "loud"): run(("style", 1.0), ("loud", 1.0))}


def complete(server, model="smol", **extra):
    with server.client() as http:
        r = http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 12,
                                               "temperature": 0, **extra})
    return r


def text(r) -> str:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_models_lists_the_adapters(server, adapters):
    ids = [m.id for m in server.openai().models.list().data]
    assert ids == ["smol", "smol:style", "smol:loud"]
    with server.client() as http:
        cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
        listing = http.get("/lora-adapters").json()
    assert cards["smol:loud"]["parent"] == "smol" and cards["smol:loud"]["root"] == adapters["loud"]
    assert [(a["id"], a["name"], a["path"]) for a in listing] == [(0, "style", adapters["style"]),
                                                                 (1, "loud", adapters["loud"])]


def test_an_adapter_by_model_name_or_body_equals_the_engine(server, solo):
    assert solo[("style",)] != solo[()] and solo[("loud",)] != solo[("style",)]   # the adapters matter
    assert text(complete(server)) == solo[()]
    assert text(complete(server, model="smol:style")) == solo[("style",)]
    assert text(complete(server, lora=[{"name": "style"}])) == solo[("style",)]
    assert text(complete(server, lora=[{"id": 1, "scale": 1.0}])) == solo[("loud",)]
    assert text(complete(server, lora=[{"name": "style", "scale": 0.5}])) == solo[("style", 0.5)]
    assert text(complete(server, model="smol:style", lora=[{"name": "loud"}])) == solo[("style", "loud")]
    chat = server.openai().chat.completions.create(model="smol:loud", max_tokens=4, temperature=0,
                                                   messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content is not None


def test_different_adapters_in_one_batch_equal_their_solo_runs(server, solo):
    asks = [({}, ()), ({"model": "smol:style"}, ("style",)), ({"lora": [{"name": "loud"}]}, ("loud",)),
            ({"lora": [{"name": "style", "scale": 0.5}]}, ("style", 0.5))] * 2
    with ThreadPoolExecutor(len(asks)) as pool:
        texts = list(pool.map(lambda a: text(complete(server, **a[0])), asks))
    assert texts == [solo[key] for _, key in asks]


@pytest.mark.parametrize("extra, status, words", [
    ({"model": "smol:nope"}, 404, "nope"),
    ({"lora": [{"name": "nope"}]}, 404, "nope"),
    ({"lora": [{"id": 7}]}, 400, "id 7"),
    ({"lora": [{"name": "style", "id": 0}]}, 400, "one of them"),
    ({"lora": [{"name": "style"}, {"id": 0}]}, 400, "twice"),
    ({"lora": [{"name": "style", "scale": 1000.0}]}, 400, "scale"),
    ({"lora": "style"}, 400, "lora"),
])
def test_bad_adapter_requests_are_4xx(server, extra, status, words):
    r = complete(server, **extra)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]


def test_a_bad_adapter_file_stops_the_server_at_startup(smollm2_path, tiny_models):
    not_an_adapter = str(tiny_models / "llama.gguf")
    server = ServerProcess(smollm2_path, "--lora", f"bad={not_an_adapter}")
    try:
        assert server.proc.wait(120) != 0
    finally:
        server.stop()
    assert "--lora bad=" in server.log()


def lora_requests(server, name) -> float:
    with server.client() as http:
        lines = http.get("/metrics").text.splitlines()
    for line in lines:
        if line.startswith("oxillama:lora_requests_total{") and f'lora_name="{name}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_requests_per_adapter(server):
    before = {name: lora_requests(server, name) for name in ALPHAS}
    text(complete(server, model="smol:loud"))
    text(complete(server, lora=[{"name": "loud", "scale": 0.5}, {"name": "style"}]))
    text(complete(server))
    assert lora_requests(server, "loud") == before["loud"] + 2
    assert lora_requests(server, "style") == before["style"] + 1


def test_a_served_name_with_a_colon_still_picks_adapters():
    """`--alias org:model` (as ollama-style names are): "org:model:NAME" picks adapter NAME, and the
    base name alone picks none (no socket: convert.request_loras on a state)."""
    from oxillama.server import convert
    from oxillama.server.errors import APIError
    from oxillama.server.protocol.completions import CompletionRequest
    from oxillama.server.state import ServerConfig, ServerState
    state = ServerState(ServerConfig(model="base.gguf", alias="org:model"))
    state.default.loras = {"style": "the adapter"}     # the default model's adapters
    def chosen(model):
        return convert.request_loras(CompletionRequest(model=model, prompt="x"), state)
    assert chosen("org:model:style") == [("the adapter", 1.0)]
    assert chosen("org:model") == [] and chosen("style") == [("the adapter", 1.0)]
    with pytest.raises(APIError, match="nope"):
        chosen("org:model:nope")
