"""Hostile chat templates (issue 22): every one ends in a ChatTemplateError naming the template's line,
within the render budget, without building huge values; real templates render as plain jinja2 does."""
import time

import jinja2
import pytest

from oxillama.errors import ChatTemplateError
from oxillama.tokenizer.chat import BUILTIN_TEMPLATES, ChatTemplate, RenderLimits

from .test_chat import CONVERSATION, GEMMA3_TEMPLATE

MSGS = [{"role": "user", "content": "hi"}]
# each case: the template, and a word the error must contain. All were reproduced hangs, multi-GB
# allocations or bare exceptions before the bounded sandbox.
HOSTILE = [
    ("{% for x in range(100000) %}{% for y in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{{ lipsum(10**9) }}", "lipsum"),
    ("{{ 'a' * 2*10**9 }}", "'*'"),
    ("{{ '%.*f' % (10**9, 1.0) }}", "width"),
    ("{{ 'x'|indent(width=10**9) }}", "indent"),
    ("{{ 'x'|center(10**9) }}", "center"),
    ("{{ (1e308*10)|int }}", "OverflowError"),
    ("{{ 'abc'|truncate(-5) }}", "render"),
    ("{% break %}", "compile"),
    ("{{ 2**1000000 }}", "bits"),
    ("{{ cycler()|list }}", "render"),
    ("{{ " + "[" * 1000 + "]" * 1000 + " }}", "nests"),
    ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "nests"),
    ("{% if true %}" * 3000 + "{% endif %}" * 3000, "nests"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "string"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "string"),
    ("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", "steps|longer"),
    ("{{ range(100000)|join('a' * 1000000) }}", "join"),
    ("{{ '{:>999999999}'.format(1) }}", "width"),
    ("{{ 'x'.ljust(10**9) }}", "width"),
    ("{{ {'a': 1}|tojson(indent=10**9) }}", "indent"),
    ("{{ ['a' * 100000] * 100000 }}", "text"),
    ("{{ 'ab'|slice(10**9)|list }}", "slice"),
    ("{{ '%0999999999d' % 1 }}", "width"),
    ("{{ '%0999999999d'|format(1) }}", "width"),
    ("{{ 'a\tb'.expandtabs(10**9) }}", "expandtabs"),
    ("{{ 'abc'.replace('', 'x' * 8000000) }}", "replace"),
    ("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = ns.l + [('x' * 1000000)[i:]] %}"
     "{% endfor %}", "values"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
    ("{{ x.__class__ }}", "sandbox"),
]


@pytest.mark.parametrize("source, word", HOSTILE, ids=[f"case{i}" for i in range(len(HOSTILE))])
def test_hostile_templates_end_in_chat_template_error(source, word):
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"\(line \d+\)") as info:
        ChatTemplate(source).render(MSGS)
    assert any(w in str(info.value) for w in word.split("|"))
    assert time.monotonic() - t0 < 30      # generous: the budget is 5 s of a busy machine


def test_errors_name_the_line():
    with pytest.raises(ChatTemplateError, match=r"\(line 3\)"):
        ChatTemplate("a\nb\n{{ 1 // 0 }}\nc").render(MSGS)
    with pytest.raises(ChatTemplateError, match=r"outside loop \(line 3\)"):
        ChatTemplate("{% for m in messages %}\n{% break %}{% endfor %}{% if x %}\n{% break %}{% endif %}").render(MSGS)
    with pytest.raises(ChatTemplateError, match=r"line 4"):
        ChatTemplate("{% for m in messages %}\n\n{{ m }}\n{% endfo %}").render(MSGS)
    with pytest.raises(ChatTemplateError, match=r"boom \(line 2\)"):
        ChatTemplate("x\n{{ raise_exception('boom') }}").render(MSGS)


@pytest.mark.parametrize("bad", [[], {}, 5, None, b"{{ 1 }}"])
def test_template_source_must_be_text(bad):
    with pytest.raises(ChatTemplateError, match=f"non-empty string, got {type(bad).__name__}"):
        ChatTemplate(bad)


def test_limits_are_per_template_and_per_render():
    t = ChatTemplate("{% for i in range(1000) %}{{ i }}{% endfor %}", RenderLimits(max_steps=500))
    with pytest.raises(ChatTemplateError, match="500 steps"):
        t.render(MSGS)
    t = ChatTemplate("{% for i in range(100) %}{{ i }}{% endfor %}", RenderLimits(max_steps=500))
    for _ in range(20):     # each render has its own budget
        assert t.render(MSGS).startswith("0123")
    with pytest.raises(ChatTemplateError, match="wrote more than 10 characters"):
        ChatTemplate("{{ 'x' * 11 }}", RenderLimits(max_output_chars=10)).render(MSGS)
    with pytest.raises(ChatTemplateError, match="too long|characters long"):
        ChatTemplate("x" * 2000, RenderLimits(max_source_chars=1000)).render(MSGS)


def test_budget_fits_long_conversations():
    """The bounds leave room for real use: 2,000 turns of 2,000 characters render."""
    msgs = [{"role": ("user", "assistant")[i % 2], "content": "word " * 400} for i in range(2000)]
    _, _, chatml = BUILTIN_TEMPLATES[1]
    out = ChatTemplate(chatml).render(msgs)
    assert out.count("<|im_start|>") == 2001


# A template in the style of the tool-calling ones on the Hub: namespace, macros, tojson with indent,
# formatting, slices, joins and loop variables -- everything the hooks touch.
TOOLS_TEMPLATE = """{%- macro render(m) -%}
<|{{ m.role }}|>{{ '%-10s|' % m.role }}{{ '{:>4}'.format(loop_index | default(0)) }}
{{ m.content | trim | indent(2) }}
{%- endmacro -%}
{%- set ns = namespace(system='', n=0) -%}
{%- for m in messages -%}
{%- if m.role == 'system' %}{% set ns.system = ns.system ~ m.content[:200] ~ '\\n' %}{% endif -%}
{%- set ns.n = ns.n + 1 -%}
{%- endfor -%}
{{ bos_token }}{{ ns.system }}
{%- if tools %}Tools:
{{ tools | tojson(indent=2) }}
{{ tools | map(attribute='name') | join(', ') }}
{% endif -%}
{%- for m in messages[1:] %}{% set loop_index = loop.index %}{{ render(m) }}
{% if loop.last %}[{{ ns.n }} messages, {{ range(3) | list | length }}]{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""


@pytest.mark.parametrize("source", [GEMMA3_TEMPLATE, TOOLS_TEMPLATE] + [s for _, _, s in BUILTIN_TEMPLATES],
                         ids=["gemma3", "tools", *[n for n, _, _ in BUILTIN_TEMPLATES]])
def test_real_templates_render_as_plain_jinja2(source):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from oxillama.tokenizer.chat import _tojson

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    tools = [{"name": "get_weather", "parameters": {"city": "str"}}, {"name": "é", "parameters": {}}]
    conv = CONVERSATION if source is not GEMMA3_TEMPLATE else CONVERSATION
    for gen in (True, False):
        want = env.from_string(source).render(messages=conv, add_generation_prompt=gen, tools=tools,
                                              bos_token="<s>", eos_token="</s>")
        got = ChatTemplate(source).render(conv, add_generation_prompt=gen, tools=tools, bos_token="<s>",
                                          eos_token="</s>")
        assert got == want


def test_real_models_templates(smollm2_path):
    from oxillama.gguf import GGUFFile

    with GGUFFile(smollm2_path) as f:
        source = f.metadata["tokenizer.chat_template"]
    want = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(source).render(
        messages=CONVERSATION, add_generation_prompt=True)
    assert ChatTemplate(source).render(CONVERSATION) == want
