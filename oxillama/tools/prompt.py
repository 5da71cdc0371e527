"""The prompt side of tool calling: which format a chat template speaks, messages with tool calls and
tool results made renderable by it, and the grammar that forces a call (tool_choice "required" or a
named function)."""
from __future__ import annotations

import json

from oxillama.errors import InvalidArgumentError
from oxillama.tools.base import ToolStyle


def detect_style(template_source: str | None) -> str:
    """The tool-call format a chat template writes: "hermes", "mistral", "llama3", else "generic"."""
    src = template_source or ""
    if "<tool_call>" in src:
        return "hermes"
    if "[TOOL_CALLS]" in src:
        return "mistral"
    if "<|python_tag|>" in src or ("ipython" in src and "<|start_header_id|>" in src):
        return "llama3"
    return "generic"


def template_knows_tools(template_source: str | None) -> bool:
    """True if the template renders the `tools` variable (Hugging Face's convention)."""
    return bool(template_source) and "tools" in template_source


def text_of(content) -> str:
    """A message's content as text: a string, OpenAI's list of parts (text parts joined), or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
            elif isinstance(part, str):
                out.append(part)
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidArgumentError(f"message content part of type {kind!r} is not supported (text only)")
        return "".join(out)
    raise InvalidArgumentError(f"message content must be a string, a list of parts or None, "
                               f"got {type(content).__name__}")


def _calls_of(message) -> list[dict]:
    """[{"id", "name", "arguments": dict}] of an assistant message's OpenAI tool_calls."""
    out = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function", tc)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise InvalidArgumentError(f"tool call {fn.get('name')!r} has arguments that are not JSON: "
                                           f"{args[:80]!r}") from None
        out.append({"id": tc.get("id"), "name": fn.get("name"), "arguments": args})
    return out


def check_tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidArgumentError(f"tools must be a list, got {type(tools).__name__}")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidArgumentError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                                       "'parameters': {...}}}}")
        params = fn.get("parameters")
        # OpenAI: the arguments are a JSON object, so the schema describes one
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise InvalidArgumentError(f"tools[{i}] ({fn['name']!r}): parameters must be a JSON schema of an "
                                       f"object (type 'object'), got {params!r}")
        names = [t["function"]["name"] for t in tools[:i]]
        if fn["name"] in names:
            raise InvalidArgumentError(f"tools[{i}]: the function name {fn['name']!r} is given twice")
    return tools


def prepare_messages(messages, tools: list[dict], style: ToolStyle, template_source: str | None,
                     offer_tools: bool) -> list[dict]:
    """Messages the template can render: contents as text, "developer" as "system", and, where the
    template does not know tools, the tools described in a system message, earlier calls written
    in the model's syntax and tool results as user turns."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidArgumentError("messages must be a non-empty list of dicts")
    knows_tools = template_knows_tools(template_source)
    knows_tool_role = knows_tools or (bool(template_source) and "tool" in template_source.replace("tools", ""))
    out = []
    names_by_id = {}
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise InvalidArgumentError(f"messages[{i}] must be a dict with a 'role'")
        role = "system" if m["role"] == "developer" else m["role"]
        msg = {**m, "role": role, "content": text_of(m.get("content"))}
        if role == "assistant" and m.get("tool_calls"):
            calls = _calls_of(m)
            for c in calls:
                names_by_id[c["id"]] = c["name"]
            if knows_tools:
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
            else:
                msg.pop("tool_calls")
                text = style.format_calls(calls)
                msg["content"] = f"{msg['content']}\n{text}" if msg["content"] else text
        elif role in ("tool", "function"):
            name = m.get("name") or names_by_id.get(m.get("tool_call_id"))
            if not knows_tool_role:
                result = {"tool_response": {"name": name, "content": msg["content"]}} if name else \
                    {"tool_response": msg["content"]}
                msg = {"role": "user", "content": json.dumps(result, ensure_ascii=False)}
            elif name:
                msg["name"] = name
        out.append(msg)
    if offer_tools and tools and not knows_tools:
        prompt = style.system_prompt(tools) if hasattr(style, "system_prompt") else \
            "You can call these tools:\n" + "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
        if out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def resolve_tool_choice(tools: list[dict], tool_choice) -> tuple[str, list[dict]]:
    """("none" | "auto" | "required", the tools a call may use) for OpenAI's tool_choice."""
    if tool_choice is None:
        return ("auto" if tools else "none"), tools
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise InvalidArgumentError(f"tool_choice must be 'none', 'auto', 'required' or "
                                       f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
        if tool_choice == "required" and not tools:
            raise InvalidArgumentError("tool_choice='required' needs tools")
        return tool_choice, tools
    name = None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    if not isinstance(name, str):
        raise InvalidArgumentError(f"tool_choice {tool_choice!r} names no function")
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise InvalidArgumentError(f"tool_choice names {name!r}, which is not among the tools "
                                   f"({', '.join(t['function']['name'] for t in tools) or 'none given'})")
    return "required", chosen


def tool_call_grammar(tools: list[dict], style: ToolStyle, parallel: bool = False):
    """A Grammar whose every output is a call (one, or with parallel=True one or more) of one of
    `tools`, in `style`'s syntax, with arguments valid under each tool's parameters schema."""
    from oxillama.grammar import Grammar, json_schema_to_gbnf
    from oxillama.grammar.json_schema import gbnf_literal

    schemas = [style.call_schema(t["function"]["name"],
                                 t["function"].get("parameters") or {"type": "object", "properties": {}})
               for t in tools]
    whole = style.calls_schema(schemas, parallel)
    if whole is not None:
        return Grammar(json_schema_to_gbnf(whole))
    one = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    body = json_schema_to_gbnf(one)
    body = body.replace("root ::= ", "tool-call-json ::= ", 1)
    prefix, sep, suffix = style.grammar_wrap()
    lit = [gbnf_literal(s) if s else '""' for s in (prefix, sep, suffix)]
    more = f' ({lit[1]} tool-call-json)*' if parallel else ""
    return Grammar(f"root ::= {lit[0]} tool-call-json{more} {lit[2]}\n{body}")
