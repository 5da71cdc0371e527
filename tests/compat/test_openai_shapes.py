"""oxillama.compat.openai_shapes without a real model: logprobs in OpenAI's two shapes, usage, and a
chat plan for a template with Hermes tool syntax, generated through on a tiny model."""
import json
import math
from pathlib import Path

import jsonschema
import pytest

from oxillama.compat import openai_shapes as shapes
from oxillama.runtime import InferenceEngine

TINY = Path(__file__).parents[1] / "models" / "data" / "qwen2.gguf"
# a Qwen 2.5-like template: tools in the system turn, calls and results as Hermes tags
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    "Return calls as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n{% elif m.tool_calls %}<|im_start|>assistant\n{% for c in m.tool_calls %}"
    "<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOL = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


@pytest.fixture(scope="module")
def engine():
    with InferenceEngine.from_gguf(TINY, n_ctx=2048, seed=2) as e:
        yield e


def test_logprobs_shapes(engine):
    tok = engine.tokenizer
    ids = engine.tokenize("hello", add_special=False)[:2]
    entries = [{ids[0]: -0.5, ids[1]: -1.0}, {ids[1]: -math.inf, ids[0]: -0.1}]
    chat = shapes.chat_logprobs(tok, ids, entries, 1)
    assert [e["logprob"] for e in chat["content"]] == [-0.5, shapes.MIN_LOGPROB]   # JSON has no -inf
    assert [len(e["top_logprobs"]) for e in chat["content"]] == [1, 1]
    assert chat["content"][1]["top_logprobs"][0]["logprob"] == -0.1
    legacy = shapes.completion_logprobs(tok, ids, entries, 2, offset=3)
    texts = [tok.token_to_bytes(i).decode("utf-8", "replace") for i in ids]
    assert legacy["tokens"] == texts and legacy["text_offset"] == [3, 3 + len(texts[0])]
    assert legacy["token_logprobs"] == [-0.5, shapes.MIN_LOGPROB]
    json.dumps([chat, legacy], allow_nan=False)


def test_usage_counts_no_end_of_generation_token():
    assert shapes.generated_token_count([5, 6, 2], {2}) == 2
    assert shapes.generated_token_count([5, 2, 6], {2}) == 3
    assert shapes.usage(10, 3) == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    assert shapes.usage(10, 3, cached_tokens=4)["prompt_tokens_details"] == {"cached_tokens": 4}


def test_hermes_template_plan_renders_tools_and_forces_a_tagged_call(engine):
    messages = [{"role": "user", "content": "1 + 2?"}]
    plan = shapes.chat_plan(engine.tokenizer, messages, [TOOL], "required", chat_template=HERMES_TEMPLATE)
    assert plan.style.name == "hermes" and plan.mode == "required"
    assert '<tools>{"type": "function"' in plan.prompt          # the template got the tools variable
    out = engine.generate(plan.prompt, grammar=plan.grammar, max_tokens=600, temperature=0.8, seed=4)
    assert str(out).startswith("<tool_call>")
    content, calls = plan.parse(str(out))
    assert content is None and [c.name for c in calls] == ["add"]
    jsonschema.validate(calls[0].arguments, TOOL["function"]["parameters"])
    choice = shapes.chat_choice(0, content, calls, out.finish_reason)
    assert choice["finish_reason"] == "tool_calls"
    # the call and its result go back through the template as Hermes tags
    history = messages + [shapes.chat_message(content, calls),
                          {"role": "tool", "tool_call_id": calls[0].id, "content": "3"}]
    again = shapes.chat_plan(engine.tokenizer, history, [TOOL], "auto", chat_template=HERMES_TEMPLATE)
    assert "<tool_call>" in again.prompt and "<tool_response>3</tool_response>" in again.prompt
    assert again.grammar is None


def test_plan_without_tools_is_the_plain_template(engine):
    messages = [{"role": "user", "content": "hi"}]
    plan = shapes.chat_plan(engine.tokenizer, messages, chat_template=HERMES_TEMPLATE)
    assert plan.mode == "none" and plan.grammar is None
    assert plan.prompt == engine.tokenizer.apply_chat_template(messages, chat_template=HERMES_TEMPLATE)
    assert plan.parse('<tool_call>{"name": "x", "arguments": {}}</tool_call>')[1] == []   # "none" never calls
