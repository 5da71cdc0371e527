"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: a message that is a JSON object with "name" and
"parameters", optionally after the <|python_tag|> token, several joined by ";":

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

(Meta's prompt format for custom tools; vLLM's `llama3_json` parser). "arguments" is accepted in place
of "parameters". A JSON object that is not a call (a plain JSON answer) stays content.
"""
from __future__ import annotations

import json

from oxillama.tools.base import DONE, INCOMPLETE, ToolStyle, call_from_object, decode_json, skip_ws

PYTHON_TAG = "<|python_tag|>"


class Llama3Style(ToolStyle):
    name = "llama3"
    markers = (PYTHON_TAG,)
    json_at_start = True

    def read_calls(self, text, pos, marker, final):
        items: list = []
        k = pos + len(marker)
        while True:
            j = skip_ws(text, k)
            if j >= len(text):
                if not final:
                    return items, pos if not items else k, INCOMPLETE
                return items or [text[pos:]], len(text), DONE
            got = decode_json(text, j)
            if got is None:
                if not final:
                    return items, pos if not items else k, INCOMPLETE
                return items + [text[pos if not items else k:]], len(text), DONE
            obj, end = got
            call = call_from_object(obj, ("parameters", "arguments"))
            if call is None:
                return items + [text[pos if not items else k:end]], end, DONE
            items.append(call)
            k = skip_ws(text, end)
            if k < len(text) and text[k] == ";":
                k += 1
                continue
            if k >= len(text) and not final:
                return items, end, INCOMPLETE
            return items, end, DONE

    def format_calls(self, calls):
        return "; ".join(json.dumps({"name": c["name"], "parameters": c["arguments"]}, ensure_ascii=False)
                         for c in calls)

    def grammar_wrap(self):
        return "", "; ", ""

    def call_schema(self, name, parameters):
        return {"type": "object", "properties": {"name": {"const": name}, "parameters": parameters},
                "required": ["name", "parameters"]}
