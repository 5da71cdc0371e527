"""The generic JSON form, for models whose chat template has no tool syntax (SmolLM2, Gemma 3, ...):
the tools are described in a system message and the model answers a call with one JSON object,

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}

(as llama.cpp's generic chat handler does). {"tool_call": {...}} and a bare {"name": ..., "arguments":
...} are read too. Any other JSON, or text, is content.
"""
from __future__ import annotations

import json

from oxillama.tools.base import DONE, INCOMPLETE, ToolStyle, call_from_object, decode_json

SYSTEM_PROMPT = (
    "You can call these tools:\n{tools}\n\n"
    "To call tools, reply with only a JSON object of this form and nothing else:\n"
    '{{"tool_calls": [{{"name": "<tool name>", "arguments": {{<arguments as the tool\'s parameters say>}}}}]}}\n'
    "Otherwise answer in plain text."
)


class GenericStyle(ToolStyle):
    name = "generic"
    json_at_start = True

    def read_calls(self, text, pos, marker, final):
        got = decode_json(text, pos)
        if got is None:
            return ([], pos, INCOMPLETE) if not final else ([text[pos:]], len(text), DONE)
        obj, end = got
        raw = text[pos:end]
        if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list) and obj["tool_calls"]:
            calls = [call_from_object(c) for c in obj["tool_calls"]]
            return (calls if all(calls) else [raw]), end, DONE
        if isinstance(obj, dict) and "tool_call" in obj:
            call = call_from_object(obj["tool_call"])
            return [call or raw], end, DONE
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            return [call_from_object(obj) or raw], end, DONE
        return [raw], end, DONE

    def format_calls(self, calls):
        return json.dumps({"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls]},
                          ensure_ascii=False)

    def grammar_wrap(self):
        return "", "", ""

    def calls_schema(self, call_schemas, parallel):
        items = call_schemas[0] if len(call_schemas) == 1 else {"anyOf": call_schemas}
        array = {"type": "array", "items": items, "minItems": 1}
        if not parallel:
            array["maxItems"] = 1
        return {"type": "object", "properties": {"tool_calls": array}, "required": ["tool_calls"]}

    def system_prompt(self, tools: list[dict]) -> str:
        return SYSTEM_PROMPT.format(tools="\n".join(json.dumps(t.get("function", t), ensure_ascii=False)
                                                    for t in tools))
