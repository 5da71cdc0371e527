"""/v1/messages and /v1/messages/count_tokens through the real server and the official anthropic
client, on SmolLM2-135M behind --api-key: Anthropic's shapes (content blocks, stop_reason,
stop_sequence, usage), its stream events, tool_use / tool_result, x-api-key and Bearer, errors in
Anthropic's shape; then what holds across the three chat-shaped APIs: a seeded request gives the same
text through /v1/chat/completions, /v1/responses and /v1/messages, alone or under load, and thinking
(`<think>...</think>`) comes apart from the answer in each family's own field, streamed or not."""
from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from .sse_reader import sse_lines  # noqa: E402

pytestmark = pytest.mark.slow

KEY = "sk-test-messages"
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                            "required": ["city"]}}
GREEDY = {"extra_body": {"temperature": 0.0}}      # the current client has no temperature argument
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(server_factory, smollm2_path):
    s = server_factory(smollm2_path, "--parallel", "8", "--n-ctx", "512", "--alias", "smol", "--max-body-mb", "1",
                       api_key=KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=300.0)


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_message_shape_usage_and_count_tokens(client, server):
    m = client.messages.create(model="smol", max_tokens=16, messages=QUESTION, system="Be brief.", **GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.model == "smol" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and text_of(m)
    chat = server.openai().chat.completions.create(
        model="smol", max_tokens=16, temperature=0.0,
        messages=[{"role": "system", "content": "Be brief."}, *QUESTION])
    assert text_of(m) == chat.choices[0].message.content
    assert m.usage.output_tokens == chat.usage.completion_tokens
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert m.stop_reason == ("max_tokens" if m.usage.output_tokens == 16 else "end_turn")
    counted = client.messages.count_tokens(model="smol", messages=QUESTION, system="Be brief.")
    assert counted.input_tokens == chat.usage.prompt_tokens


def test_stop_sequences(client):
    base = text_of(client.messages.create(model="smol", max_tokens=24, messages=QUESTION, **GREEDY))
    word = base.split()[2]
    m = client.messages.create(model="smol", max_tokens=24, messages=QUESTION, stop_sequences=["zzz", word], **GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == word
    assert text_of(m) == base[:base.index(word)].strip() or text_of(m) == base[:base.index(word)]


def test_stream_events_and_final_message(client):
    kw = dict(model="smol", max_tokens=20, messages=QUESTION, **GREEDY)
    whole = client.messages.create(**kw)
    kinds, pieces = [], []
    with client.messages.stream(**kw) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta":
                pieces.append(event.delta.text)
        final = stream.get_final_message()
    raw = [k for k in kinds if k not in ("text",)]          # "text" events are the helper's own
    assert raw[0] == "message_start" and raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(pieces) == text_of(final) == text_of(whole)
    assert (final.stop_reason, final.usage.output_tokens) == (whole.stop_reason, whole.usage.output_tokens)


def test_tool_use_and_tool_result(client):
    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    m = client.messages.create(model="smol", max_tokens=48, messages=ask, tools=[WEATHER],
                               tool_choice={"type": "any"}, **GREEDY)
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"][:1]
    assert use.name == "get_weather" and use.id
    jsonschema.validate(use.input, WEATHER["input_schema"])
    with client.messages.stream(model="smol", max_tokens=48, messages=ask, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}, **GREEDY) as stream:
        streamed = stream.get_final_message()
    (s_use,) = [b for b in streamed.content if b.type == "tool_use"][:1]
    assert (s_use.name, s_use.input) == (use.name, use.input) and streamed.stop_reason == "tool_use"
    follow = ask + [{"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name,
                                                       "input": use.input}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                  "content": "21 degrees and sunny"}]}]
    answer = client.messages.create(model="smol", max_tokens=12, messages=follow, tools=[WEATHER],
                                    tool_choice={"type": "none"}, **GREEDY)
    n_input = answer.usage.input_tokens + answer.usage.cache_read_input_tokens
    assert text_of(answer) and answer.stop_reason in ("end_turn", "max_tokens")
    assert n_input == client.messages.count_tokens(model="smol", messages=follow, tools=[WEATHER],
                                                   tool_choice={"type": "none"}).input_tokens
    assert n_input > client.messages.count_tokens(model="smol", messages=ask).input_tokens + 10


def test_keys_and_anthropic_error_shapes(server, client):
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
            model="smol", max_tokens=4, messages=QUESTION)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    with server.client() as http:      # Bearer works on /v1/messages too
        r = http.post("/v1/messages", json={"model": "smol", "max_tokens": 2, "messages": QUESTION})
        assert r.status_code == 200 and r.json()["type"] == "message"
        r = http.post("/v1/messages", json={"model": "smol", "messages": QUESTION})
        assert r.status_code == 400
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "max_tokens: Field required"}}
        big = json.dumps({"model": "smol", "max_tokens": 1, "messages": [{"role": "user", "content": "x" * (2 << 20)}]})
        r = http.post("/v1/messages", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
        r = http.post("/v1/messages", json={"model": "smol", "max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "image", "source": {}}]}]})
        assert r.status_code == 400 and r.json()["type"] == "error"
    with pytest.raises(anthropic.BadRequestError, match="exceed|n_ctx"):
        client.messages.create(model="smol", max_tokens=4000, messages=QUESTION)


# ---- across the three APIs ----

PROBE_SYSTEM, PROBE_USER, PROBE_SEED, PROBE_TOKENS = "You are a poet.", "Write about the sea.", 1234, 20


def via_chat(server) -> str:
    r = server.openai().chat.completions.create(
        model="smol", max_tokens=PROBE_TOKENS, temperature=0.9, seed=PROBE_SEED,
        messages=[{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}])
    return r.choices[0].message.content


def via_responses(server) -> str:
    r = server.openai().responses.create(model="smol", instructions=PROBE_SYSTEM, input=PROBE_USER, temperature=0.9,
                                         max_output_tokens=PROBE_TOKENS, extra_body={"seed": PROBE_SEED})
    return r.output_text


def via_messages(server) -> str:
    client = anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=300.0)
    m = client.messages.create(model="smol", system=PROBE_SYSTEM, max_tokens=PROBE_TOKENS,
                               messages=[{"role": "user", "content": PROBE_USER}],
                               extra_body={"temperature": 0.9, "seed": PROBE_SEED})
    return text_of(m)


def test_seeded_request_gives_the_same_text_through_every_api_alone_and_under_load(server):
    alone = {f.__name__: f(server) for f in (via_chat, via_responses, via_messages)}
    assert len(set(alone.values())) == 1 and alone["via_chat"], alone
    stop = threading.Event()

    def load(i: int) -> None:       # other sequences in the same batches, through every API
        client = server.openai()
        while not stop.is_set():
            client.chat.completions.create(model="smol", max_tokens=16, temperature=1.0,
                                           messages=[{"role": "user", "content": f"Count to {i + 3}."}])
    with ThreadPoolExecutor(7) as pool:
        loaders = [pool.submit(load, i) for i in range(4)]
        probes = [pool.submit(f, server) for f in (via_chat, via_responses, via_messages)]
        under_load = {p.result() for p in probes}
        stop.set()
        for f in loaders:
            f.result()
    assert under_load == set(alone.values())


THINK = 'root ::= "<think>\\nI should greet them.\\n</think>\\n\\nHello!"'
FORCED = {"grammar": THINK, "temperature": 0.0}     # greedy: the same tokens spell it every time


def test_thinking_comes_apart_in_each_api(server, client):
    ox = server.openai()
    chat = ox.chat.completions.create(model="smol", max_tokens=60, messages=QUESTION, extra_body=FORCED)
    msg = chat.choices[0].message
    assert (msg.reasoning_content, msg.content) == ("I should greet them.", "Hello!")
    kept = ox.chat.completions.create(model="smol", max_tokens=60, messages=QUESTION,
                                      extra_body={**FORCED, "reasoning_format": "none"})
    assert kept.choices[0].message.content.startswith("<think>")
    reasoning, content = [], []
    for chunk in ox.chat.completions.create(model="smol", max_tokens=60, messages=QUESTION, stream=True,
                                            extra_body=FORCED):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None:
            reasoning.append(getattr(delta, "reasoning_content", None) or "")
            content.append(delta.content or "")
    assert ("".join(reasoning), "".join(content)) == ("I should greet them.", "Hello!")

    r = ox.responses.create(model="smol", input="Hi", max_output_tokens=60, extra_body=FORCED)
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.output_text == "Hello!"
    assert r.output[0].content[0].text == "I should greet them."
    kinds = [e.type for e in ox.responses.create(model="smol", input="Hi", max_output_tokens=60, stream=True,
                                                 extra_body=FORCED)]
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")

    m = client.messages.create(model="smol", max_tokens=60, messages=QUESTION, extra_body=FORCED)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (m.content[0].thinking, m.content[1].text) == ("I should greet them.", "Hello!")
    with client.messages.stream(model="smol", max_tokens=60, messages=QUESTION,
                                extra_body=FORCED) as stream:
        final = stream.get_final_message()
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == \
        [("thinking", "I should greet them."), ("text", "Hello!")]


def metric(server, name: str, **labels) -> float:
    with server.client() as c:
        text = c.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(?:\{([^}]*)\})? (\S+)$", line)
        if m and m.group(1) == name and all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            total += float(m.group(3))
    return total


def wait_idle(server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while metric(server, "oxillama:num_requests_running") or metric(server, "oxillama:num_requests_waiting"):
        assert time.monotonic() < deadline, "the server still has requests running"
        time.sleep(0.1)


@pytest.mark.parametrize("path, body", [
    ("/v1/responses", {"input": "Write a very long essay.", "max_output_tokens": 400}),
    ("/v1/messages", {"messages": [{"role": "user", "content": "Write a very long essay."}], "max_tokens": 400}),
])
@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_cancels(server, path, body, stream):
    import httpx
    wait_idle(server)
    cancelled = metric(server, "oxillama:request_success_total", finished_reason="cancelled")
    body = {"model": "smol", **body, "stream": stream, "ignore_eos": True}
    if stream:
        with server.client() as c, c.stream("POST", path, json=body) as r:
            got = [line for line, _ in zip(sse_lines(r), range(12))]
            assert any(line.startswith("data: ") for line in got)
    else:
        # the client gives up long before 400 tokens are done: SmolLM2 decodes one stream at ~300 tokens/s
        # here, so a 1.5 s wait let a quiet machine finish the whole answer (no timeout, nothing cancelled)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.base_url + path, json=body, headers=server.headers(), timeout=0.4)
    # the connection is closed: the request is cancelled at the next step, long before its 400 tokens
    wait_idle(server, timeout=20)
    assert metric(server, "oxillama:request_success_total", finished_reason="cancelled") == cancelled + 1
