"""Streaming tool calls: text pieces in, OpenAI-shaped deltas out.

`ToolCallStreamer.feed(piece)` returns the deltas the new text settles: content that can no longer
turn into a call, and each call once its JSON is complete (one delta carrying its index, id, name
and whole arguments string, which OpenAI clients accumulate like any split). `finish()` settles the
rest. Joined, the deltas equal what parse_tool_calls gives for the whole text (see tools.base).
"""
from __future__ import annotations

from oxillama.tools.base import ToolCall, ToolStyle, finish_content, scan


class ToolCallStreamer:
    def __init__(self, style: ToolStyle):
        self.style = style
        self.text = ""
        self.content_sent = ""
        self.calls: list[ToolCall] = []

    def _deltas(self, content: str, calls: list[ToolCall]) -> list[dict]:
        out = []
        if content.startswith(self.content_sent) and len(content) > len(self.content_sent):
            out.append({"content": content[len(self.content_sent):]})
            self.content_sent = content
        for call in calls[len(self.calls):]:
            out.append({"tool_calls": [{"index": len(self.calls), "id": call.id, "type": "function",
                                        "function": {"name": call.name, "arguments": call.arguments_json()}}]})
            self.calls.append(call)
        return out

    def feed(self, piece: str) -> list[dict]:
        """Deltas ({"content": ...} or {"tool_calls": [...]}) settled by adding `piece`."""
        self.text += piece
        s = scan(self.style, self.text, final=False)
        # leading blanks are dropped and trailing ones held back, as the finished content is stripped
        return self._deltas(s.content.lstrip().rstrip(), s.calls)

    def finish(self) -> list[dict]:
        s = scan(self.style, self.text, final=True)
        return self._deltas(finish_content(s.content) or "", s.calls)

    @property
    def content(self) -> str | None:
        return self.content_sent or None
