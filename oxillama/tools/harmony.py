"""gpt-oss's "harmony" output told apart into reasoning and answer.

After the generation prompt `<|start|>assistant`, a harmony model writes one or more messages:

    <|channel|>analysis<|message|>...the reasoning...<|end|><|start|>assistant<|channel|>final<|message|>...answer

each a header (`<|start|>ROLE` for all but the first, `<|channel|>CHANNEL`, optionally ` to=RECIPIENT` and
`<|constrain|>TYPE`), `<|message|>`, the text, and `<|end|>` (or `<|return|>` / `<|call|>`, which end the
generation). The `analysis` channel is the model's reasoning; `final` is the answer; `commentary` (preambles
and tool calls) is passed on as answer text. Output that does not open with a header is a plain answer, and with
reasoning_format "none" nothing is split: the text stays as it came.

`HarmonySplitter` has `ReasoningSplitter`'s interface (feed / finish / had_reasoning); oxillama.tools.reasoning
picks it for templates that write harmony (`HARMONY_MARKERS`).
"""
from __future__ import annotations

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
# (opening, closing) of a reasoning message, as reasoning.markers_of returns them for a harmony template
HARMONY_MARKERS = (CHANNEL + "analysis" + MESSAGE, "<|end|>")
REASONING_CHANNELS = ("analysis",)
MAX_HEADER = 512     # a header longer than this without <|message|> is not one: the text is a plain answer


def _partial_suffix(text: str, markers) -> int:
    """Length of the longest suffix of text that is a proper prefix of one of markers."""
    for k in range(min(max(map(len, markers)) - 1, len(text)), 0, -1):
        if any(m.startswith(text[-k:]) and len(m) > k for m in markers):
            return k
    return 0


def _channel_of(header: str) -> str:
    """The channel a header names: the word after <|channel|>, up to a blank or the next <|...|> token."""
    at = header.find(CHANNEL)
    if at < 0:
        return ""
    rest = header[at + len(CHANNEL):]
    for stop in (" ", "<|"):
        cut = rest.find(stop)
        if cut >= 0:
            rest = rest[:cut]
    return rest.strip()


class HarmonySplitter:
    """Streamed split of harmony messages into ("reasoning" | "answer", text) pieces that never change as more
    text comes; joined, they equal the split of the whole text."""

    def __init__(self, fmt: str | None = None, markers=HARMONY_MARKERS, opened: bool = False):
        from oxillama.tools.reasoning import check_format
        self.fmt = check_format(fmt)
        self.had_reasoning = False
        self._buf = ""
        self._channel = ""
        if self.fmt == "none":
            self._state = "plain"
        elif opened:        # the prompt ended with an analysis message's header
            self._state, self._channel, self.had_reasoning = "body", "analysis", True
        else:
            self._state = "first"   # before the first header: plain text here is a plain answer

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self._buf += piece
        return self._run(final=False)

    def finish(self) -> list[tuple[str, str]]:
        return self._run(final=True)

    def _run(self, final: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while self._buf:
            if self._state == "plain":
                out.append(("answer", self._buf))
                self._buf = ""
            elif self._state in ("first", "header"):
                at = self._buf.find(MESSAGE)
                head = self._buf if at < 0 else self._buf[:at]
                looks = head.startswith((START, CHANNEL)) or START.startswith(head) or CHANNEL.startswith(head)
                if not looks or len(head) > MAX_HEADER:
                    self._state = "plain"           # not harmony (or no longer): the text as it came
                    continue
                if at < 0:
                    if final and self._state == "first":
                        self._state = "plain"       # all of the output is the start of a header: plain text
                        continue
                    if final:                       # cut inside a later header: nothing of it is text
                        self._buf = ""
                    return out
                self._channel = _channel_of(head)
                self.had_reasoning |= self._channel in REASONING_CHANNELS
                self._buf = self._buf[at + len(MESSAGE):]
                self._state = "body"
            else:   # body
                kind = "reasoning" if self._channel in REASONING_CHANNELS else "answer"
                ends = [(i, m) for m in ENDS if (i := self._buf.find(m)) >= 0]
                if ends:
                    i, m = min(ends)
                    if i:
                        out.append((kind, self._buf[:i]))
                    self._buf = self._buf[i + len(m):]
                    self._state = "header"
                    continue
                keep = 0 if final else _partial_suffix(self._buf, ENDS)
                if len(self._buf) > keep:
                    out.append((kind, self._buf[:len(self._buf) - keep]))
                    self._buf = self._buf[len(self._buf) - keep:]
                return out
        return out
