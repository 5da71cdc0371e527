"""Thinking told apart from the answer (oxillama.tools.reasoning): the finished split, the streamed
split joining to it whatever the piece sizes, the formats, and the grammar that lets a model think
before a constrained answer."""
from __future__ import annotations

import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.grammar import Grammar
from oxillama.tools.reasoning import (MARKERS, ReasoningSplitter, grammar_after_thinking, markers_of,
                                      opens_thinking, split_reasoning)

TEXTS = [
    "<think>\nThe user greets me. I greet back.\n</think>\n\nHello!",
    "  <think>a < b and </th is not the end</think>answer",
    "<think>cut off before the end",
    "<think></think>just the answer",
    "no thinking here <think>this stays</think>",
    "<thi",
    "",
    "<think>\n\n</think>\n\n",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_streamed_split_joins_to_the_finished_split(text, step):
    s = ReasoningSplitter("auto")
    parts = []
    for i in range(0, len(text), step):
        parts += s.feed(text[i:i + step])
    parts += s.finish()
    reasoning = "".join(t for kind, t in parts if kind == "reasoning")
    answer = "".join(t for kind, t in parts if kind == "answer")
    want_reasoning, want_answer = split_reasoning(text, "auto")
    assert (reasoning if s.had_reasoning else None, answer) == (want_reasoning, want_answer)


def test_finished_split():
    assert split_reasoning(TEXTS[0]) == ("The user greets me. I greet back.", "Hello!")
    assert split_reasoning(TEXTS[1]) == ("a < b and </th is not the end", "answer")
    assert split_reasoning(TEXTS[2]) == ("cut off before the end", "")      # never closed: all reasoning
    assert split_reasoning(TEXTS[4]) == (None, TEXTS[4])     # a marker after text is not thinking
    assert split_reasoning(" plain answer ") == (None, " plain answer ")   # untouched without thinking


def test_none_keeps_the_thinking_in_the_answer():
    assert split_reasoning(TEXTS[0], "none") == (None, TEXTS[0])


def test_deepseek_reads_thinking_the_prompt_opened():
    text = "The prompt opened it.</think>The answer"
    assert split_reasoning(text, "deepseek", opened=True) == ("The prompt opened it.", "The answer")
    assert split_reasoning(text, "auto", opened=True) == (None, text)
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking("<|im_start|>assistant\n")


def test_markers_come_from_the_template():
    assert markers_of("{{ '<|START_THINKING|>' }}...{{ '<|END_THINKING|>' }}") == MARKERS[1]
    assert markers_of(None) == ("<think>", "</think>")
    text = "<|START_THINKING|>hmm<|END_THINKING|>ok"
    assert split_reasoning(text, markers=MARKERS[1]) == ("hmm", "ok")


def test_unknown_format_is_refused():
    with pytest.raises(InvalidArgumentError, match="reasoning_format"):
        ReasoningSplitter("r1")


def test_grammar_applies_to_the_answer_after_the_thinking():
    answer = Grammar.from_json_schema({"type": "object", "properties": {"n": {"type": "integer"}},
                                       "required": ["n"]})
    g = grammar_after_thinking(answer)
    assert g.accepts('{"n": 1}')                                   # thinking is optional
    assert g.accepts('<think>free text, even {"n": "x"} </thi</think>\n{"n": 2}')
    assert not g.accepts("<think>ok</think>not json")              # the answer is still constrained
    assert not g.accepts('<think>a</think>b</think>{"n": 2}')       # one section, closed once
    assert g.accepts('<think>a << b, </th</think>{"n": 2}')        # partial markers are text
    assert not g.accepts('<think>a </think> b</think>{"n": 2}')
    for open_, close in MARKERS:
        other = grammar_after_thinking(answer, (open_, close))
        assert other.accepts(f'{open_}x {close[:-1]} y{close}{{"n": 4}}')
        assert not other.accepts(f'{open_}x{close}y{close}{{"n": 4}}')
    opened = grammar_after_thinking(answer, opened=True)
    assert opened.accepts('thinking the prompt opened</think>{"n": 3}')
    assert not opened.accepts('{"n": 3}')
