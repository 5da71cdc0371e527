"""Hostile JSON schemas (issue 22): each ends in a GrammarError or compiles -- never a bare
OverflowError/TypeError/AttributeError or a RecursionError."""
import pytest

from oxillama.errors import GrammarError
from oxillama.grammar import Grammar, json_schema_to_gbnf

INF, NAN = float("inf"), float("nan")

# (schema, what the error names: the JSON pointer of the bad part and the keyword)
REFUSED = [
    ({"type": "integer", "minimum": INF}, "#: no integer"), ({"type": "integer", "maximum": -INF}, "#: no integer"),
    ({"type": "integer", "minimum": NAN}, "#: minimum must be a number"),
    ({"type": "integer", "exclusiveMaximum": -INF}, "#: no integer"),
    ({"type": "integer", "exclusiveMinimum": NAN}, "#: exclusiveMinimum must be a number"),
    ({"type": "integer", "minimum": 1e300}, "#: no integer"),
    ({"type": "string", "minLength": None}, "#: minLength must be"),
    ({"type": "string", "maxLength": None}, "#: maxLength must be"),
    ({"type": "array", "minItems": None}, "#: minItems must be"),
    ({"allOf": [{"properties": "x"}, {"type": "object"}]}, "#/allOf/0: properties must be an object"),
    ({"allOf": [{"required": None}, {"type": "object"}]}, "#/allOf/0: required must be a list"),
    ({"allOf": [{"required": [1]}, {"type": "object"}]}, "#/allOf/0: required must be a list"),
    ({"type": "object", "properties": {1: {"type": "string"}}}, "#: properties must be an object with string keys"),
    ({1: {"type": "string"}}, "#: schema keys must be strings"), ({None: 1}, "#: schema keys must be strings"),
    ({"type": "object", "required": [None]}, "#: required must be a list"), ({"enum": [NAN]}, "#: value nan is not JSON"),
]


@pytest.mark.parametrize("schema,names", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_with_grammar_error(schema, names):
    with pytest.raises(GrammarError) as e:
        Grammar.from_json_schema(schema)
    assert names in str(e.value)


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
