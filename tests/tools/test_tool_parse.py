"""parse_tool_calls on fixed texts of every format, and streamed deltas joining to the parsed message."""
import json

import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.tools import STYLES, ToolCallStreamer, detect_style, parse_tool_calls

NESTED = {"filter": {"tags": ["a", "b"], "range": {"lo": 1, "hi": 2.5}}, "note": "x; y } ]"}


def hermes(*calls):
    return "\n".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>' for n, a in calls)


def llama3(*calls, tag=True):
    return ("<|python_tag|>" if tag else "") + "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)


def mistral(*calls):
    return "[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in calls])


def generic(*calls):
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})


WRITERS = {"hermes": hermes, "llama3": llama3, "mistral": mistral, "generic": generic}
TWO = [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})]


def names_args(calls):
    return [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("style", WRITERS)
def test_two_calls_in_one_message(style):
    content, calls = parse_tool_calls(WRITERS[style](*TWO), style)
    assert content is None
    assert names_args(calls) == TWO
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


@pytest.mark.parametrize("style", WRITERS)
def test_nested_arguments(style):
    content, calls = parse_tool_calls(WRITERS[style](("search", NESTED)), style)
    assert content is None and names_args(calls) == [("search", NESTED)]
    assert json.loads(calls[0].to_openai()["function"]["arguments"]) == NESTED


@pytest.mark.parametrize("style", ["hermes", "mistral", "llama3"])
def test_text_before_a_call(style):
    content, calls = parse_tool_calls("Let me check the weather.\n" + WRITERS[style](TWO[0]), style)
    assert content == "Let me check the weather."
    assert names_args(calls) == [TWO[0]]


def test_text_before_json_is_content_for_json_only_formats():
    # the generic form is one JSON message: a call after prose is not a call
    text = "Sure: " + generic(TWO[0])
    assert parse_tool_calls(text, "generic") == (text, [])


@pytest.mark.parametrize("style", WRITERS)
@pytest.mark.parametrize("text", ["The capital of France is Paris.", "", "  \n", '{"answer": 42}',
                                  "use <tool or [TOOL or {brace"])
def test_no_call(style, text):
    content, calls = parse_tool_calls(text, style)
    assert calls == []
    assert content == (text.strip() or None)


MALFORMED = {
    "hermes": ['<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>',   # missing brace
               '<tool_call>not json</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'],
    "llama3": ['<|python_tag|>{"name": "f", "parameters": {"x": 1}', '<|python_tag|>print(1)',
               '{"name": "f", "parameters": "not an object"}'],
    "mistral": ['[TOOL_CALLS] [{"name": "f", "arguments": {"x": }]', '[TOOL_CALLS] oops',
                '[TOOL_CALLS] [{"nom": "f"}]'],
    "generic": ['{"tool_calls": [{"name": "f", "arguments": {"x": 1}]', '{"tool_calls": [{"name": 3}]}',
                '{"tool_calls": "f"}'],
}


@pytest.mark.parametrize("style,text", [(s, t) for s, texts in MALFORMED.items() for t in texts])
def test_malformed_stays_content(style, text):
    content, calls = parse_tool_calls("Before. " + text if style in ("hermes", "mistral") else text, style)
    assert calls == []
    assert text.strip() in content


def test_malformed_block_between_good_ones():
    bad = '<tool_call>{"name": "x", "arguments": </tool_call>'
    content, calls = parse_tool_calls(hermes(TWO[0]) + "\n" + bad + "\n" + hermes(TWO[1]), "hermes")
    assert names_args(calls) == TWO
    assert content == bad


def test_unclosed_last_hermes_block_is_read():
    content, calls = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n', "hermes")
    assert content is None and names_args(calls) == [("f", {"a": 1})]


def test_llama3_without_python_tag_and_arguments_spelling():
    assert names_args(parse_tool_calls(llama3(*TWO, tag=False), "llama3")[1]) == TWO
    text = '{"name": "f", "arguments": {"a": 1}}'
    assert names_args(parse_tool_calls(text, "llama3")[1]) == [("f", {"a": 1})]


def test_generic_single_call_shapes_and_string_arguments():
    for text in ['{"tool_call": {"name": "f", "arguments": {"a": 1}}}', '{"name": "f", "arguments": {"a": 1}}',
                 '{"tool_calls": [{"name": "f", "arguments": "{\\"a\\": 1}"}]}']:
        assert names_args(parse_tool_calls(text, "generic")[1]) == [("f", {"a": 1})], text


def test_unknown_style_and_non_text():
    with pytest.raises(InvalidArgumentError, match="unknown tool-call style"):
        parse_tool_calls("x", "functionary-v9")
    with pytest.raises(InvalidArgumentError):
        parse_tool_calls(None, "hermes")


def stream(style, text, step):
    s = ToolCallStreamer(STYLES[style])
    deltas = []
    for i in range(0, len(text), step):
        deltas += s.feed(text[i:i + step])
    deltas += s.finish()
    return deltas


def join(deltas):
    content, calls = "", {}
    for d in deltas:
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            entry = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            entry["name"] += tc["function"].get("name") or ""
            entry["arguments"] += tc["function"].get("arguments") or ""
    return content or None, [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]


CASES = [(s, w(*TWO)) for s, w in WRITERS.items()] + \
    [(s, "I'll look that up.\n" + WRITERS[s](("search", NESTED))) for s in ("hermes", "mistral", "llama3")] + \
    [(s, t) for s, texts in MALFORMED.items() for t in texts] + \
    [(s, "Plain answer, no tools at all.  ") for s in WRITERS] + \
    [("hermes", hermes(TWO[0]) + "\nDone, and one more thing.")]


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
@pytest.mark.parametrize("style,text", CASES)
def test_streamed_deltas_join_to_the_parsed_message(style, text, step):
    deltas = stream(style, text, step)
    content, calls = parse_tool_calls(text, style)
    assert join(deltas) == (content, names_args(calls))
    for d in deltas:                   # markup never leaks into content while a call is parsed
        if calls:
            assert "<tool_call>" not in (d.get("content") or "") or content and "<tool_call>" in content


def test_stream_sends_a_call_as_soon_as_it_is_complete():
    s = ToolCallStreamer(STYLES["hermes"])
    text = hermes(*TWO)
    first_end = text.index("</tool_call>") + len("</tool_call>")
    deltas = s.feed(text[:first_end])
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas] == ["get_weather"]
    assert s.feed(text[first_end:])[0]["tool_calls"][0]["index"] == 1


def test_stream_holds_back_a_partial_marker():
    s = ToolCallStreamer(STYLES["hermes"])
    assert s.feed("Hello <tool_") == [{"content": "Hello"}]
    assert s.feed("call>") == []


@pytest.mark.parametrize("source,style", [
    ("{% for m in messages %}<tool_call>{% endfor %}", "hermes"),
    ("{{ '[TOOL_CALLS]' }}", "mistral"),
    ("<|start_header_id|>ipython<|end_header_id|> <|python_tag|>", "llama3"),
    ("<|im_start|>{{ m['content'] }}", "generic"),
    (None, "generic"),
])
def test_detect_style(source, style):
    assert detect_style(source) == style


def test_mistral_v11_name_args_form():
    text = 'Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}'
    content, calls = parse_tool_calls(text, "mistral")
    assert content == "Checking." and names_args(calls) == TWO
    for step in (1, 3, 1000):
        assert join(stream("mistral", text, step)) == (content, TWO)
    bad = '[TOOL_CALLS]get_weather[ARGS]{"city":'
    assert parse_tool_calls(bad, "mistral") == (bad, [])
    assert join(stream("mistral", bad, 2)) == (bad, [])
