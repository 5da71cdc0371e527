"""Chat templates: the jinja2 text in `tokenizer.chat_template`, rendered in a sandbox.

Templates come from model files, i.e. from strangers, so they run in jinja2's ImmutableSandboxedEnvironment:
no attribute starting with "_", no unsafe callables, no mutation of lists/dicts passed in. Everything that
goes wrong -- syntax, a sandbox violation, `raise_exception(...)` from the template, a render-time error --
comes out as ChatTemplateError. The environment matches the one Hugging Face `transformers` renders with
(trim_blocks, lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII), so prompts come out the same.
"""
from __future__ import annotations

import datetime
import json
import logging

from oxillama.errors import ChatTemplateError

logger = logging.getLogger("oxillama.tokenizer")


def _raise_exception(message):
    raise ChatTemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strict_sandbox_class():
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class StrictSandbox(ImmutableSandboxedEnvironment):
        """Unsafe attribute access raises at once (jinja2's default yields an Undefined that prints as "")."""

        def unsafe_undefined(self, obj, attribute):
            raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    return StrictSandbox


def make_environment(sandboxed: bool = True):
    """The jinja2 environment chat templates render in (sandboxed=False only for comparisons in tests)."""
    import jinja2
    import jinja2.ext

    _StrictSandbox = _strict_sandbox_class()
    cls = _StrictSandbox if sandboxed else jinja2.Environment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols],
              undefined=jinja2.Undefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _check_messages(messages) -> list:
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ChatTemplateError(f"messages[{i}] must be a dict, got {type(msg).__name__}")
        if "role" not in msg:
            raise ChatTemplateError(f"messages[{i}] has no 'role'")
    return list(messages)


class ChatTemplate:
    """One chat template; compiled on first use."""

    def __init__(self, source: str):
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("a chat template must be a non-empty string")
        self.source = source
        self._template = None

    def __getstate__(self):   # the compiled template holds a sandbox class: pickle the source only
        return {"source": self.source, "_template": None}

    def _compiled(self):
        if self._template is None:
            import jinja2

            try:
                self._template = make_environment().from_string(self.source)
            except jinja2.TemplateSyntaxError as exc:
                raise ChatTemplateError(f"chat template has a syntax error (line {exc.lineno}): {exc.message}") \
                    from None
        return self._template

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **kwargs) -> str:
        import jinja2
        from jinja2.sandbox import SecurityError

        template = self._compiled()
        context = dict(kwargs)
        context.update(messages=_check_messages(messages), add_generation_prompt=bool(add_generation_prompt))
        if tools is not None:
            context["tools"] = tools
        try:
            return template.render(**context)
        except ChatTemplateError:
            raise
        except SecurityError as exc:
            raise ChatTemplateError(f"chat template tried to leave its sandbox: {exc}") from None
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed to render: {exc}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError) as exc:
            raise ChatTemplateError(f"chat template failed to render: {type(exc).__name__}: {exc}") from None


# For GGUF files that carry no template, one is picked by the turn tokens the vocabulary holds, as
# llama-cpp-python guesses a chat format. Gemma folds a system message into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' }}"
    "{{ (prefix if loop.first else '') + m['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
BUILTIN_TEMPLATES = [  # (name, tokens the vocabulary must have, template)
    ("gemma", ("<start_of_turn>", "<end_of_turn>"), GEMMA_TEMPLATE),
    ("chatml", ("<|im_start|>", "<|im_end|>"), CHATML_TEMPLATE),
]


def builtin_template(special_texts) -> tuple[str, str] | None:
    """(name, template) of the first built-in format whose turn tokens are all among `special_texts`."""
    for name, needed, source in BUILTIN_TEMPLATES:
        if all(t in special_texts for t in needed):
            return name, source
    return None
