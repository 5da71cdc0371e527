"""/v1/chat/completions and /v1/completions through the real server and the official openai client:
shapes, streaming, usage, sampling options, structured output, errors, disconnects, batch invariance."""
from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from .sse_reader import sse_data, sse_lines  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
LONG = 400          # max_tokens of requests meant to be cut off (by a disconnect or a full queue)


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    from oxillama.tokenizer import Tokenizer
    return Tokenizer.from_gguf(smollm2_path)


def prompt_len(tokenizer, text: str) -> int:
    """Tokens of a prompt as the engine encodes it (BOS added, specials parsed, no doubled BOS)."""
    ids = tokenizer.encode(text, add_special=True, parse_special=True)
    if len(ids) > 1 and ids[0] == ids[1] == tokenizer.bos_id:
        ids = ids[1:]
    return len(ids)


def metric(server, name: str, **labels) -> float:
    with server.client() as c:
        text = c.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(?:\{([^}]*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def wait_idle(server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (metric(server, "oxillama:num_requests_running") == 0
                and metric(server, "oxillama:num_requests_waiting") == 0):
            return
        time.sleep(0.1)
    raise AssertionError("the server still has requests running")


def test_chat_completion_shape_and_exact_usage(server, tokenizer):
    r = server.openai().chat.completions.create(model="smol", messages=QUESTION, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "smol"
    (choice,) = r.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    assert r.usage.prompt_tokens == prompt_len(tokenizer, prompt)
    if choice.finish_reason == "length":
        assert r.usage.completion_tokens == 8
    else:   # the end-of-generation token that stopped it is not counted (as llama.cpp's server)
        assert 0 <= r.usage.completion_tokens < 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_shape_usage_and_echo(server, tokenizer):
    prompt = "The capital of France is"
    r = server.openai().completions.create(model="smol", prompt=prompt, max_tokens=6, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.usage.prompt_tokens == prompt_len(tokenizer, prompt)
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 6
    else:
        assert 1 <= r.usage.completion_tokens <= 6
    echoed = server.openai().completions.create(model="smol", prompt=prompt, max_tokens=6, temperature=0, echo=True)
    assert echoed.choices[0].text == prompt + r.choices[0].text
    # token ids as the prompt give the same greedy answer
    ids = tokenizer.encode(prompt, add_special=True)
    by_ids = server.openai().completions.create(model="smol", prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == r.choices[0].text


def test_several_prompts_with_n(server, tokenizer):
    prompts = ["The sky is", "My favourite food is"]
    r = server.openai().completions.create(model="smol", prompt=prompts, n=2, max_tokens=4, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    # choices 2i and 2i+1 belong to prompt i; greedy, so both are that prompt's greedy answer
    for i, p in enumerate(prompts):
        alone = server.openai().completions.create(model="smol", prompt=p, max_tokens=4, temperature=0)
        assert r.choices[2 * i].text == r.choices[2 * i + 1].text == alone.choices[0].text
    assert r.usage.prompt_tokens == sum(prompt_len(tokenizer, p) for p in prompts)
    if all(c.finish_reason == "length" for c in r.choices):
        assert r.usage.completion_tokens == 4 * 4
    else:
        assert 4 <= r.usage.completion_tokens <= 4 * 4


def test_chat_stream_matches_non_stream(server):
    kw = dict(model="smol", messages=QUESTION, max_tokens=12, temperature=0.7, seed=11)
    whole = server.openai().chat.completions.create(**kw)
    chunks = list(server.openai().chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                           **kw))
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage == whole.usage.model_copy(
        update={"prompt_tokens_details": usage_chunk.usage.prompt_tokens_details})
    assert all(c.usage is None for c in chunks[:-1])


def test_raw_sse_framing(server):
    body = {"messages": QUESTION, "max_tokens": 4, "stream": True}
    with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data = sse_data(r)
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    assert events and all("usage" not in e or e["usage"] is None for e in events)   # not asked for


# characters that end a line for Python's str.splitlines (and so for httpx's iter_lines) but not for SSE
LINE_SEPARATORS = "a\u2028b\u0085c\u2029d"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_text_with_unicode_line_separators_streams_intact(server, path):
    """A grammar makes the model write U+2028, U+0085 and U+2029 (each a token piece of its own): every
    chunk is one `data:` line of JSON, and the pieces join to the text, read raw and by the openai client."""
    grammar = "root ::= " + json.dumps(LINE_SEPARATORS, ensure_ascii=False)
    if path == "/v1/completions":
        body = {"prompt": "Hello", "max_tokens": 16, "temperature": 0, "grammar": grammar, "stream": True}
    else:
        body = {"messages": QUESTION, "max_tokens": 16, "temperature": 0, "grammar": grammar, "stream": True}
    with server.client() as c, c.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        data = sse_data(r)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    texts = [ch["choices"][0]["text"] if path == "/v1/completions" else ch["choices"][0]["delta"]["content"] or ""
             for ch in chunks]
    assert "".join(texts) == LINE_SEPARATORS and len([t for t in texts if t]) > 1
    client = server.openai()
    if path == "/v1/completions":
        streamed = client.completions.create(model="smol", prompt="Hello", max_tokens=16, temperature=0, stream=True,
                                             extra_body={"grammar": grammar})
        assert "".join(ch.choices[0].text for ch in streamed) == LINE_SEPARATORS
    else:
        streamed = client.chat.completions.create(model="smol", messages=QUESTION, max_tokens=16, temperature=0,
                                                  stream=True, extra_body={"grammar": grammar})
        assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == LINE_SEPARATORS


def test_completions_stream(server):
    kw = dict(model="smol", prompt="Once upon a time", max_tokens=10, temperature=0)
    whole = server.openai().completions.create(**kw)
    chunks = list(server.openai().completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_n_choices_with_seed(server):
    kw = dict(model="smol", messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=12,
              temperature=1.0, seed=5)
    r = server.openai().chat.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    single = server.openai().chat.completions.create(**kw)
    assert r.choices[0].message.content == single.choices[0].message.content   # choice 0 is the seeded request
    assert len({c.message.content for c in r.choices}) > 1
    assert r.usage.prompt_tokens == single.usage.prompt_tokens                  # the prompt counted once
    streamed = list(server.openai().chat.completions.create(n=3, stream=True, **kw))
    for i, choice in enumerate(r.choices):
        assert "".join(c.choices[0].delta.content or "" for c in streamed
                       if c.choices and c.choices[0].index == i) == choice.message.content


def test_stop_strings_and_max_completion_tokens(server):
    r = server.openai().completions.create(model="smol", prompt="1, 2, 3, 4,", max_tokens=30, temperature=0,
                                           stop=[" 8"])
    text = r.choices[0].text
    assert " 8" not in text
    if r.choices[0].finish_reason == "stop":
        assert r.usage.completion_tokens < 30
    chat = server.openai().chat.completions.create(model="smol", messages=QUESTION, max_completion_tokens=3,
                                                   temperature=0)
    assert chat.usage.completion_tokens <= 3


def test_logit_bias_bans_the_greedy_token(server, tokenizer):
    kw = dict(model="smol", prompt="The capital of France is", max_tokens=1, temperature=0)
    first = server.openai().completions.create(logprobs=1, **kw)
    banned = tokenizer.encode(first.choices[0].text, add_special=False)[0]
    other = server.openai().completions.create(logit_bias={str(banned): -100}, **kw)
    assert other.choices[0].text != first.choices[0].text


def test_chat_logprobs(server):
    r = server.openai().chat.completions.create(model="smol", messages=QUESTION, max_tokens=6, temperature=0,
                                                logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        lps = [t.logprob for t in entry.top_logprobs]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        assert entry.token == entry.top_logprobs[0].token    # greedy: the chosen token is the most likely
        assert entry.logprob == pytest.approx(lps[0])
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token


def test_completion_logprobs(server):
    r = server.openai().completions.create(model="smol", prompt="Hello, my name is", max_tokens=5,
                                           temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)


def test_streamed_chat_logprobs_come_with_their_chunks(server):
    """Each streamed chunk carries the logprobs of the tokens behind its text (as OpenAI streams them),
    not all of them at the end; joined, they are the non-streamed response's."""
    kw = dict(model="smol", messages=QUESTION, max_tokens=12, temperature=0, logprobs=True, top_logprobs=2)
    whole = server.openai().chat.completions.create(**kw).choices[0].logprobs.content
    entries, text, with_logprobs = [], "", 0
    for ch in server.openai().chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        c = ch.choices[0]
        if c.logprobs and c.logprobs.content:
            with_logprobs += 1
            entries += c.logprobs.content
        text += c.delta.content or ""
        # the text so far is what the tokens so far spell (some of theirs may still be held back)
        assert b"".join(bytes(e.bytes) for e in entries).startswith(text.encode())
    assert with_logprobs >= 2
    assert [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in entries] == \
        [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in whole]


def test_streamed_completion_logprobs_come_with_their_chunks(server):
    kw = dict(model="smol", prompt="Hello, my name is", max_tokens=10, temperature=0, logprobs=2, echo=True)
    whole = server.openai().completions.create(**kw).choices[0].logprobs
    got = {"tokens": [], "token_logprobs": [], "text_offset": []}
    with_logprobs = 0
    for ch in server.openai().completions.create(stream=True, **kw):
        lp = ch.choices[0].logprobs if ch.choices else None
        if lp and lp.tokens:
            with_logprobs += 1
            for key in got:
                got[key] += getattr(lp, key)
    assert with_logprobs >= 2
    assert got == {key: getattr(whole, key) for key in got}
    assert got["text_offset"][0] == len("Hello, my name is")     # offsets run on from the echoed prompt


PERSON = {"type": "object", "properties": {"name": {"type": "string", "enum": ["Alice", "Bob"]},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def test_response_format_json_schema(server):
    r = server.openai().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Describe a person as JSON."}], max_tokens=60,
        temperature=0.8, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


def test_response_format_json_object_and_grammar(server):
    r = server.openai().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Give me a JSON object."}], max_tokens=80,
        temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")
    g = server.openai().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Is Paris in France?"}], max_tokens=5,
        extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert g.choices[0].message.content in ("yes", "no")


@pytest.mark.parametrize("body", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
    {"grammar": "root ::= ("},
    {"logit_bias": {"99999999": 1}},
    {"logit_bias": {"notanid": 1}},
    {"top_logprobs": 2},
    {"max_tokens": 5, "max_completion_tokens": 6},
])
def test_bad_generation_options_are_400(server, body):
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": QUESTION, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_prompt_too_long_is_exceed_context_size(server):
    with server.client() as c:
        r = c.post("/v1/completions", json={"prompt": "hello " * 600, "max_tokens": 4})
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "exceed_context_size_error"
        r = c.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 5000})
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "exceed_context_size_error"
    with pytest.raises(openai.BadRequestError):
        server.openai().completions.create(model="smol", prompt="hello " * 600, max_tokens=4)


def test_async_client_concurrent_streams(server):
    async def one(client, i):
        pieces = []
        stream = await client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": f"Count to {i + 3}."}], max_tokens=8, stream=True,
            temperature=0)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        return "".join(pieces)

    async def main():
        client = server.async_openai()
        return await asyncio.gather(*(one(client, i) for i in range(4)))

    texts = asyncio.run(main())
    assert len(texts) == 4 and all(texts)


def test_seeded_request_same_alone_and_under_load(server):
    kw = dict(model="smol", messages=[{"role": "user", "content": "Write a haiku about the sea."}],
              max_tokens=16, temperature=0.9, seed=1234)
    alone = server.openai().chat.completions.create(**kw).choices[0].message.content

    async def main():
        client = server.async_openai()
        others = [client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": f"Say something about the number {i}."}],
            max_tokens=16, temperature=1.0, seed=i) for i in range(6)]
        results = await asyncio.gather(client.chat.completions.create(**kw), *others)
        return results[0].choices[0].message.content

    assert asyncio.run(main()) == alone


def test_metrics_count_generation(server):
    before = metric(server, "oxillama:generation_tokens_total")
    ttft = metric(server, "oxillama:time_to_first_token_seconds_count")
    r = server.openai().completions.create(model="smol", prompt="Hi", max_tokens=5, temperature=0)
    wait_idle(server)
    assert metric(server, "oxillama:generation_tokens_total") - before == r.usage.completion_tokens
    assert metric(server, "oxillama:time_to_first_token_seconds_count") == ttft + 1
    assert metric(server, "oxillama:e2e_request_latency_seconds_count") >= 1
    assert metric(server, "oxillama:request_success_total", finished_reason=r.choices[0].finish_reason) >= 1
    assert metric(server, "oxillama:prompt_tokens_total") > 0


def test_stream_disconnect_cancels(server):
    wait_idle(server)
    cancelled = metric(server, "oxillama:request_success_total", finished_reason="cancelled")
    body = {"messages": [{"role": "user", "content": "Write a very long essay."}], "max_tokens": LONG,
            "stream": True, "ignore_eos": True}
    with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = sse_lines(r)
        got = [line for line, _ in zip(lines, range(6))]
        assert any(line.startswith("data: ") for line in got)
    # the connection is closed: the request is cancelled at the next step, long before LONG tokens
    wait_idle(server, timeout=20)
    assert metric(server, "oxillama:request_success_total", finished_reason="cancelled") == cancelled + 1


def test_non_stream_disconnect_cancels(server):
    """The client goes away while its (non-streaming) request is decoding: the request is cancelled. Event
    driven: the connection is closed once the server reports the request running and generating."""
    import json
    import socket
    wait_idle(server)
    cancelled = metric(server, "oxillama:request_success_total", finished_reason="cancelled")
    generated = metric(server, "oxillama:generation_tokens_total")
    body = json.dumps({"prompt": "Write a very long essay.", "max_tokens": LONG, "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 60
        while not (metric(server, "oxillama:num_requests_running") == 1
                   and metric(server, "oxillama:generation_tokens_total") > generated):
            assert time.monotonic() < deadline, "the request never started decoding"
            time.sleep(0.01)
    wait_idle(server, timeout=20)
    assert metric(server, "oxillama:request_success_total", finished_reason="cancelled") == cancelled + 1
    # cut off: far fewer than LONG tokens were generated
    assert metric(server, "oxillama:generation_tokens_total") - generated < LONG
