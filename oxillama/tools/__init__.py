"""Tool calling: the formats models write calls in, read back into OpenAI-shaped calls.

    content, calls = parse_tool_calls(text, "hermes")     # calls: [ToolCall(name, arguments, id)]

Styles: "hermes" (Hermes 2 Pro, Qwen 2.5/3: <tool_call>{json}</tool_call>), "llama3" (Llama 3.x:
optional <|python_tag|>, {"name", "parameters"} objects joined by ";"), "mistral" ([TOOL_CALLS] and a
JSON array) and "generic" (one JSON object {"tool_calls": [...]}, for templates without tool syntax).
`detect_style(chat_template)` picks one; `ToolCallStreamer` turns streamed text into tool-call deltas;
`tool_call_grammar` forces a call. Malformed output never raises: it stays content.
"""
from __future__ import annotations

from oxillama.errors import InvalidArgumentError
from oxillama.tools.base import ToolCall, ToolStyle, parse_with
from oxillama.tools.generic import GenericStyle
from oxillama.tools.hermes import HermesStyle
from oxillama.tools.llama3 import Llama3Style
from oxillama.tools.mistral import MistralStyle
from oxillama.tools.prompt import (check_tools, detect_style, prepare_messages, resolve_tool_choice, text_of,
                                   tool_call_grammar)
from oxillama.tools.streaming import ToolCallStreamer

STYLES: dict[str, ToolStyle] = {s.name: s for s in (HermesStyle(), Llama3Style(), MistralStyle(), GenericStyle())}

__all__ = ["ToolCall", "ToolStyle", "STYLES", "get_style", "parse_tool_calls", "detect_style", "ToolCallStreamer",
           "tool_call_grammar", "prepare_messages", "resolve_tool_choice", "check_tools", "text_of"]


def get_style(style: str | ToolStyle) -> ToolStyle:
    if isinstance(style, ToolStyle):
        return style
    try:
        return STYLES[style]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unknown tool-call style {style!r} (one of {', '.join(STYLES)})") from None


def parse_tool_calls(text: str, style: str | ToolStyle = "generic") -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a model's output: the text outside tool-call markup (stripped; None if
    empty) and the calls in order. Malformed calls stay in the content; nothing raises."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"parse_tool_calls needs a str, got {type(text).__name__}")
    return parse_with(get_style(style), text)
