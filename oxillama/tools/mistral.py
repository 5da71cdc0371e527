"""Mistral tool calls: the [TOOL_CALLS] token, then a JSON array of calls,

    [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]

(Mistral's v3 tokenizer format, vLLM's `mistral` parser), or, from the v11 tokenizer on (Mistral Small
3.2, Magistral), one marker per call with the name and the arguments apart:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

Calls read before a malformed element stay calls; the rest of the text is content.
"""
from __future__ import annotations

import json
import re

from oxillama.tools.base import DONE, INCOMPLETE, ToolStyle, call_from_object, decode_json, skip_ws

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class MistralStyle(ToolStyle):
    name = "mistral"
    markers = (TOOL_CALLS,)

    def read_calls(self, text, pos, marker, final):
        j = skip_ws(text, pos + len(TOOL_CALLS))
        if j >= len(text):
            return ([], pos, INCOMPLETE) if not final else ([text[pos:]], len(text), DONE)
        if text[j] == "{":          # a single object without the array
            got = decode_json(text, j)
            if got is None:
                return ([], pos, INCOMPLETE) if not final else ([text[pos:]], len(text), DONE)
            call = call_from_object(got[0])
            return [call if call is not None else text[pos:got[1]]], got[1], DONE
        if text[j] != "[":
            return self._read_v11(text, pos, j, final)
        items: list = []
        k = j + 1
        while True:
            k = skip_ws(text, k)
            if k >= len(text):
                if not final:
                    return items, pos if not items else k, INCOMPLETE
                return items or [text[pos:]], len(text), DONE   # unterminated array: keep what was read
            if text[k] == "]":
                return items or [text[pos:k + 1]], k + 1, DONE
            got = decode_json(text, k)
            if got is None:
                if not final:
                    return items, pos if not items else k, INCOMPLETE
                return items + [text[pos if not items else k:]], len(text), DONE
            call = call_from_object(got[0])
            if call is None:
                return items + [text[pos if not items else k:]], len(text), DONE
            items.append(call)
            k = skip_ws(text, got[1])
            if k < len(text) and text[k] == ",":
                k += 1

    def _read_v11(self, text, pos, j, final):
        """name[ARGS]{json} after the marker."""
        m = _NAME.match(text, j)
        name_end = m.end() if m else j
        if text.startswith(ARGS, name_end) and name_end > j:
            k = skip_ws(text, name_end + len(ARGS))
            got = decode_json(text, k) if k < len(text) else None
            if got is None:
                return ([], pos, INCOMPLETE) if not final else ([text[pos:]], len(text), DONE)
            call = call_from_object({"name": text[j:name_end], "arguments": got[0]})
            return [call if call is not None else text[pos:got[1]]], got[1], DONE
        if not final and name_end == len(text) or ARGS.startswith(text[name_end:]) and not final:
            return [], pos, INCOMPLETE      # the name or "[ARGS]" may still be coming
        return [text[pos:j]], j, DONE

    def format_calls(self, calls):
        return TOOL_CALLS + json.dumps([{"name": c["name"], "arguments": c["arguments"]} for c in calls],
                                       ensure_ascii=False)

    def grammar_wrap(self):
        return TOOL_CALLS + "[", ", ", "]"
