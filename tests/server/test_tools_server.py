"""Tool calling over HTTP with the official openai client, on SmolLM2-135M (its template has no tool
syntax: the generic JSON form). The server's chat endpoint runs the same conversion as
oxillama.Llama (oxillama.compat.openai_shapes): forced calls validate against the tools' schemas,
"none" never calls, streamed tool-call deltas reassemble to the non-streamed message, a tool result
turns into a text answer, and bad tool requests are 400s."""
from __future__ import annotations

import json

import jsonschema
import pytest
from sample_tools import CONVERT, WEATHER  # tests/sample_tools.py

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

TOOLS = [WEATHER, CONVERT]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
PROMPTS = ["What's the weather like in Paris right now?", "How many dollars is 250 euros?",
           "Is it going to be cold in Reykjavik? Use fahrenheit.", "Tell me a joke about cats."]


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


def ask(server, prompt, **kw):
    return server.openai().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": prompt}], max_tokens=96, temperature=0, **kw)


def checked_calls(message) -> list:
    assert message.tool_calls, message
    for call in message.tool_calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return message.tool_calls


@pytest.mark.parametrize("prompt", PROMPTS)
def test_required_gives_calls_valid_against_the_schema(server, prompt):
    r = ask(server, prompt, tools=TOOLS, tool_choice="required")
    (choice,) = r.choices
    checked_calls(choice.message)
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content      # the call's JSON is not content


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_named_function_is_the_one_called(server, prompt):
    r = ask(server, prompt, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "convert_currency"}})
    calls = checked_calls(r.choices[0].message)
    assert {c.function.name for c in calls} == {"convert_currency"}


def test_none_never_calls(server):
    r = ask(server, PROMPTS[0], tools=TOOLS, tool_choice="none")
    (choice,) = r.choices
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)


def test_auto_gives_a_call_or_text(server):
    for prompt in PROMPTS[:2]:
        (choice,) = ask(server, prompt, tools=TOOLS, tool_choice="auto").choices
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                assert call.function.name in SCHEMAS and isinstance(json.loads(call.function.arguments), dict)
        else:
            assert isinstance(choice.message.content, str) and choice.finish_reason in ("stop", "length")


def test_streamed_deltas_reassemble_to_the_message(server):
    kw = dict(tools=TOOLS, tool_choice="required", seed=3)
    whole = ask(server, PROMPTS[1], **kw).choices[0]
    stream = ask(server, PROMPTS[1], stream=True, **kw)
    calls: dict[int, dict] = {}
    content, finish = "", None
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for d in delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = d.id or c["id"]
                if d.function is not None:
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and not content
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls]
    assert all(c["id"] for c in calls.values())


def test_a_tool_result_gets_a_text_answer(server):
    first = ask(server, PROMPTS[0], tools=TOOLS, tool_choice={"type": "function",
                                                               "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    messages = [{"role": "user", "content": PROMPTS[0]},
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 14, "sky": "rain"})}]
    r = server.openai().chat.completions.create(model="smol", messages=messages, tools=TOOLS, tool_choice="none",
                                                max_tokens=24, temperature=0)
    (choice,) = r.choices
    assert not choice.message.tool_calls
    assert isinstance(choice.message.content, str) and choice.message.content.strip()


def test_server_and_llama_give_the_same_forced_call(server, smollm2_path):
    from oxillama import Llama
    llm = Llama(model_path=smollm2_path, n_ctx=512, verbose=False)
    try:
        local = llm.create_chat_completion([{"role": "user", "content": PROMPTS[2]}], tools=TOOLS,
                                           tool_choice="required", temperature=0, max_tokens=96)
    finally:
        llm.close()
    remote = ask(server, PROMPTS[2], tools=TOOLS, tool_choice="required")
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in local["choices"][0]["message"]["tool_calls"]]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in remote.choices[0].message.tool_calls] == want


@pytest.mark.parametrize("body, words", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "launch_rocket"}}}, "launch_rocket"),
    ({"tool_choice": "required"}, "tool"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
      "tool_choice": "required"}, "f"),
    ({"tools": TOOLS, "tool_choice": "required", "grammar": 'root ::= "x"'}, "grammar"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
])
def test_bad_tool_requests_are_400s(server, body, words):
    with server.client() as http:
        r = http.post("/v1/chat/completions", json={"model": "smol", "max_tokens": 4,
                                                    "messages": [{"role": "user", "content": "hi"}], **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error"
