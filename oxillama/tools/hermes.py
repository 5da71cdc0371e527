"""Hermes / Qwen 2.5 / Qwen 3 tool calls: each call is a JSON object in its own tag pair,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

as the Hermes 2 Pro and Qwen 2.5 chat templates write them (vLLM's `hermes` parser, llama.cpp's
Hermes 2 Pro handler). A block that does not hold a call stays content; an unclosed last block at
the end of the output is still read (models often stop at the end-of-turn token instead).
"""
from __future__ import annotations

import json

from oxillama.tools.base import DONE, INCOMPLETE, ToolStyle, call_from_object

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesStyle(ToolStyle):
    name = "hermes"
    markers = (OPEN,)

    def read_calls(self, text, pos, marker, final):
        start = pos + len(OPEN)
        close = text.find(CLOSE, start)
        if close < 0 and not final:
            return [], pos, INCOMPLETE
        body = text[start:close] if close >= 0 else text[start:]
        end = close + len(CLOSE) if close >= 0 else len(text)
        try:
            call = call_from_object(json.loads(body))
        except ValueError:
            call = None
        return [call if call is not None else text[pos:end]], end, DONE

    def format_calls(self, calls):
        return "\n".join(f"{OPEN}\n{json.dumps({'name': c['name'], 'arguments': c['arguments']}, ensure_ascii=False)}"
                         f"\n{CLOSE}" for c in calls)

    def grammar_wrap(self):
        return OPEN + "\n", "\n" + CLOSE + "\n" + OPEN + "\n", "\n" + CLOSE
