"""Chat templates: same text as plain jinja2, sandboxed, clear errors."""
import datetime
from pathlib import Path

import jinja2
import pytest

from oxillama.errors import ChatTemplateError
from oxillama.tokenizer.chat import ChatTemplate, make_environment

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! What's 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And in French? (é, ü, 日本)"},
]

# Gemma 3's template, from its tokenizer_config.json (the 270m GGUF carries none).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n")


def plain_jinja2(source, **context):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(source).render(**context)


def test_smollm2_template_matches_plain_jinja2(smollm2_tokenizer):
    tok = smollm2_tokenizer
    for gen in (True, False):
        got = tok.apply_chat_template(CONVERSATION, add_generation_prompt=gen)
        want = plain_jinja2(tok.chat_template, messages=CONVERSATION, add_generation_prompt=gen,
                            bos_token="<|im_start|>", eos_token="<|im_end|>")
        assert got == want
    got = tok.apply_chat_template(CONVERSATION[1:])
    assert got.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert got.endswith("<|im_end|>\n<|im_start|>assistant\n")
    # the rendered prompt encodes with the chat tokens parsed as special
    ids = tok.encode(got, parse_special=True)
    assert ids.count(tok.token_to_id("<|im_start|>")) == 5 and ids[-1] == 198  # system + 3 turns + prompt


def test_gemma3_without_a_template_gets_the_builtin_gemma_format_and_renders_the_override(gemma3_tokenizer):
    tok = gemma3_tokenizer
    assert tok.chat_template is None
    official = tok.apply_chat_template(CONVERSATION, chat_template=GEMMA3_TEMPLATE)
    assert tok.apply_chat_template(CONVERSATION) == official      # the file has none: the built-in one
    assert tok.apply_chat_template(CONVERSATION[1:2], add_generation_prompt=False) == \
        tok.apply_chat_template(CONVERSATION[1:2], add_generation_prompt=False, chat_template=GEMMA3_TEMPLATE)
    got = tok.apply_chat_template(CONVERSATION, chat_template=GEMMA3_TEMPLATE)
    want = plain_jinja2(GEMMA3_TEMPLATE, messages=CONVERSATION, add_generation_prompt=True,
                        bos_token="<bos>", eos_token="<eos>",
                        raise_exception=lambda m: (_ for _ in ()).throw(RuntimeError(m)))
    assert got == want
    assert got.startswith("<bos><start_of_turn>user\nYou are terse.\n\nHi!")
    assert got.endswith("<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                                chat_template=GEMMA3_TEMPLATE)


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% set x = messages.append({'role': 'x'}) %}{{ x }}",
    "{{ raise_exception.__globals__ }}",
    "{{ (1).__class__.__base__.__subclasses__() }}",
    "{{ messages[0].__class__ }}",
    "{{ raise_exception.__code__ }}",
    "{{ messages.pop() }}",
])
def test_sandbox_escapes_raise(source):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render([{"role": "user", "content": "hi"}])


def test_template_errors_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="syntax"):
        ChatTemplate("{% for m in messages %}").render([])
    with pytest.raises(ChatTemplateError, match="boom"):
        ChatTemplate("{{ raise_exception('boom') }}").render([])
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ 1 // 0 }}").render([])
    with pytest.raises(ChatTemplateError):
        ChatTemplate("")
    with pytest.raises(ChatTemplateError, match="list"):
        ChatTemplate("x").render("not a list")
    with pytest.raises(ChatTemplateError, match="role"):
        ChatTemplate("x").render([{"content": "no role"}])


def test_globals_tools_and_kwargs():
    t = ChatTemplate("{{ strftime_now('%Y') | length }}|{{ tools | tojson }}|{{ custom }}|{{ add_generation_prompt }}")
    out = t.render([], tools=[{"name": "f", "doc": "é"}], custom="x", add_generation_prompt=False)
    assert out == '4|[{"name": "f", "doc": "é"}]|x|False'


def test_template_compiled_lazily():
    t = ChatTemplate("{% broken")  # constructing does not parse
    with pytest.raises(ChatTemplateError):
        t.render([])
    assert make_environment().from_string("{{ 1 }}").render() == "1"


def test_named_templates_and_special_token_names():
    from oxillama.tokenizer import Tokenizer

    from .test_vocab import CONTROL, gpt2_metadata

    md = gpt2_metadata([("<s>", CONTROL), ("</s>", CONTROL)],
                       **{"tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 257,
                          "tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}"
                                                     "{% endfor %}{{ eos_token }}",
                          "tokenizer.chat_template.tool_use": "tools={{ tools | length }}"})
    tok = Tokenizer.from_metadata(md)
    msgs = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(msgs) == "<s>hi</s>"
    assert tok.apply_chat_template(msgs, chat_template="tool_use", tools=[{}, {}]) == "tools=2"
    assert tok.apply_chat_template(msgs, chat_template="[{{ messages[0].role }}]") == "[user]"
    assert tok.apply_chat_template(msgs, bos_token="B") == "Bhi</s>"


def test_a_vocabulary_without_turn_tokens_needs_a_template_and_chatml_ones_get_chatml():
    from oxillama.tokenizer import Tokenizer

    from .test_vocab import CONTROL, gpt2_metadata

    plain = Tokenizer.from_metadata(gpt2_metadata([("<s>", CONTROL)]))
    with pytest.raises(ChatTemplateError, match="no tokenizer.chat_template"):
        plain.apply_chat_template([{"role": "user", "content": "hi"}])
    chatml = Tokenizer.from_metadata(gpt2_metadata([("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL)]))
    assert chatml.apply_chat_template([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]) == \
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# Real templates of families added with issue 31 (their GGUFs carry them as tokenizer.chat_template), copied
# from llama.cpp's models/templates/: SmolLM3-3B (reasoning switch, system metadata) and Granite 3.3 (tools).
FAMILY_TEMPLATES = Path(__file__).parent / "data" / "templates"
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}


def hf_jinja2(source, **context):
    """As transformers renders chat templates: a sandbox with trim/lstrip, its two helpers and its tojson (keys in
    order, no ASCII escapes)."""
    import json

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.TemplateError(message)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals.update(raise_exception=raise_exception,
                       strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    return env.from_string(source).render(**context)


@pytest.mark.parametrize("family,kwargs,expect", [
    ("smollm3", {}, "Reasoning Mode: /think"),
    ("smollm3", {"enable_thinking": False}, "Reasoning Mode: /no_think"),
    ("granite-3.3", {}, "<|start_of_role|>assistant<|end_of_role|>"),
    ("granite-3.3", {"tools": [TOOL]}, '"name": "get_weather"'),
])
def test_family_templates_render_as_transformers_does(family, kwargs, expect):
    source = (FAMILY_TEMPLATES / f"{family}.jinja").read_text(encoding="utf-8")
    got = ChatTemplate(source).render(CONVERSATION, add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
                                      **kwargs)
    want = hf_jinja2(source, messages=CONVERSATION, add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
                     **kwargs)
    assert got == want
    assert expect in got and "And in French? (é, ü, 日本)" in got
