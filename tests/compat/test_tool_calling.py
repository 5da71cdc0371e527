"""Tool calling through oxillama.Llama on SmolLM2-135M, whose template has no tool syntax (the generic
JSON form): tool_choice "required" and a named function force calls whose arguments validate
against the tool's schema; "none" never calls; "auto" returns either a call or text; a tool result
message leads to a text answer; streaming gives tool-call deltas, never the call's JSON as content."""
import json

import jsonschema
import pytest
from llama_shapes import CHAT, CHAT_CHUNK, TOOL_CALL, TOOL_CALL_DELTA, assert_shape
from sample_tools import CONVERT, WEATHER  # tests/sample_tools.py

from oxillama.errors import InvalidArgumentError

pytestmark = pytest.mark.slow

SEARCH = {"type": "function", "function": {
    "name": "search_books", "description": "Search a library catalogue",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 60}, "max_results": {"type": "integer", "minimum": 1, "maximum": 20},
        "filters": {"type": "object", "properties": {"year_from": {"type": "integer"},
                                                     "language": {"type": "string", "maxLength": 10}},
                    "required": ["language"]}}, "required": ["query", "filters"]}}}
TOOLS = [WEATHER, CONVERT, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

PROMPTS = [
    "What's the weather like in Paris right now?",
    "How many dollars is 250 euros?",
    "Find me novels by Tolstoy published after 1860, in Russian.",
    "Is it going to be cold in Reykjavik? Use fahrenheit.",
    "I need 3 books about machine learning in English.",
    "Convert 12.5 GBP to JPY please.",
    "Tell me a joke about cats.",
    "Weather in Tokyo, metric units.",
    "Book recommendations: Spanish poetry from before 1950.",
    "What is 2 + 2?",
]


def check_calls(message):
    calls = message["tool_calls"]
    assert calls
    for call in calls:
        assert_shape(call, TOOL_CALL)
        assert call["type"] == "function" and call["id"].startswith("call_")
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, SCHEMAS[call["function"]["name"]])
    return calls


@pytest.mark.parametrize("prompt", PROMPTS)
def test_required_gives_a_valid_call(llm, prompt):
    r = llm.create_chat_completion([{"role": "user", "content": prompt}], tools=TOOLS, tool_choice="required",
                                   max_tokens=160, temperature=0.7, seed=11)
    assert_shape(r, CHAT)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    assert len(check_calls(r["choices"][0]["message"])) == 1
    json.dumps(r)


@pytest.mark.parametrize("i,prompt", list(enumerate(PROMPTS)))
def test_named_function_gives_a_call_of_that_function(llm, i, prompt):
    name = TOOLS[i % 3]["function"]["name"]
    r = llm.create_chat_completion([{"role": "user", "content": prompt}], tools=TOOLS, max_tokens=160,
                                   tool_choice={"type": "function", "function": {"name": name}}, temperature=0)
    calls = check_calls(r["choices"][0]["message"])
    assert [c["function"]["name"] for c in calls] == [name]
    assert r["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("prompt", PROMPTS[:4])
def test_none_never_calls(llm, prompt):
    r = llm.create_chat_completion([{"role": "user", "content": prompt}], tools=TOOLS, tool_choice="none",
                                   max_tokens=24, temperature=0)
    msg = r["choices"][0]["message"]
    assert "tool_calls" not in msg and isinstance(msg["content"], str)
    assert r["choices"][0]["finish_reason"] in ("stop", "length")
    # the tools were not even offered: the prompt is the one without tools
    plain = llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=1, temperature=0)
    assert r["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_auto_gives_a_call_or_text_never_raw_call_json(llm, prompt):
    r = llm.create_chat_completion([{"role": "user", "content": prompt}], tools=TOOLS, max_tokens=96, temperature=0)
    msg, finish = r["choices"][0]["message"], r["choices"][0]["finish_reason"]
    if "tool_calls" in msg:
        assert finish == "tool_calls"
        for call in msg["tool_calls"]:
            assert call["function"]["name"] in SCHEMAS
            json.loads(call["function"]["arguments"])
    else:
        assert finish in ("stop", "length") and '"tool_calls": [{' not in (msg["content"] or "")[:12]


def test_tool_result_message_gives_a_text_answer(llm):
    messages = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temperature": 21, "sky": "sunny"})},
    ]
    r = llm.create_chat_completion(messages, tools=TOOLS, tool_choice="none", max_tokens=40, temperature=0)
    msg = r["choices"][0]["message"]
    assert "tool_calls" not in msg and msg["content"] and msg["content"].strip()
    # the result reached the prompt through the template
    prompt_tokens = r["usage"]["prompt_tokens"]
    shorter = llm.create_chat_completion(messages[:1], tool_choice="none", tools=TOOLS, max_tokens=1)
    assert prompt_tokens > shorter["usage"]["prompt_tokens"] + 20


def test_streamed_calls_are_deltas_that_join_to_the_message(llm):
    messages = [{"role": "user", "content": "Find me books about the sea in French."}]
    kw = dict(tools=TOOLS, tool_choice="required", max_tokens=160, temperature=0)
    whole = llm.create_chat_completion(messages, **kw)
    chunks = list(llm.create_chat_completion(messages, stream=True, **kw))
    for c in chunks:
        assert_shape(c, CHAT_CHUNK)
        json.dumps(c)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert not any(d.get("content") for d in deltas)              # no raw JSON as content
    tool_deltas = [tc for d in deltas for tc in d.get("tool_calls") or []]
    for tc in tool_deltas:
        assert_shape(tc, TOOL_CALL_DELTA)
    joined = {}
    for tc in tool_deltas:
        entry = joined.setdefault(tc["index"], {"name": "", "arguments": ""})
        entry["name"] += tc["function"]["name"] or ""
        entry["arguments"] += tc["function"]["arguments"]
    expected = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in whole["choices"][0]["message"]["tool_calls"]]
    assert [(e["name"], json.loads(e["arguments"])) for _, e in sorted(joined.items())] == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_legacy_functions_and_bad_tool_choice(llm):
    r = llm.create_chat_completion([{"role": "user", "content": "Weather in Rome?"}],
                                   functions=[WEATHER["function"]], function_call={"name": "get_weather"},
                                   max_tokens=80, temperature=0)
    assert check_calls(r["choices"][0]["message"])[0]["function"]["name"] == "get_weather"
    with pytest.raises(InvalidArgumentError, match="not among the tools"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], tools=TOOLS,
                                   tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(InvalidArgumentError, match="cannot be combined"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], tools=TOOLS, tool_choice="required",
                                   response_format={"type": "json_object"})
