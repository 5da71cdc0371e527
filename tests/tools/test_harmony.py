"""gpt-oss's harmony output (oxillama.tools.harmony) through the reasoning split the server uses: the analysis
channel is reasoning, the final channel the answer, streamed pieces join to the finished split whatever their
sizes; the template's markers pick it; a grammar constrains the final message only; the built-in template."""
from __future__ import annotations

import pytest

from oxillama.grammar import Grammar
from oxillama.tokenizer.chat import HARMONY_TEMPLATE, ChatTemplate, builtin_template
from oxillama.tools.harmony import HARMONY_MARKERS, HarmonySplitter
from oxillama.tools.reasoning import (grammar_after_thinking, markers_of, opens_thinking, reasoning_splitter,
                                      split_reasoning)

H = HARMONY_MARKERS
ANALYSIS = "<|channel|>analysis<|message|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>"
TEXTS = [
    f"{ANALYSIS}The user greets me. 2 < 3 and <|en is not an end.<|end|>{FINAL}Hello!",
    "<|channel|>final<|message|>Only an answer.",
    f"{ANALYSIS}cut off in the reasoning",
    f"{ANALYSIS}first thought<|end|><|start|>assistant<|channel|>analysis<|message|>second<|end|>{FINAL}ok<|return|>",
    f"{ANALYSIS}plan<|end|><|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>{FINAL}Done.",
    f"{ANALYSIS}cut in the next header<|end|><|start|>assista",
    "plain text, no harmony <|channel|>final<|message|>kept",
    "<|sta",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("step", [1, 2, 5, 11, 1000])
def test_streamed_split_joins_to_the_finished_split(text, step):
    s = reasoning_splitter("auto", H)
    assert isinstance(s, HarmonySplitter)
    parts = []
    for i in range(0, len(text), step):
        parts += s.feed(text[i:i + step])
    parts += s.finish()
    reasoning = "".join(t for kind, t in parts if kind == "reasoning")
    answer = "".join(t for kind, t in parts if kind == "answer")
    assert (reasoning if s.had_reasoning else None, answer) == split_reasoning(text, "auto", H)


def test_finished_split():
    assert split_reasoning(TEXTS[0], markers=H) == ("The user greets me. 2 < 3 and <|en is not an end.", "Hello!")
    assert split_reasoning(TEXTS[1], markers=H) == (None, "Only an answer.")
    assert split_reasoning(TEXTS[2], markers=H) == ("cut off in the reasoning", "")
    assert split_reasoning(TEXTS[3], markers=H) == ("first thoughtsecond", "ok")
    assert split_reasoning(TEXTS[4], markers=H) == ("plan", "Let me check.Done.")   # commentary is shown
    assert split_reasoning(TEXTS[5], markers=H) == ("cut in the next header", "")
    assert split_reasoning(TEXTS[6], markers=H) == (None, TEXTS[6])                  # not harmony: untouched
    assert split_reasoning(TEXTS[7], markers=H) == (None, "<|sta")


def test_none_keeps_the_output_as_it_came():
    assert split_reasoning(TEXTS[0], "none", H) == (None, TEXTS[0])


def test_a_prompt_that_opened_the_analysis():
    prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant" + ANALYSIS
    assert opens_thinking(prompt, H)
    assert split_reasoning(f"thinking<|end|>{FINAL}answer", "deepseek", H, opened=True) == ("thinking", "answer")


def test_a_harmony_template_picks_the_harmony_split():
    assert markers_of(HARMONY_TEMPLATE) == H
    assert markers_of("{{ '<think>' }}...{{ '</think>' }}") == ("<think>", "</think>")


def test_grammar_constrains_the_final_message():
    answer = Grammar.from_json_schema({"type": "object", "properties": {"n": {"type": "integer"}},
                                       "required": ["n"]})
    g = grammar_after_thinking(answer, H)
    assert g.accepts('<|channel|>final<|message|>{"n": 1}')                      # reasoning is optional
    assert g.accepts(f'{ANALYSIS}free text, {{"n": "x"}} <|en <|end|>{FINAL}{{"n": 2}}')
    assert not g.accepts(f'{ANALYSIS}ok<|end|>{FINAL}not json')                  # the answer is constrained
    assert not g.accepts('{"n": 1}')                                             # the final header is required
    assert not g.accepts(f'{ANALYSIS}a<|end|>b<|end|>{FINAL}{{"n": 2}}')         # one analysis message


def test_builtin_template_renders_harmony_turns():
    assert builtin_template({"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"})[0] == "harmony"
    out = ChatTemplate(HARMONY_TEMPLATE).render([{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hi"},
                                                 {"role": "assistant", "content": "Hello"},
                                                 {"role": "user", "content": "Again"}])
    assert out.startswith("<|start|>system<|message|>")
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>" in out
    assert "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello<|end|>" in out
    assert out.endswith("<|start|>user<|message|>Again<|end|><|start|>assistant")
