"""Hostile JSON schemas (issue 22): each ends in a GrammarError or compiles -- never a bare
OverflowError/TypeError/AttributeError or a RecursionError."""
import pytest

from oxillama.errors import GrammarError
from oxillama.grammar import Grammar, json_schema_to_gbnf

INF, NAN = float("inf"), float("nan")

REFUSED = [
    {"type": "integer", "minimum": INF}, {"type": "integer", "maximum": -INF}, {"type": "integer", "minimum": NAN},
    {"type": "integer", "exclusiveMaximum": -INF}, {"type": "integer", "exclusiveMinimum": NAN},
    {"type": "integer", "minimum": 1e300},
    {"type": "string", "minLength": None}, {"type": "string", "maxLength": None}, {"type": "array", "minItems": None},
    {"allOf": [{"properties": "x"}, {"type": "object"}]}, {"allOf": [{"required": None}, {"type": "object"}]},
    {"allOf": [{"required": [1]}, {"type": "object"}]},
    {"type": "object", "properties": {1: {"type": "string"}}}, {1: {"type": "string"}}, {None: 1},
    {"type": "object", "required": [None]}, {"enum": [NAN]},
]


@pytest.mark.parametrize("schema", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_with_grammar_error(schema):
    with pytest.raises(GrammarError):
        Grammar.from_json_schema(schema)


ACCEPTED = [
    ({"type": "integer", "minimum": -INF}, "-12"), ({"type": "integer", "maximum": INF}, "7"),
    ({"type": "integer", "minimum": -1e300, "maximum": 3}, "3"),
    ({"type": "array", "prefixItems": [{"type": "integer"}] * 1000}, "[" + ",".join(["1"] * 1000) + "]"),
    ({"type": "object", "properties": {"a" * 1000: {"type": "integer"}}, "additionalProperties": True},
     '{"' + "a" * 1000 + '":1}'),
    ({"type": "object", "properties": {"k": {}}, "additionalProperties": {"type": "integer"}},
     '{"k":1,"' + "b" * 1000 + '":2}'),
]


@pytest.mark.parametrize("schema, text", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_extreme_but_valid_schemas_compile(schema, text):
    g = Grammar.from_json_schema(schema)
    assert g.accepts(text)
    assert not g.accepts("x" + text)


def test_many_required_properties_compile():
    """5,000 required properties took 12.7 s (quadratic); bench/bench_grammar.py measures the scaling."""
    n = 5000
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)},
              "required": [f"p{i}" for i in range(n)]}
    assert json_schema_to_gbnf(schema).count("-kv ::=") == n
    Grammar.from_json_schema(schema)
