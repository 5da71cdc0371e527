"""oxillama.Llama over the tiny random model of every architecture (tests/models/data): the dict
shapes, exact usage, streams and per-token embeddings hold whatever the architecture, and a forced
tool call is valid even from random weights."""
import json
from pathlib import Path

import jsonschema
import pytest
from llama_shapes import CHAT, COMPLETION, EMBEDDING, assert_shape

from oxillama import Llama
from oxillama.errors import ChatTemplateError

MODELS = sorted(p for p in (Path(__file__).parents[1] / "models" / "data").glob("*.gguf"))
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string", "maxLength": 8},
                                     "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["word", "n"]}}}


@pytest.fixture(params=MODELS, ids=lambda p: p.stem, scope="module")
def tiny(request):
    with Llama(str(request.param), n_ctx=2048, seed=3, verbose=False, chat_format="chatml") as m:
        yield m


def test_completion_usage_and_stream(tiny):
    r = tiny("hello there", max_tokens=5, temperature=0)
    assert_shape(r, COMPLETION)
    assert r["usage"]["prompt_tokens"] == len(tiny.tokenize(b"hello there"))
    assert r["usage"]["completion_tokens"] == len(tiny.engine.last_completion.tokens) - (
        r["choices"][0]["finish_reason"] == "stop" and tiny.engine.last_completion.tokens[-1]
        in tiny.engine.tokenizer.eog_ids)
    chunks = list(tiny("hello there", max_tokens=5, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == r["choices"][0]["text"]
    json.dumps(r)


def test_per_token_embeddings(tiny):
    r = tiny.create_embedding("abc def")
    assert_shape(r, EMBEDDING)
    assert len(r["data"][0]["embedding"]) == len(tiny.tokenize(b"abc def")) == r["usage"]["prompt_tokens"]


def test_forced_call_from_random_weights(tiny):
    r = tiny.create_chat_completion([{"role": "user", "content": "look up a word"}], tools=[TOOL],
                                    tool_choice="required", max_tokens=700, temperature=0.8, seed=5)
    assert_shape(r, CHAT)
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["lookup"]
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), TOOL["function"]["parameters"])
    assert r["choices"][0]["finish_reason"] == "tool_calls"


def test_no_template_and_no_chat_format_says_so():
    with Llama(str(MODELS[0]), n_ctx=64, verbose=False) as m:
        with pytest.raises(ChatTemplateError, match="chat_template"):
            m.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=1)


def test_max_tokens_is_cut_to_the_context_and_an_overlong_prompt_is_a_value_error():
    with Llama(str(MODELS[0]), n_ctx=32, verbose=False) as m:
        r = m("abcdefghij", max_tokens=1000, temperature=0.8, seed=1)
        assert r["usage"]["total_tokens"] <= 32
        assert m("abc", max_tokens=0)["usage"]["total_tokens"] <= 32     # <= 0: until the context is full
        with pytest.raises(ValueError, match="exceed context window"):
            m("x" * 100, max_tokens=1)
