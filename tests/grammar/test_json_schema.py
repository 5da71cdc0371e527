"""JSON Schema -> GBNF: outputs parse with json and validate with jsonschema; every keyword and rejection."""
import datetime
import json
import re
import uuid

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_helpers import random_walk
from oxillama.errors import GrammarError
from oxillama.grammar import Grammar, GrammarMatcher, json_schema_to_gbnf

NESTED = {
    "$defs": {
        "address": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city"]},
    },
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
        "address": {"$ref": "#/$defs/address"},
        "friends": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10}, "since": {"type": "string", "format": "date"}},
            "required": ["name", "since"]}, "maxItems": 2},
        "note": {"type": ["string", "null"], "maxLength": 10},
    },
    "required": ["name", "age", "role", "address"],
}

# a byte-level vocabulary with multi-byte tokens, tokens that split UTF-8 characters, and an end token
SYNTH_VOCAB = [bytes([b]) for b in range(256)] + [
    b'{"', b'":', b'", "', b'"', b"},", b"}", b"]", b"[", b", ", b"true", b"false", b"null", b"12", b"-3",
    b".5", b"e+7", "é".encode(), "€".encode()[:2], "€".encode()[2:], "日本".encode(), b"\\n", b"\\u00e9",
    b"admin", b"user", b'"guest"', b"2024-02-29", b"\n  ", b"  ", b"name", b"age", b"abc", b""]
EOG = len(SYNTH_VOCAB)
SYNTH_VOCAB.append(b"")
PREFER = np.array([i for i, t in enumerate(SYNTH_VOCAB) if t and (set(t) & set(b'"}],0123456789') or t in (
    b"true", b"false", b"null", b"admin", b"user", b'"guest"', b"2024-02-29"))])


def generate(schema, n, seed, max_tokens=1500):
    g = Grammar.from_json_schema(schema)
    rng = np.random.default_rng(seed)
    outs = []
    m = GrammarMatcher(g, SYNTH_VOCAB, [EOG])
    for _ in range(n):
        m.reset()
        data, ended = random_walk(m, rng, max_tokens=max_tokens, p_end=1.0, prefer=PREFER)
        if ended:
            text = data.decode("utf-8")
            assert g.accepts(text)
            outs.append(text)
    assert len(outs) >= n // 2, f"only {len(outs)} of {n} walks ended"
    return outs


@pytest.mark.parametrize("seed", range(4))
def test_generated_nested_objects_validate(seed):
    validator = jsonschema.Draft202012Validator(NESTED)
    for text in generate(NESTED, 5, seed):
        obj = json.loads(text)
        validator.validate(obj)
        for f in obj.get("friends", []):
            # the grammar checks the shape of a date, not the calendar (it allows 02-31)
            assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", f["since"])


def test_accepts_matches_validator_on_hand_written_cases():
    g = Grammar.from_json_schema(NESTED)
    ok = '{"name": "Ann", "age": 30, "role": "user", "tags": ["x", "y"], "address": {"city": "Oslo", "zip": "01234"}}'
    assert g.accepts(ok)
    jsonschema.validate(json.loads(ok), NESTED)
    for bad in [ok.replace('"user"', '"root"'), ok.replace("30", "151"), ok.replace('"01234"', '"1234"'),
                ok.replace('"name": "Ann", ', ""), ok.replace('"Ann"', '""')]:
        assert not g.accepts(bad), bad
        assert not jsonschema.Draft202012Validator(NESTED).is_valid(json.loads(bad))


@pytest.mark.parametrize("lo, hi", [(0, 150), (-123, 4567), (7, None), (None, -20), (None, None), (-5, 5),
                                    (100, 100), (19, 2001)])
def test_integer_ranges_are_exact(lo, hi):
    schema = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    g = Grammar.from_json_schema(schema)
    for n in range(-2100, 5000):
        want = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert g.accepts(str(n)) == want, n
    assert not g.accepts("007") and not g.accepts("1.0") and not g.accepts("+1")


def test_exclusive_bounds():
    g = Grammar.from_json_schema({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 7.5})
    assert [n for n in range(0, 10) if g.accepts(str(n))] == [4, 5, 6, 7]


PATTERNS = [r"^[a-c]+x?$", r"ab|cd", r"^(?:a|b\d){2,3}$", r"^\w+@\w+\.(com|org)$", r'^[^a"\\]*$', r"^a.c$",
            r'^"\\$', r"\d{2}", r"^$"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='abcdx1@.comrg"\\\n é', max_size=12))
def test_pattern_agrees_with_re_search(s):
    for p in PATTERNS:
        g = _grammar({"type": "string", "pattern": p})
        # JSON Schema regexes are ECMA-262: '$' is the very end, \d and \w are ASCII
        py = p[:-1] + r"\Z" if p.endswith("$") else p
        want = bool(re.search(py, s, re.ASCII))
        assert g.accepts(json.dumps(s, ensure_ascii=False)) == want, (p, s)
        # characters other than '"', '\\' and controls are matched raw only, so an escaped form
        # like \u00e9 may be refused, but whatever is accepted matches
        if g.accepts(json.dumps(s)):
            assert want, (p, s)


_grammars = {}


def _grammar(schema):
    key = json.dumps(schema)
    if key not in _grammars:
        _grammars[key] = Grammar.from_json_schema(schema)
    return _grammars[key]


def test_string_lengths_and_escapes():
    g = Grammar.from_json_schema({"type": "string", "minLength": 2, "maxLength": 3})
    assert g.accepts('"ab"') and g.accepts('"a\\n\\u00e9"') and g.accepts('"日本語"')
    assert not g.accepts('"a"') and not g.accepts('"abcd"') and not g.accepts('"a\nb"')


def test_formats():
    cases = {
        "date": (["2024-02-29", "1999-12-31"], ["2024-13-01", "2024-1-01", "24-01-01"]),
        # RFC 3339 full-time: the offset is required
        "time": (["23:59:59Z", "00:00:00Z", "12:30:00.123+02:00"], ["24:00:00Z", "12:60:00Z", "1:00:00Z",
                                                                  "23:59:59"]),
        "date-time": (["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.5-07:00"], ["2024-01-02 03:04:05Z"]),
        "uuid": ([str(uuid.UUID(int=12345678901234567890))], ["1234", "g" * 8 + "-0000-0000-0000-000000000000"]),
    }
    for fmt, (good, bad) in cases.items():
        g = Grammar.from_json_schema({"type": "string", "format": fmt})
        assert all(g.accepts(json.dumps(s)) for s in good), fmt
        assert not any(g.accepts(json.dumps(s)) for s in bad), fmt
    for text in generate({"type": "string", "format": "uuid"}, 4, 0):
        uuid.UUID(json.loads(text))
    for text in generate({"type": "string", "format": "date-time"}, 4, 1):
        s = json.loads(text)
        if s[8:10] <= "28":
            datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_enum_const_any_one_all_of():
    s = {"anyOf": [{"const": {"k": [1, None]}}, {"enum": ["é", 2.5, True]}, {"type": "null"}]}
    g = Grammar.from_json_schema(s)
    for v in [{"k": [1, None]}, "é", 2.5, True, None]:
        assert g.accepts(json.dumps(v, ensure_ascii=False)), v
    assert not g.accepts("3") and not g.accepts('"x"')
    g = Grammar.from_json_schema({"oneOf": [{"type": "integer"}, {"type": "boolean"}]})
    assert g.accepts("12") and g.accepts("false") and not g.accepts('"x"')
    s = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                   {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]}
    g = Grammar.from_json_schema(s)
    assert g.accepts('{"a": 1, "b": true}') and not g.accepts('{"a": 1}')
    for text in generate(s, 4, 2):
        jsonschema.validate(json.loads(text), s)


def test_arrays_prefix_items_and_lengths():
    s = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 3}],
         "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}
    g = Grammar.from_json_schema(s)
    v = jsonschema.Draft202012Validator(s)
    cases = [[], [1], [1, "a"], [1, "a", True], [1, "a", True, False], [1, "a", True, False, True], ["a"],
             [1, 2], [1, "a", 3]]
    for c in cases:
        assert g.accepts(json.dumps(c)) == v.is_valid(c), c
    g = Grammar.from_json_schema({"type": "array", "prefixItems": [{"const": 1}]})
    assert g.accepts("[1]") and g.accepts("[]") and not g.accepts("[1, 2]")
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}, "minItems": 2})
    assert g.accepts("[1, 2, 3]") and not g.accepts("[1]")


def test_additional_properties_never_duplicate_declared_keys():
    s = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
         "additionalProperties": {"type": "integer"}}
    g = Grammar.from_json_schema(s)
    assert g.accepts('{"name": "x", "extra": 1, "nam": 2, "names": 3, "": 4}')
    assert not g.accepts('{"name": "x", "name": 1}') and not g.accepts('{"n": 1, "n": 2}')
    assert not g.accepts('{"name": "x", "extra": "y"}')
    for text in generate(s, 6, 3):
        obj = json.loads(text)
        jsonschema.validate(obj, s)
        assert text.count('"name"') <= 1
    closed = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "null"}},
                                       "additionalProperties": False})
    assert closed.accepts('{"a": null}') and closed.accepts("{}") and not closed.accepts('{"b": null}')


def test_recursive_ref():
    s = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}}, "$ref": "#/$defs/node"}
    g = Grammar.from_json_schema(s)
    assert g.accepts('{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]}')
    assert not g.accepts('{"v": 1, "kids": [{"kids": []}]}')
    for text in generate(s, 4, 4):
        jsonschema.validate(json.loads(text), s)


def test_generic_json_and_schema_strings():
    assert Grammar.from_json_schema("{}").accepts('{"a": [1, {"b": null}]}')
    assert Grammar.from_json_schema(True).accepts("[]")
    assert Grammar.from_json_schema('{"type": "object"}').accepts('{"x": 1}')
    assert "root ::=" in json_schema_to_gbnf({"type": "boolean"})


@pytest.mark.parametrize("schema, words", [
    ({"type": "string", "minimum": 1}, "minimum"),
    ({"type": "number", "minimum": 1}, "minimum"),
    ({"type": "object", "minProperties": 1}, "minProperties"),
    ({"type": "string", "format": "email"}, "format"),
    ({"type": "string", "pattern": "(?=a)b"}, "lookaround"),
    ({"type": "string", "pattern": r"(a)\1"}, "escape"),
    ({"type": "string", "pattern": "a^b"}, "anchors"),
    ({"$ref": "http://example.com/s.json"}, "only references inside"),
    ({"$ref": "#/$defs/missing"}, "does not resolve"),
    ({"type": "frobnicate"}, "unknown type"),
    ({"not": {"type": "string"}}, "not"),
    ({"if": {}, "then": {}}, "if"),
    (False, "matches nothing"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "empty"),
    ({"type": "array", "maxItems": 10 ** 6}, "limit"),
    ({"enum": []}, "non-empty"),
    ("{not json", "not valid JSON"),
    ([1, 2], "must be an object"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf"),
])
def test_unsupported_or_invalid_schemas_raise(schema, words):
    with pytest.raises(GrammarError, match=re.escape(words)):
        Grammar.from_json_schema(schema)


def test_response_format_shapes():
    from oxillama.grammar import grammar_from_response_format as rf

    assert rf(None) is None and rf({"type": "text"}) is None
    g = rf({"type": "json_object"})
    assert g.accepts('{"a": [1]}') and not g.accepts("[1]") and not g.accepts("3")
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    for shape in ({"type": "json_object", "schema": schema},
                  {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}):
        g = rf(shape)
        assert g.accepts('{"x": 3}') and not g.accepts('{"x": "3"}')
    for bad in ({"type": "xml"}, {"type": "json_schema"}, "json", {}):
        with pytest.raises(GrammarError):
            rf(bad)


def test_deeply_nested_schema_raises_cleanly():
    s = {"type": "integer"}
    for _ in range(2000):
        s = {"type": "array", "items": s}
    with pytest.raises(GrammarError, match="nested deeper"):
        Grammar.from_json_schema(s)
    s = {"type": "integer"}
    for _ in range(20):
        s = {"type": "object", "properties": {"k": s}, "required": ["k"]}
    g = Grammar.from_json_schema(s)
    assert g.accepts('{"k": ' * 20 + "5" + "}" * 20)
