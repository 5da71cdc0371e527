"""Grammar-constrained generation on a real model (issue 7) and penalties against repetition (issue 6)."""
import json
import re

import jsonschema
import pytest

from oxillama import Grammar

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": "string", "maxLength": 8}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "address", "tags"],
    "additionalProperties": False,
}

PROMPTS = [
    "Describe a user of a web shop.", "Invent a character for a novel.", "Make up a library member.",
    "Give me a sample customer record.", "Describe the administrator of a small school website.",
    "Create a guest account for a hotel.", "Who is the oldest member of a chess club?",
    "Describe a teenage gamer.", "Make a profile for a retired teacher.", "Describe a new employee.",
    "Invent a pirate captain.", "Create a user who loves gardening.", "Describe a musician.",
    "Make up a scientist living in Paris.", "Describe a child who likes dinosaurs.",
    "Create a profile for a baker.", "Describe a marathon runner.", "Invent a robot with a name.",
    "Describe a forum moderator.", "Make up a traveller from Tokyo.",
]


@pytest.mark.parametrize("i", range(len(PROMPTS)))
def test_json_schema_output_parses_and_validates(smollm2, i):
    prompt = smollm2.tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[i] + " Answer in JSON."}])
    out = smollm2.generate(prompt, max_tokens=160, temperature=0.8, seed=100 + i,
                           response_format={"type": "json_object", "schema": SCHEMA})
    assert out.finish_reason == "stop", out
    jsonschema.validate(json.loads(out), SCHEMA)


def test_openai_json_schema_shape(smollm2):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}}}
    out = smollm2.generate("Is the sky blue? ", max_tokens=30, temperature=0, response_format=fmt)
    assert isinstance(json.loads(out)["answer"], bool)


ARITH = r"""
root ::= expr
expr ::= term (ws [-+] ws term)*
term ::= factor (ws [*/] ws factor)*
factor ::= [0-9]{1,3} | "(" ws expr ws ")"
ws ::= " "?
"""


@pytest.mark.parametrize("seed", range(5))
def test_arithmetic_grammar(smollm2, seed):
    g = Grammar.from_string(ARITH)
    out = smollm2.generate("Here is a long arithmetic expression: ", max_tokens=40, temperature=1.0, seed=seed,
                           grammar=g)
    assert re.fullmatch(r"[0-9+\-*/() ]+", out)
    if out.finish_reason == "stop":     # a complete expression: Python agrees it is one
        assert g.accepts(out), out
        eval(compile(out, "<expr>", "eval"), {"__builtins__": {}})
    else:                               # cut off by max_tokens: still on the way to an expression
        assert out.finish_reason == "length", out.finish_reason
        assert g.accepts_prefix(out), out


def _repeated_ngrams(tokens, n=3):
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


def test_dry_and_repeat_penalty_reduce_repetition(smollm2):
    prompt = "Repeat after me forever: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat,"
    plain = smollm2.generate(prompt, max_tokens=80, temperature=0)
    penalised = smollm2.generate(prompt, max_tokens=80, temperature=0, repeat_penalty=1.3,
                                 dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)
    assert _repeated_ngrams(penalised.tokens) < 0.5 * _repeated_ngrams(plain.tokens)


BOOL_FMT = {"type": "json_object", "schema": {
    "type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}}


def test_continuation_after_a_completed_grammar_is_unconstrained(smollm2):
    """generate(None) after a constrained call that completed its grammar continues as free text (as a
    new call without grammar= would in llama-cpp-python or transformers), instead of masking everything."""
    smollm2.reset()
    prompt = smollm2.tokenizer.apply_chat_template([{"role": "user", "content": "Is the sky blue? Answer in JSON."}])
    out = smollm2.generate(prompt, max_tokens=30, temperature=0, response_format=BOOL_FMT)
    assert out.finish_reason == "stop" and isinstance(json.loads(out)["answer"], bool)
    n_before = len(smollm2.tokens)
    more = smollm2.generate(None, max_tokens=12, temperature=0)
    assert len(more.tokens) >= 1
    assert smollm2.tokens[n_before:n_before + len(more.tokens)] == more.tokens
    # grammar= again constrains the continuation with a fresh grammar
    again = smollm2.generate(None, max_tokens=30, temperature=0, response_format=BOOL_FMT)
    assert isinstance(json.loads(again)["answer"], bool)


def test_continuation_after_an_unfinished_grammar_keeps_it(smollm2):
    smollm2.reset()
    g = Grammar.from_string(ARITH)
    first = smollm2.generate("Here is a long arithmetic expression: ", max_tokens=3, temperature=1.0, seed=3,
                             grammar=g)
    assert first.finish_reason == "length"
    rest = smollm2.generate(None, max_tokens=40, temperature=1.0)
    assert g.accepts_prefix(first + rest), first + rest
