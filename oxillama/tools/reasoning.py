"""Reasoning ("thinking") output: the part of a reasoning model's output between its thinking markers
(`<think>...</think>` for DeepSeek R1, Qwen 3 and most others) told apart from the answer.

    reasoning, answer = split_reasoning(text, "auto")       # reasoning None when there is none

Formats, as llama.cpp's server names them (`--reasoning-format`):
- "none": no split, the thinking stays in the answer;
- "auto" (the default): split when the output opens with a thinking marker (after blanks);
- "deepseek": as "auto", and also when the prompt already opened the thinking (templates that end the
  generation prompt with "<think>"): then the output is reasoning up to the closing marker.
The reasoning has its surrounding blanks removed, and so has the start of the answer after the
closing marker. Thinking that never closes (the output was cut) is all reasoning.

`ReasoningSplitter` does the same on a growing text: feed() returns ("reasoning" | "answer", text)
pieces that never change as more text comes, holding back what may still be a marker; joined, they
equal split_reasoning of the whole text.

gpt-oss's harmony format (reasoning in an `analysis` message, the answer in a `final` one) is not a pair of
markers around the thinking: templates that write it get HARMONY_MARKERS from markers_of, and
reasoning_splitter() then gives oxillama.tools.harmony's splitter, with the same interface.
"""
from __future__ import annotations

from oxillama.errors import InvalidArgumentError
from oxillama.tools.harmony import HARMONY_MARKERS, HarmonySplitter

FORMATS = ("none", "auto", "deepseek")
# (open, close) pairs models write their thinking between; a template that names one picks it
MARKERS = (("<think>", "</think>"), ("<|START_THINKING|>", "<|END_THINKING|>"), ("[THINK]", "[/THINK]"),
           ("<thinking>", "</thinking>"))
_BLANKS = " \t\r\n"


def check_format(fmt: str | None) -> str:
    fmt = "auto" if fmt is None else fmt
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"reasoning_format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def markers_of(template_source: str | None) -> tuple[str, str]:
    """The thinking markers a chat template uses (the first known pair it names; HARMONY_MARKERS for a
    template that writes harmony channels), else <think>."""
    if template_source and "<|channel|>" in template_source and "<|message|>" in template_source:
        return HARMONY_MARKERS
    for pair in MARKERS:
        if template_source and pair[1] in template_source:
            return pair
    return MARKERS[0]


def opens_thinking(prompt: str, markers: tuple[str, str] = MARKERS[0]) -> bool:
    """True if the prompt leaves the model inside its thinking (it ends with the opening marker)."""
    return prompt.rstrip(_BLANKS).endswith(markers[0])


def split_reasoning(text: str, fmt: str | None = None, markers: tuple[str, str] = MARKERS[0],
                    opened: bool = False) -> tuple[str | None, str]:
    """(reasoning or None, answer) of a finished output; opened: the prompt opened the thinking."""
    s = reasoning_splitter(fmt, markers, opened)
    parts = s.feed(text) + s.finish()
    reasoning = "".join(t for kind, t in parts if kind == "reasoning")
    answer = "".join(t for kind, t in parts if kind == "answer")
    return (reasoning if s.had_reasoning else None), answer


def reasoning_splitter(fmt: str | None = None, markers: tuple[str, str] = MARKERS[0], opened: bool = False):
    """The streamed splitter for these markers: a ReasoningSplitter, or a HarmonySplitter for HARMONY_MARKERS."""
    if tuple(markers) == HARMONY_MARKERS:
        return HarmonySplitter(fmt, markers, opened)
    return ReasoningSplitter(fmt, markers, opened)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class ReasoningSplitter:
    """Streamed split of reasoning and answer (see the module's docstring)."""

    def __init__(self, fmt: str | None = None, markers: tuple[str, str] = MARKERS[0], opened: bool = False):
        self.fmt = check_format(fmt)
        self.open, self.close = markers
        self.had_reasoning = False
        self._buf = ""
        if self.fmt == "none":
            self._state = "answer"
        elif opened and self.fmt == "deepseek":
            self._state, self.had_reasoning = "thinking", True
        else:
            self._state = "start"
        self._lead = True           # blanks at the start of the reasoning / the answer are dropped

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self._buf += piece
        return self._run(final=False)

    def finish(self) -> list[tuple[str, str]]:
        return self._run(final=True)

    def _run(self, final: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while True:
            if self._state == "start":
                head = self._buf.lstrip(_BLANKS)
                if head.startswith(self.open):
                    self._buf = head[len(self.open):]
                    self._state, self.had_reasoning, self._lead = "thinking", True, True
                    continue
                if not final and (not head or self.open.startswith(head)):
                    return out      # may still become the opening marker
                self._state, self._lead = "answer", False     # no thinking: the text is left as it came
                continue
            if self._state == "thinking":
                if self._lead:
                    self._buf = self._buf.lstrip(_BLANKS)
                    if not self._buf:
                        return out
                    self._lead = False
                end = self._buf.find(self.close)
                if end >= 0:
                    text = self._buf[:end].rstrip(_BLANKS)
                    if text:
                        out.append(("reasoning", text))
                    self._buf = self._buf[end + len(self.close):]
                    self._state, self._lead = "answer", True
                    continue
                if final:
                    text = self._buf.rstrip(_BLANKS)
                    keep = 0
                else:       # hold back a possible marker, and trailing blanks (they may end the reasoning)
                    keep = _partial_suffix(self._buf, self.close)
                    text = self._buf[:len(self._buf) - keep].rstrip(_BLANKS)
                if text:
                    out.append(("reasoning", text))
                    self._buf = self._buf[len(text):]
                if final:
                    self._buf = ""
                return out
            # answer
            if self._lead:
                self._buf = self._buf.lstrip(_BLANKS)
                if not self._buf:
                    return out
                self._lead = False
            if self._buf:
                out.append(("answer", self._buf))
                self._buf = ""
            return out


def grammar_after_thinking(grammar, markers: tuple[str, str] = MARKERS[0], opened: bool = False):
    """`grammar` for the answer, after an optional thinking section (the opening marker, any text
    without the closing marker, the closing marker and blanks; without the opening marker when the
    prompt opened the thinking, and then the section is required)."""
    from oxillama.grammar import Grammar
    from oxillama.grammar.json_schema import gbnf_literal
    if tuple(markers) == HARMONY_MARKERS:
        return _harmony_grammar(grammar, opened)
    open_, close = markers
    section = f"{gbnf_literal(close)} [ \\t\\n]*" if opened else \
        f"{gbnf_literal(open_)} oxl-thinking-text {gbnf_literal(close)} [ \\t\\n]*"
    head = "oxl-thinking-section" if opened else "oxl-thinking-section?"
    text = (f"{grammar.text}\noxl-thinking-root ::= [ \\t\\n]* {head} {grammar.root}\n"
            f"oxl-thinking-section ::= {'oxl-thinking-text ' if opened else ''}{section}\n"
            + _text_without(close, "oxl-thinking-text"))
    return Grammar(text, root="oxl-thinking-root")


def _harmony_grammar(grammar, opened: bool):
    """`grammar` for the final message after an optional analysis message (required, without its header, when
    the prompt opened it)."""
    from oxillama.grammar import Grammar
    from oxillama.grammar.json_schema import gbnf_literal as lit
    from oxillama.tools import harmony as h
    analysis = f"{lit(HARMONY_MARKERS[0])} oxl-thinking-text" if not opened else "oxl-thinking-text"
    section = f"{analysis} {lit(HARMONY_MARKERS[1] + h.START + 'assistant')}"
    head = f"({section})" if opened else f"({section})?"
    final = lit(h.CHANNEL + "final" + h.MESSAGE)
    text = (f"{grammar.text}\noxl-thinking-root ::= {head} {final} {grammar.root}\n"
            + _text_without(HARMONY_MARKERS[1], "oxl-thinking-text"))
    return Grammar(text, root="oxl-thinking-root")


def _text_without(marker: str, name: str) -> str:
    """GBNF rules: `name` matches any text that does not contain `marker` (whose first character
    occurs only there, so a failed partial match restarts at that character or at nothing).
    State j has matched marker[:j]: `-r{j}` continues a partial match that must still break off,
    `-p{j}` one that may end the text (the marker that follows then closes it)."""
    from oxillama.grammar.json_schema import gbnf_literal
    first, n = marker[0], len(marker)
    if first in marker[1:]:
        raise InvalidArgumentError(f"the thinking marker {marker!r} repeats its first character")
    lit = gbnf_literal
    rules = [f"{name} ::= ([^{_class_char(first)}] | {lit(first)} {name}-r1)* ({lit(first)} {name}-p1)?"]
    for j in range(1, n):
        brk = f"[^{_class_char(marker[j])}{_class_char(first)}]"
        go = f" | {lit(marker[j])} {name}-r{j + 1}" if j + 1 < n else ""
        rules.append(f"{name}-r{j} ::= {brk} | {lit(first)} {name}-r1{go}")
        go = f" | {lit(marker[j])} {name}-p{j + 1}" if j + 1 < n else ""
        rules.append(f"{name}-p{j} ::= \"\" | {lit(first)} {name}-p1{go}")
    return "\n".join(rules) + "\n"


def _class_char(c: str) -> str:
    """c escaped for a GBNF character class."""
    return {"]": "\\]", "\\": "\\\\", "^": "\\^", "-": "\\-", "\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, c)
