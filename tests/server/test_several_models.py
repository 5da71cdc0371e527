"""Several models in one server (`oxillama serve -m A -m B --alias ... --max-loaded N`), with the official
openai client on the two real models: the request's "model" picks the model, an unknown one is a 404 in
the API's own error shape naming the served ones, /v1/models lists all with their state, the least
recently used idle model is unloaded beyond --max-loaded, and /metrics labels every series by model."""
import asyncio

import pytest

openai = pytest.importorskip("openai")

from oxillama.runtime import InferenceEngine  # noqa: E402

PROMPT = "The three primary colours are"
N_TOKENS = 8


@pytest.fixture(scope="module")
def server(smollm2_path, gemma3_path, server_factory):
    s = server_factory(smollm2_path, "-m", gemma3_path, "--alias", "smol", "--alias", "gemma",
                       "--max-loaded", "1", "--parallel", "2", "--n-ctx", "256")
    yield s
    s.stop()


def _solo(path, prompt):
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=1) as engine:
        return str(engine.generate(prompt, max_tokens=N_TOKENS, temperature=0))


def _states(server) -> dict:
    with server.client() as c:
        return {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"]}


def _metric_lines(server, name: str) -> dict:
    with server.client() as c:
        text = c.get("/metrics").text
    return {line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(name + "{")}


def test_the_model_field_picks_the_model(server, smollm2_path, gemma3_path):
    client = server.openai()
    models = client.models.list().data
    assert [m.id for m in models] == ["smol", "gemma"]
    assert _states(server) == {"smol": "loaded", "gemma": "unloaded"}
    got = {}
    for name in ("gemma", "smol"):     # gemma loads on first use; --max-loaded 1 then unloads smol
        r = client.completions.create(model=name, prompt=PROMPT, max_tokens=N_TOKENS, temperature=0)
        assert r.model == name
        got[name] = r.choices[0].text
        assert _states(server)[name] == "loaded"
        assert list(_states(server).values()).count("loaded") == 1
    assert got == {"smol": _solo(smollm2_path, PROMPT), "gemma": _solo(gemma3_path, PROMPT)}
    # every series is labelled by model; counters of an unloaded model stay
    loaded = _metric_lines(server, "oxillama:model_loaded")
    assert loaded == {'model_name="smol"': 1.0, 'model_name="gemma"': 0.0}
    generated = _metric_lines(server, "oxillama:generation_tokens_total")
    assert generated['model_name="gemma"'] >= N_TOKENS and generated['model_name="smol"'] >= N_TOKENS
    ttft = _metric_lines(server, "oxillama:time_to_first_token_seconds_count")
    assert ttft['model_name="gemma"'] >= 1 and ttft['model_name="smol"'] >= 1


def test_an_unknown_model_is_a_404_naming_the_served_ones(server):
    with pytest.raises(openai.NotFoundError) as e:
        server.openai().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=2)
    assert e.value.body["code"] == "model_not_found" and "gpt-4o" in e.value.message
    assert "'smol'" in e.value.message and "'gemma'" in e.value.message
    with server.client() as c:
        r = c.post("/v1/messages", json={"model": "claude-x", "max_tokens": 2,
                                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "'gemma'" in body["error"]["message"]


def test_requests_for_both_models_run_side_by_side(smollm2_path, gemma3_path, server_factory):
    """Without --max-loaded both stay loaded; concurrent streams for each finish with each model's text."""
    s = server_factory(smollm2_path, "-m", gemma3_path, "--alias", "smol", "--alias", "gemma", "--parallel", "2",
                       "--n-ctx", "256")
    try:
        client = s.async_openai()

        async def one(name):
            stream = await client.completions.create(model=name, prompt=PROMPT, max_tokens=N_TOKENS, temperature=0,
                                                     stream=True)
            return "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])

        async def both():
            return await asyncio.gather(*(one(n) for n in ("smol", "gemma", "smol", "gemma")))

        texts = asyncio.run(both())
        assert texts[0] == texts[2] == _solo(smollm2_path, PROMPT)
        assert texts[1] == texts[3] == _solo(gemma3_path, PROMPT)
        assert _states(s) == {"smol": "loaded", "gemma": "loaded"}
    finally:
        s.stop()


@pytest.mark.parametrize("args,message", [
    (["--alias", "a", "--alias", "a", "-m", "{smol}", "-m", "{gemma}"], "two models are served as 'a'"),
    (["--alias", "a", "--alias", "b", "-m", "{smol}"], "2 --alias for 1 -m"),
    (["-m", "{smol}", "-m", "{smol}"], "give each its own --alias"),
    (["-m", "{smol}", "--max-loaded", "0"], "--max-loaded must be >= 1"),
    (["-m", "{smol}", "--models-dir", "/no/such/dir"], "is not a directory"),
])
def test_serve_refuses_ambiguous_model_sets(args, message, smollm2_path, gemma3_path, capsys):
    """checked before any model loads or a port opens"""
    from oxillama.cli import main
    args = [a.format(smol=smollm2_path, gemma=gemma3_path) for a in args]
    assert main(["serve", *args]) == 1
    assert message in capsys.readouterr().err


def test_a_models_file_names_models_their_aliases_and_contexts(smollm2_path, gemma3_path, server_factory, tmp_path):
    """--models-file: one model a line with its name, file (relative to the models file), aliases and n_ctx;
    a request by alias reaches the model, /v1/models lists the aliases and each model's own context."""
    import shutil
    shutil.copy(gemma3_path, tmp_path / "gemma3.gguf")
    models = tmp_path / "models.txt"
    models.write_text("# name  model  options\n"
                      "\n"
                      "gemma gemma3.gguf aliases=g,gem n_ctx=128   # relative to this file\n")
    s = server_factory(smollm2_path, "--alias", "smol", "--models-file", str(models), "--parallel", "1",
                       "--n-ctx", "256")
    try:
        client = s.openai()
        cards = {m.id: m for m in client.models.list().data}
        assert list(cards) == ["smol", "gemma"]
        assert cards["gemma"].aliases == ["g", "gem"] and cards["smol"].aliases is None
        assert cards["smol"].max_model_len == 256 and cards["gemma"].max_model_len == 128
        r = client.completions.create(model="gem", prompt=PROMPT, max_tokens=N_TOKENS, temperature=0)
        assert r.choices[0].text == _solo(gemma3_path, PROMPT)
        r = client.completions.create(model="smol", prompt=PROMPT, max_tokens=N_TOKENS, temperature=0)
        assert r.choices[0].text == _solo(smollm2_path, PROMPT)
        with pytest.raises(openai.BadRequestError):     # gemma's own 128-token context, not the server's 256
            client.completions.create(model="g", prompt="word " * 200, max_tokens=4)
        client.completions.create(model="smol", prompt="word " * 200, max_tokens=4)
    finally:
        s.stop()


@pytest.mark.parametrize("text,message", [
    ("smol\n", "line 1: expected 'NAME MODEL"),
    ("# just a comment\n", "lists no model"),
    ("a {smol} n_ctx=-3\n", "line 1: n_ctx= takes a whole number >= 0, got '-3'"),
    ("a {smol} flavour=mint\n", "unknown option 'flavour=mint'"),
    ("a:b {smol}\n", "cannot hold ':'"),
    ("a {smol}\nb {gemma} aliases=a\n", "two models are served as 'a'"),
    ("a missing.gguf\n", "model 'a': '"),
])
def test_a_bad_models_file_is_refused_naming_the_line(text, message, smollm2_path, gemma3_path, tmp_path, capsys):
    from oxillama.cli import main
    models = tmp_path / "models.txt"
    models.write_text(text.format(smol=smollm2_path, gemma=gemma3_path))
    assert main(["serve", "--models-file", str(models)]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert str(models) in err or "two models" in message
