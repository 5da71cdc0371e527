"""`oxillama serve --cache-ram`: a conversation's second turn starts from the first turn's K/V (kept after
it finished), reports them as cached tokens in each API's usage, counts hits in /metrics, and says
exactly what a server without the cache says."""
import pytest

SYSTEM = ("You are a careful assistant for a small bakery. Answer in one short sentence. The bakery opens at "
          "seven, closes at six, sells rye, spelt and white loaves, and takes orders by phone.")
TURN1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "When do you open?"}]
SAMPLING = dict(max_tokens=12, temperature=0.7, seed=21)


@pytest.fixture(scope="module")
def servers(smollm2_path, server_factory):
    """(with the default prompt cache, with --cache-ram 0)."""
    common = ("--parallel", "2", "--n-ctx", "512", "--alias", "smol")
    cached = server_factory(smollm2_path, *common)
    try:
        cold = server_factory(smollm2_path, *common, "--cache-ram", "0")
    except BaseException:
        cached.stop()
        raise
    yield cached, cold
    cached.stop()
    cold.stop()


def _metric(server, name: str) -> float:
    with server.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_second_turn_is_served_from_the_cache_and_says_the_same(servers):
    cached, cold = servers
    client = cached.openai()
    first = client.chat.completions.create(model="smol", messages=TURN1, **SAMPLING)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    turn2 = TURN1 + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And do you sell spelt?"}]
    second = client.chat.completions.create(model="smol", messages=turn2, **SAMPLING)
    cached_tokens = second.usage.prompt_tokens_details.cached_tokens
    # at least the system prompt and the first question were not run again
    assert first.usage.prompt_tokens - 2 <= cached_tokens < second.usage.prompt_tokens
    want = cold.openai().chat.completions.create(model="smol", messages=turn2, **SAMPLING)
    assert second.choices[0].message.content == want.choices[0].message.content
    assert want.usage.prompt_tokens_details.cached_tokens == 0
    assert _metric(cached, "oxillama:prompt_cache_hits_total") >= 1
    assert _metric(cached, "oxillama:prompt_cache_hit_tokens_total") >= cached_tokens
    assert 0 < _metric(cached, "oxillama:prompt_cache_bytes") <= _metric(cached, "oxillama:prompt_cache_max_bytes")
    with cold.client() as c:
        assert "oxillama:prompt_cache_hits_total" not in c.get("/metrics").text


def test_every_api_reports_the_cached_tokens(servers):
    """Responses: input_tokens_details.cached_tokens; Messages: cache_read_input_tokens (apart from
    input_tokens, as Anthropic counts)."""
    cached, _ = servers
    question = "What breads do you sell?"
    with cached.client() as c:
        body = {"model": "smol", "instructions": SYSTEM, "input": question, "max_output_tokens": 8}
        r1 = c.post("/v1/responses", json=body).json()
        r2 = c.post("/v1/responses", json=body).json()
        assert r2["usage"]["input_tokens_details"]["cached_tokens"] >= r1["usage"]["input_tokens"] - 1
        body = {"model": "smol", "system": SYSTEM, "max_tokens": 8, "messages": [{"role": "user", "content": question}]}
        c.post("/v1/messages", json=body).raise_for_status()
        m = c.post("/v1/messages", json=body).json()
        u = m["usage"]
        assert u["cache_read_input_tokens"] > 0 and u["input_tokens"] >= 1
