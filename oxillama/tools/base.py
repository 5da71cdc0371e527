"""What every tool-call format shares: the ToolCall record, and one scanner that splits a model's
output into content and calls, used both on a finished text and on a growing one while streaming.

A format (a `ToolStyle`) says where a tool-call section may start (its `markers`, or a JSON object
opening the message) and how to read the calls from there (`read_calls`). The scanner walks the text:
everything outside a section is content; a section that does not parse stays content, so malformed
output never raises. On a growing text (final=False) a section that might still complete is held
back, so what is reported as content or as a finished call never changes as more text arrives:
streamed deltas join to exactly what the finished text parses to.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    """One function call the model asked for: `arguments` is the parsed JSON object."""
    name: str
    arguments: dict
    id: str = field(default_factory=new_call_id)

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_openai(self) -> dict:
        """OpenAI's message.tool_calls entry (arguments as a JSON string)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments_json()}}


# read_calls outcomes
DONE = "done"              # the section was read up to `end`
INCOMPLETE = "incomplete"  # the text may still grow into a valid section (final=False only)


def call_from_object(obj, args_keys=("arguments", "parameters")) -> ToolCall | None:
    """A ToolCall from {"name": ..., "arguments": {...}} (or "parameters"; arguments may also be a
    JSON string holding an object), else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = None
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    call_id = obj.get("id")
    if isinstance(call_id, str) and call_id:
        return ToolCall(obj["name"], args, call_id)
    return ToolCall(obj["name"], args)


def skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def decode_json(text: str, pos: int):
    """(value, end) of the JSON value at text[pos:], or None if there is none (yet)."""
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        return None


class ToolStyle:
    """A tool-call format. Subclasses set `name`, `markers` and `json_at_start`, and implement
    `read_calls`, `format_calls` (assistant history back into the model's syntax) and
    `grammar_wrap` (the text around forced calls)."""
    name = ""
    markers: tuple[str, ...] = ()
    json_at_start = False   # a message that opens with "{" (after blanks) may be a call section

    def read_calls(self, text: str, pos: int, marker: str, final: bool) -> tuple[list, int, str]:
        """Read the section starting at text[pos] (which starts with `marker`; "" for a JSON start):
        (items, end, DONE | INCOMPLETE). Items are ToolCalls and strs (text of the section that is
        not a call, e.g. malformed JSON: it stays content), in order. With final=False, INCOMPLETE
        says the section may still grow; its items so far must not change as it does."""
        raise NotImplementedError

    def format_calls(self, calls: list[dict]) -> str:
        raise NotImplementedError

    def grammar_wrap(self) -> tuple[str, str, str]:
        """(prefix, separator, suffix) around the JSON of forced calls, as GBNF literals' text."""
        raise NotImplementedError

    def call_schema(self, name: str, parameters: dict) -> dict:
        """The JSON schema of one call's JSON object in this format."""
        return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"]}

    def calls_schema(self, call_schemas: list[dict], parallel: bool) -> dict | None:
        """For formats whose calls sit in one JSON document: its schema; None if calls are wrapped
        one by one with grammar_wrap."""
        return None


@dataclass
class Scan:
    content: str             # the content so far (not stripped)
    calls: list[ToolCall]
    open_at: int | None      # where a section that may still complete starts (final=False), else None


def _held_back(text: str, markers) -> int:
    """Length of the longest suffix of text that is a proper prefix of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


def scan(style: ToolStyle, text: str, final: bool) -> Scan:
    content: list[str] = []
    calls: list[ToolCall] = []
    i = 0
    while True:
        m, marker = -1, ""
        if style.json_at_start and not calls and not "".join(content).strip():
            j = skip_ws(text, i)
            if j < len(text) and text[j] == "{":
                m = j
        if m < 0:
            for mk in style.markers:
                k = text.find(mk, i)
                if k >= 0 and (m < 0 or k < m):
                    m, marker = k, mk
        if m < 0:
            rest = text[i:]
            keep = 0 if final else _held_back(rest, style.markers)
            content.append(rest[:len(rest) - keep])
            return Scan("".join(content), calls, None if final or not keep else len(text) - keep)
        content.append(text[i:m])
        items, end, status = style.read_calls(text, m, marker, final)
        for item in items:
            if isinstance(item, str):
                content.append(item)
            else:
                calls.append(item)
        if status == INCOMPLETE:
            if final:       # not allowed by the contract; keep the text rather than lose it
                content.append(text[end:])
                return Scan("".join(content), calls, None)
            return Scan("".join(content), calls, end)
        if end <= m:        # nothing consumed: the marker itself is content
            end = m + max(len(marker), 1)
            content.append(text[m:end])
        i = end
        if i >= len(text):
            return Scan("".join(content), calls, None)


def finish_content(content: str) -> str | None:
    text = content.strip()
    return text or None


def parse_with(style: ToolStyle, text: str) -> tuple[str | None, list[ToolCall]]:
    s = scan(style, text, final=True)
    return finish_content(s.content), s.calls
