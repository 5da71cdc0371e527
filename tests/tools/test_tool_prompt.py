"""The prompt side: messages made renderable for templates without tool syntax, tool_choice, and the
grammar that forces a call."""
import json

import jsonschema
import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.tools import STYLES, parse_tool_calls, prepare_messages, resolve_tool_choice, tool_call_grammar

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"},
                                                                          "days": {"type": "integer"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"]}}}
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@pytest.mark.parametrize("style", list(STYLES))
def test_forced_grammar_accepts_exactly_valid_calls(style):
    g = tool_call_grammar([WEATHER, TIME], STYLES[style])
    writers = {
        "hermes": lambda n, a: f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>',
        "llama3": lambda n, a: json.dumps({"name": n, "parameters": a}),
        "mistral": lambda n, a: "[TOOL_CALLS][" + json.dumps({"name": n, "arguments": a}) + "]",
        "generic": lambda n, a: json.dumps({"tool_calls": [{"name": n, "arguments": a}]}),
    }
    w = writers[style]
    for name, args in [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Oslo", "days": 3}),
                       ("get_time", {"tz": "CET"})]:
        text = w(name, args)
        assert g.accepts(text), text
        assert [(c.name, c.arguments) for c in parse_tool_calls(text, style)[1]] == [(name, args)]
    for name, args in [("get_weather", {}), ("get_weather", {"city": 3}), ("get_time", {"tz": "PST"}),
                       ("other", {"city": "Oslo"})]:
        assert not g.accepts(w(name, args)), (name, args)
    assert not g.accepts("Sure, here is the weather.")


def test_forced_grammar_one_call_unless_parallel():
    two = json.dumps({"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}] * 2})
    assert not tool_call_grammar([TIME], STYLES["generic"]).accepts(two)
    assert tool_call_grammar([TIME], STYLES["generic"], parallel=True).accepts(two)
    block = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'
    assert tool_call_grammar([TIME], STYLES["hermes"], parallel=True).accepts(block + "\n" + block)


def test_tool_choice():
    assert resolve_tool_choice([WEATHER], None) == ("auto", [WEATHER])
    assert resolve_tool_choice([], None) == ("none", [])
    assert resolve_tool_choice([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}}) == \
        ("required", [TIME])
    with pytest.raises(InvalidArgumentError, match="not among the tools"):
        resolve_tool_choice([WEATHER], {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(InvalidArgumentError, match="needs tools"):
        resolve_tool_choice([], "required")
    with pytest.raises(InvalidArgumentError):
        resolve_tool_choice([WEATHER], "always")


def test_messages_for_a_template_without_tools():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Oslo?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 20 C"},
    ]
    out = prepare_messages(messages, [WEATHER], STYLES["generic"], CHATML, offer_tools=True)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.")
    assert "get_weather" in out[0]["content"] and '"tool_calls"' in out[0]["content"]
    assert out[1] == {"role": "user", "content": "Weather in Oslo?"}
    # the earlier call in the model's own syntax, the result as a user turn naming the tool
    assert parse_tool_calls(out[2]["content"], "generic")[1][0].arguments == {"city": "Oslo"}
    assert out[3]["role"] == "user"
    assert json.loads(out[3]["content"]) == {"tool_response": {"name": "get_weather", "content": "sunny, 20 C"}}
    jsonschema.validate({"city": "Oslo"}, WEATHER["function"]["parameters"])


def test_messages_for_a_template_with_tools_pass_through():
    src = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m['role'] }}{% endfor %}"
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                      "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    out = prepare_messages(messages, [WEATHER], STYLES["hermes"], src, offer_tools=True)
    assert len(out) == 3 and out[0] == {"role": "user", "content": "hi"}
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}   # templates want a mapping
    assert out[2]["role"] == "tool" and out[2]["name"] == "f"


def test_bad_messages():
    for bad in [[], "hi", [{"content": "no role"}], [{"role": "user", "content": [{"type": "image_url"}]}]]:
        with pytest.raises(InvalidArgumentError):
            prepare_messages(bad, [], STYLES["generic"], CHATML, offer_tools=False)
