"""A chat request's prompt and tools: the messages rendered with the model's chat template (tools
included), what tool_choice means for generation (a grammar forcing a call), and reading calls back from
the output, whole (`ChatPlan.parse`) or streamed as tool-call deltas (`ChatDeltas`).

    plan = chat_plan(tokenizer, messages, tools, tool_choice, parallel_tool_calls=...)
    # generate plan.prompt (with plan.grammar when not None), then
    content, calls = plan.parse(text)            # or, streamed: plan.streamer().feed(piece) ...
"""
from __future__ import annotations

from dataclasses import dataclass

from oxillama.tools import (ToolCallStreamer, check_tools, detect_style, get_style, parse_tool_calls,
                            prepare_messages, resolve_tool_choice, tool_call_grammar)
from oxillama.tools.base import ToolCall, ToolStyle

__all__ = ["ChatPlan", "ChatDeltas", "chat_plan"]


@dataclass
class ChatPlan:
    """What a chat request turns into: the prompt text, the grammar that forces a call (tool_choice
    "required" or a named function; else None), and how to read the output back."""
    prompt: str
    style: ToolStyle
    mode: str                 # "none" | "auto" | "required"
    grammar: object = None

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """(content, calls) of the finished output. With tool_choice "none" the text is all content."""
        if self.mode == "none":
            return text, []
        return parse_tool_calls(text, self.style)

    def streamer(self) -> "ChatDeltas":
        return ChatDeltas(self)


class ChatDeltas:
    """Streamed chat output as delta dicts ({"content": ...} or {"tool_calls": [...]}) from text pieces."""

    def __init__(self, plan: ChatPlan):
        self._tools = None if plan.mode == "none" else ToolCallStreamer(plan.style)
        self.n_calls = 0

    def feed(self, piece: str) -> list[dict]:
        if self._tools is None:
            return [{"content": piece}] if piece else []
        out = self._tools.feed(piece)
        self.n_calls = len(self._tools.calls)
        return out

    def finish(self) -> list[dict]:
        if self._tools is None:
            return []
        out = self._tools.finish()
        self.n_calls = len(self._tools.calls)
        return out


def chat_plan(tokenizer, messages, tools=None, tool_choice=None, *, chat_template: str | None = None,
              parallel_tool_calls: bool = False, style: str | None = None) -> ChatPlan:
    """Render a chat request's messages (and tools) with the model's chat template (or
    `chat_template`: a template text or the name of one of the file's named templates).

    The tool-call format comes from the template (see oxillama.tools.detect_style) unless `style`
    names one. tool_choice "auto" offers the tools and parses the output; "required" or
    {"type": "function", "function": {"name": ...}} also constrains the output with a grammar built
    from the tools' parameter schemas (one call, or several with parallel_tool_calls=True); "none"
    neither offers nor parses."""
    tools = check_tools(tools)
    source = _template_source(tokenizer, chat_template)
    tool_style = get_style(style or detect_style(source))
    mode, allowed = resolve_tool_choice(tools, tool_choice)
    msgs = prepare_messages(messages, tools, tool_style, source, offer_tools=mode != "none")
    offered = tools if mode != "none" and tools else None
    prompt = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tools=offered,
                                           chat_template=chat_template)
    grammar = tool_call_grammar(allowed, tool_style, parallel=parallel_tool_calls) if mode == "required" else None
    return ChatPlan(prompt, tool_style, mode, grammar)


def _template_source(tokenizer, chat_template: str | None) -> str | None:
    if chat_template is None:
        try:
            return tokenizer._default_template_source()
        except Exception:       # no template at all: apply_chat_template will say so
            return None
    named = getattr(tokenizer._vocab, "chat_templates", {}) or {}
    return named.get(chat_template, chat_template)
