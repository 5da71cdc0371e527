"""JSON Schema -> GBNF.

Supported (anything else raises GrammarError rather than being ignored):

* ``type``: string, number, integer, boolean, null, object, array, or a list of them; no type = any
  JSON value; ``true`` = any value.
* ``enum``, ``const`` (any JSON values), ``anyOf``, ``oneOf`` (as anyOf: a value matching two
  branches is still produced, so keep oneOf branches disjoint), ``allOf`` (object schemas, merged).
* ``$ref`` to this document (``#``, ``#/$defs/...``, ``#/definitions/...``, any JSON pointer);
  recursive schemas work. ``$defs``/``definitions`` hold the targets.
* objects: ``properties``, ``required``, ``additionalProperties`` (false, true or a schema).
  Properties come out in the schema's order. Without ``additionalProperties`` no extra keys are
  generated (a subset of what the schema allows, as llama.cpp does). Extra keys never repeat a
  declared name and are written without escapes, so a parsed object has no duplicate keys.
* arrays: ``items`` (schema or false), ``prefixItems``, ``minItems``, ``maxItems``
  (``prefixItems`` without ``items`` allows no further items).
* strings: ``minLength``, ``maxLength``, ``format`` (date, time, date-time, uuid), ``pattern``.
* integers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``.
* annotations are ignored: title, description, $schema, $id, $comment, default, examples, ...

``pattern`` regex subset: literals, escapes (``\\d \\w \\s \\D \\W \\S``, ``\\n \\t \\r``, ``\\xHH``,
``\\uHHHH``, escaped punctuation), ``.``, classes ``[...]`` with ranges and negation, groups
``(...)`` and ``(?:...)``, ``|``, quantifiers ``* + ? {m} {m,} {m,n}`` (lazy forms accepted),
``^`` at the start and ``$`` at the end. Without ``^``/``$`` the match may start/end anywhere, as
JSON Schema's search semantics say. Characters are matched as written (raw), except '"', '\\' and
control characters, which take their JSON escapes: a ``\\u00e9`` spelling of "é" is not
accepted where a pattern applies. Lookaround, backreferences and other anchors raise.

Numbers are at most 16 integer digits and 3 exponent digits; whitespace between tokens is at
most one newline and 20 blanks, so a model cannot stall in whitespace.
"""
from __future__ import annotations

import json
import math
import re

from oxillama.errors import GrammarError
from oxillama.grammar.gbnf import MAX_REPETITION, merge_ranges, negate_ranges

_ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated",
                "readOnly", "writeOnly", "$defs", "definitions", "$anchor"}
_KEYWORDS = {
    None: {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"},
    "string": {"minLength", "maxLength", "format", "pattern"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "number": set(),
    "boolean": set(),
    "null": set(),
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "prefixItems", "minItems", "maxItems"},
}
_ALL_KEYWORDS = set().union(*_KEYWORDS.values()) | _ANNOTATIONS

PRIMITIVES = {
    "space": r'| " " | "\n" [ \t]{0,20}',
    "char": r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "plain-char": r'[^"\\\x00-\x1F]',
    "string": r'"\"" char* "\"" space',
    "integral-part": r'"0" | [1-9] [0-9]{0,15}',
    "integer": r'"-"? integral-part space',
    "number": r'"-"? integral-part ("." [0-9]+)? ([eE] [-+]? [0-9]{1,3})? space',
    "boolean": r'("true" | "false") space',
    "null": r'"null" space',
    "value": r'object | array | string | number | boolean | null',
    "object": r'"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
    "array": r'"[" space ( value ("," space value)* )? "]" space',
    "date": r'[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )',
    "time": r'( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? '
            r'( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
    "date-time": r'date "T" time',
    "uuid": r'[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
}
_PRIMITIVE_DEPS = {
    "string": ["char", "space"], "integer": ["integral-part", "space"], "number": ["integral-part", "space"],
    "boolean": ["space"], "null": ["space"], "value": ["object", "array", "string", "number", "boolean", "null"],
    "object": ["string", "value", "space"], "array": ["value", "space"], "date-time": ["date", "time"],
}
_FORMATS = ("date", "time", "date-time", "uuid")
MAX_SCHEMA_DEPTH = 100
"""Deepest accepted nesting of sub-schemas (through properties, items, combinators and $ref chains)."""


def gbnf_literal(s: str) -> str:
    """A GBNF string literal matching exactly s."""
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _class_char(cp: int) -> str:
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def gbnf_class(ranges) -> str:
    """A GBNF character class of inclusive code-point ranges."""
    parts = [_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges]
    return "[" + "".join(parts) + "]"


# code points a JSON string may hold unescaped
_RAW_OK = merge_ranges([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])


def _intersect(a, b) -> tuple:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def json_char_expr(ranges) -> str:
    """GBNF for one decoded string character in `ranges`, as it appears inside a JSON string."""
    ranges = merge_ranges(ranges)
    alts = []
    raw = _intersect(ranges, _RAW_OK)
    if raw:
        alts.append(gbnf_class(raw))
    for lo, hi in _intersect(ranges, ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C))):
        for cp in range(lo, hi + 1):
            alts.append(gbnf_literal(json.dumps(chr(cp))[1:-1]))
    if not alts:
        raise GrammarError("pattern has a character class that matches nothing")
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _same_len_range(lo: str, hi: str) -> str:
    """GBNF for the decimal strings of the same length between lo and hi (leading zeros kept)."""
    n = len(lo)
    if lo == hi:
        return f'"{lo}"'
    if n == 1:
        return f"[{lo}-{hi}]"
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_same_len_range(lo[1:], hi[1:])})'
    alts = []
    d0, d1 = int(lo[0]), int(hi[0])
    if lo[1:] == "0" * (n - 1):
        first = d0
    else:
        alts.append(f'"{lo[0]}" ({_same_len_range(lo[1:], "9" * (n - 1))})')
        first = d0 + 1
    if hi[1:] == "9" * (n - 1):
        last = d1
    else:
        last = d1 - 1
    if first <= last:
        alts.append(f"[{first}-{last}] [0-9]{{{n - 1}}}")
    if hi[1:] != "9" * (n - 1):
        alts.append(f'"{hi[0]}" ({_same_len_range("0" * (n - 1), hi[1:])})')
    return " | ".join(alts)


_MAX_DIGITS = 16


def _nonneg_range(a: int, b: int | None) -> list:
    """Alternatives for the canonical decimal integers in [a, b] (b None: up to 16 digits)."""
    la = len(str(a))
    if b is None:
        if la > _MAX_DIGITS:
            raise GrammarError(f"integer minimum {a} has more than {_MAX_DIGITS} digits")
        alts = [_same_len_range(str(a), "9" * la)]
        if la < _MAX_DIGITS:
            alts.append(f"[1-9] [0-9]{{{la},{_MAX_DIGITS - 1}}}")
        return alts
    alts = []
    for n in range(la, len(str(b)) + 1):
        lo = str(a) if n == la else "1" + "0" * (n - 1)
        hi = str(b) if n == len(str(b)) else "9" * n
        alts.append(_same_len_range(lo, hi))
    return alts


def integer_range(lo: int | None, hi: int | None) -> str:
    """GBNF for JSON integers in [lo, hi] (None: unbounded on that side)."""
    if lo is not None and hi is not None and lo > hi:
        raise GrammarError(f"integer range is empty: minimum {lo} > maximum {hi}")
    alts = []
    if hi is None or hi >= 0:
        alts += [f"({a})" for a in _nonneg_range(max(lo, 0) if lo is not None else 0, hi)]
    if lo is None or lo < 0:
        neg = _nonneg_range(max(-hi, 1) if hi is not None else 1, -lo if lo is not None else None)
        alts.append('"-" (' + " | ".join(f"({a})" for a in neg) + ")")
    return "(" + " | ".join(alts) + ")"


class _RegexToGbnf:
    """The pattern subset described in the module docstring, to GBNF over JSON string content."""

    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0

    def error(self, msg):
        return GrammarError(f"pattern {self.p!r}, position {self.i}: {msg}")

    def peek(self):
        return self.p[self.i] if self.i < len(self.p) else ""

    def convert(self) -> str:
        anchored_start = self.peek() == "^"
        if anchored_start:
            self.i += 1
        body = self.alternation(0)
        anchored_end = False
        if self.peek() == "$":
            anchored_end = True
            self.i += 1
        if self.i != len(self.p):
            raise self.error(f"unsupported or misplaced {self.peek()!r}")
        pre = "" if anchored_start else "char* "
        post = "" if anchored_end else " char*"
        return f"{pre}({body}){post}"

    def alternation(self, depth) -> str:
        if depth > 50:
            raise self.error("groups nested too deeply")
        alts = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence(depth))
        return " | ".join(a if a else '""' for a in alts)

    def sequence(self, depth) -> str:
        items = []
        while True:
            c = self.peek()
            if c in ("", "|", ")") or (c == "$" and self.i == len(self.p) - 1):
                break
            atom = self.atom(depth)
            q = self.quantifier()
            items.append(f"({atom}){q}" if q else atom)
        return " ".join(items)

    def quantifier(self) -> str:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            q = c
        elif c == "{":
            m = re.match(r"\{(\d+)(,(\d*))?\}", self.p[self.i:])
            if not m:
                raise self.error("bad repetition")
            self.i += m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if lo > MAX_REPETITION or (hi is not None and hi > MAX_REPETITION):
                raise self.error(f"repetition count over {MAX_REPETITION}")
            q = f"{{{lo}}}" if hi == lo else f"{{{lo},{'' if hi is None else hi}}}"
        else:
            return ""
        if self.peek() == "?":  # lazy: same language for a whole-string match
            self.i += 1
        if self.peek() in ("*", "+", "?", "{"):
            raise self.error("nested quantifier")
        return q

    def atom(self, depth) -> str:
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.error("lookaround and named groups are not supported")
            inner = self.alternation(depth + 1)
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.i += 1
            return f"({inner})"
        if c == "[":
            return json_char_expr(self.char_class())
        if c == ".":
            self.i += 1
            return json_char_expr(negate_ranges([(0x0A, 0x0A)]))
        if c == "\\":
            return json_char_expr(self.escape(in_class=False))
        if c in "*+?{":
            raise self.error(f"'{c}' has nothing to repeat")
        if c in "^$":
            raise self.error("anchors are supported only at the start and end")
        self.i += 1
        return json_char_expr([(ord(c), ord(c))])

    _CLASS_ESCAPES = {"d": ((48, 57),), "w": ((48, 57), (65, 90), (95, 95), (97, 122)),
                      "s": ((9, 13), (32, 32))}
    _CHAR_ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "0": 0}

    def escape(self, in_class: bool) -> tuple:
        """Ranges of one escape sequence at self.i (a backslash)."""
        self.i += 1
        e = self.peek()
        if not e:
            raise self.error("pattern ends in a backslash")
        self.i += 1
        if e.lower() in self._CLASS_ESCAPES:
            r = self._CLASS_ESCAPES[e.lower()]
            return negate_ranges(r) if e.isupper() else r
        if e in self._CHAR_ESCAPES:
            cp = self._CHAR_ESCAPES[e]
            return ((cp, cp),)
        if e in "xu":
            n = 2 if e == "x" else 4
            h = self.p[self.i:self.i + n]
            if len(h) != n or not all(ch in "0123456789abcdefABCDEF" for ch in h):
                raise self.error(f"'\\{e}' needs {n} hex digits")
            self.i += n
            cp = int(h, 16)
            return ((cp, cp),)
        if e.isalnum():
            raise self.error(f"unsupported escape '\\{e}'")
        return ((ord(e), ord(e)),)

    def char_class(self) -> tuple:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        first = True
        while True:
            c = self.peek()
            if not c:
                self.i = start
                raise self.error("unterminated character class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "\\":
                r = self.escape(in_class=True)
            else:
                if c == "[" and self.p.startswith("[:", self.i):
                    raise self.error("POSIX classes are not supported")
                self.i += 1
                r = ((ord(c), ord(c)),)
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]" \
                    and len(r) == 1 and r[0][0] == r[0][1]:
                self.i += 1
                if self.peek() == "\\":
                    r2 = self.escape(in_class=True)
                    if len(r2) != 1 or r2[0][0] != r2[0][1]:
                        raise self.error("a range cannot end in a class escape")
                    hi = r2[0][0]
                else:
                    hi = ord(self.peek())
                    self.i += 1
                if hi < r[0][0]:
                    raise self.error("reversed range in a character class")
                r = ((r[0][0], hi),)
            ranges.extend(r)
        return negate_ranges(ranges) if negated else merge_ranges(ranges)


_INT_LIMIT = 10**16 - 1    # integers are generated with at most 16 digits


def _int_bound(v, to_int, low: bool):
    """An integer bound from a JSON number, None when it bounds nothing (infinite, or past 16 digits)."""
    if v is None or (low and v < -_INT_LIMIT) or (not low and v > _INT_LIMIT):
        return None
    if math.isinf(v):    # +inf as a minimum / -inf as a maximum: nothing satisfies it
        return _INT_LIMIT + 1 if low else -_INT_LIMIT - 1
    return to_int(v)


class _Compiler:
    def __init__(self, root_schema):
        self.root_schema = root_schema
        self.rules: dict = {}
        self.refs: dict = {}
        self.depth = 0

    def use(self, name: str) -> str:
        """Add a primitive rule (and those it uses); return its name."""
        if name not in self.rules:
            self.rules[name] = PRIMITIVES[name]
            for dep in _PRIMITIVE_DEPS.get(name, ()):
                self.use(dep)
        return name

    def add(self, name: str, body: str) -> str:
        name = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-") or "r"
        if name in PRIMITIVES or name == "root":
            name = name + "-"
        base, k = name, 1
        while name in self.rules:
            if self.rules[name] == body:
                return name
            k += 1
            name = f"{base}{k}"
        self.rules[name] = body
        return name

    def resolve(self, ref: str):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError(f"$ref {ref!r}: only references inside this schema ('#/...') are supported")
        node = self.root_schema
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise GrammarError(f"$ref {ref!r} does not resolve")
        return node

    def ref_rule(self, ref: str) -> str:
        if not isinstance(ref, str):
            raise GrammarError(f"$ref must be a string, got {type(ref).__name__}")
        name = self.refs.get(ref)
        if name is None:
            target = self.resolve(ref)
            name = self.add("ref-" + ref.rsplit("/", 1)[-1], f"<{ref}>")  # reserved first, for recursion
            self.refs[ref] = name
            body = self.visit(target, name, ref)
            self.rules[name] = body
        return name

    def visit(self, schema, name: str, path: str) -> str:
        """GBNF expression matching the schema's JSON values (followed by optional space)."""
        self.depth += 1
        try:
            if self.depth > MAX_SCHEMA_DEPTH:
                raise GrammarError(f"{path[:200]}: schema nested deeper than {MAX_SCHEMA_DEPTH}")
            return self._visit(schema, name, path)
        finally:
            self.depth -= 1

    def _visit(self, schema, name: str, path: str) -> str:
        if schema is True or schema == {}:
            return self.use("value")
        if schema is False:
            raise GrammarError(f"{path}: schema 'false' matches nothing")
        if not isinstance(schema, dict):
            raise GrammarError(f"{path}: a schema must be an object or a boolean, not {type(schema).__name__}")
        if not all(isinstance(k, str) for k in schema):
            raise GrammarError(f"{path}: schema keys must be strings, got {[k for k in schema if not isinstance(k, str)][:3]}")
        unknown = sorted(set(schema) - _ALL_KEYWORDS)
        if unknown:
            raise GrammarError(f"{path}: unsupported JSON Schema keyword(s): {', '.join(unknown)}")
        keys = set(schema) - _ANNOTATIONS
        if "$ref" in schema:
            if keys - {"$ref"}:
                raise GrammarError(f"{path}: $ref beside other keywords is not supported")
            return self.ref_rule(schema["$ref"])
        if "const" in schema:
            return f"{self.literal_value(schema['const'], path)} {self.use('space')}"
        if "enum" in schema:
            vals = schema["enum"]
            if not isinstance(vals, list) or not vals:
                raise GrammarError(f"{path}: enum must be a non-empty list")
            alts = " | ".join(self.literal_value(v, path) for v in vals)
            return f"({alts}) {self.use('space')}"
        for kw in ("anyOf", "oneOf"):
            if kw in schema:
                subs = schema[kw]
                if not isinstance(subs, list) or not subs:
                    raise GrammarError(f"{path}: {kw} must be a non-empty list")
                if keys - {kw}:
                    raise GrammarError(f"{path}: {kw} beside other keywords is not supported")
                return " | ".join(self.sub(s, f"{name}-{i}", f"{path}/{kw}/{i}") for i, s in enumerate(subs))
        if "allOf" in schema:
            return self.visit(self.merge_all_of(schema, path), name, path)
        typ = schema.get("type")
        if not (typ is None or isinstance(typ, str) or
                (isinstance(typ, list) and all(isinstance(t, str) for t in typ))):
            raise GrammarError(f"{path}: type must be a string or a list of strings, got {str(typ)[:60]}")
        if typ is None:
            for t, kws in _KEYWORDS.items():
                if t and keys & kws:
                    typ = t  # type implied by its keywords (e.g. only "properties")
                    break
            else:
                return self.use("value")
        if isinstance(typ, list):
            if not typ:
                raise GrammarError(f"{path}: empty type list")
            if any(t not in _KEYWORDS or t is None for t in typ):
                raise GrammarError(f"{path}: unknown type in {typ!r}")
            stray = keys - _KEYWORDS[None] - set().union(*(_KEYWORDS[t] for t in typ))
            if stray:
                raise GrammarError(f"{path}: keyword(s) {', '.join(sorted(stray))} not supported for types {typ}")
            return " | ".join(self.sub({k: v for k, v in schema.items() if k in _KEYWORDS[t]} | {"type": t},
                                       f"{name}-{t}", path) for t in typ)
        if typ not in _KEYWORDS or typ is None:
            raise GrammarError(f"{path}: unknown type {typ!r}")
        stray = keys - _KEYWORDS[None] - _KEYWORDS[typ]
        if stray:
            raise GrammarError(f"{path}: keyword(s) {', '.join(sorted(stray))} not supported for type {typ}")
        return getattr(self, "visit_" + typ)(schema, name, path)

    def sub(self, schema, name, path) -> str:
        """A sub-schema as its own rule (keeps expressions small and error messages local)."""
        body = self.visit(schema, name, path)
        if re.fullmatch(r"[a-zA-Z0-9-]+", body):
            return body
        return self.add(name, body)

    def literal_value(self, v, path) -> str:
        try:
            return gbnf_literal(json.dumps(v, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise GrammarError(f"{path}: value {v!r} is not JSON") from e

    def merge_all_of(self, schema, path):
        merged = {"type": "object", "properties": {}, "required": []}
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise GrammarError(f"{path}: allOf must be a non-empty list")
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        seen_required: set = set()
        if len(parts) == 1 and not (set(rest) - _ANNOTATIONS):
            return parts[0]
        for i, p in enumerate(parts + [rest]):
            while isinstance(p, dict) and "$ref" in p:
                p = self.resolve(p["$ref"])
            if not isinstance(p, dict):
                raise GrammarError(f"{path}/allOf/{i}: only object schemas can be combined with allOf")
            kws = set(p) - _ANNOTATIONS
            if p.get("type", "object") != "object" or kws - {"type", "properties", "required",
                                                             "additionalProperties"}:
                raise GrammarError(f"{path}/allOf/{i}: only object schemas (properties, required, "
                                   "additionalProperties) can be combined with allOf")
            if not isinstance(p.get("properties", {}), dict):
                raise GrammarError(f"{path}/allOf/{i}: properties must be an object")
            if not isinstance(p.get("required", []), list) or \
                    not all(isinstance(r, str) for r in p.get("required", [])):
                raise GrammarError(f"{path}/allOf/{i}: required must be a list of strings")
            for k, v in p.get("properties", {}).items():
                if k in merged["properties"] and merged["properties"][k] != v:
                    raise GrammarError(f"{path}: allOf gives property {k!r} two different schemas")
                merged["properties"][k] = v
            merged["required"] += [r for r in dict.fromkeys(p.get("required", [])) if r not in seen_required]
            seen_required.update(p.get("required", []))
            if "additionalProperties" in p:
                merged["additionalProperties"] = p["additionalProperties"]
        return merged

    # -- types ------------------------------------------------------------------------------------
    def visit_null(self, schema, name, path):
        return self.use("null")

    def visit_boolean(self, schema, name, path):
        return self.use("boolean")

    def visit_number(self, schema, name, path):
        return self.use("number")

    def visit_integer(self, schema, name, path):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for kw, v in (("minimum", lo), ("maximum", hi), ("exclusiveMinimum", schema.get("exclusiveMinimum")),
                      ("exclusiveMaximum", schema.get("exclusiveMaximum"))):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise GrammarError(f"{path}: {kw} must be a number")
            if v is not None and math.isnan(v):
                raise GrammarError(f"{path}: {kw} must be a number, not NaN")
        # bounds beyond the 16 digits integers are generated with do not bound anything
        lo = _int_bound(lo, math.ceil, low=True)
        hi = _int_bound(hi, math.floor, low=False)
        if schema.get("exclusiveMinimum") is not None:
            em = _int_bound(schema["exclusiveMinimum"], lambda x: math.floor(x) + 1, low=True)
            lo = em if lo is None else max(lo, em) if em is not None else lo
        if schema.get("exclusiveMaximum") is not None:
            em = _int_bound(schema["exclusiveMaximum"], lambda x: math.ceil(x) - 1, low=False)
            hi = em if hi is None else min(hi, em) if em is not None else hi
        if (lo is not None and lo > _INT_LIMIT) or (hi is not None and hi < -_INT_LIMIT):
            raise GrammarError(f"{path}: no integer of at most 16 digits satisfies the bounds")
        if lo is None and hi is None:
            return self.use("integer")
        return f"{integer_range(lo, hi)} {self.use('space')}"

    def _count(self, schema, kw, path, default=None):
        if kw not in schema:
            return default
        v = schema[kw]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GrammarError(f"{path}: {kw} must be a non-negative integer")
        if v > MAX_REPETITION:
            raise GrammarError(f"{path}: {kw} {v} is over the supported limit of {MAX_REPETITION}")
        return v

    def visit_string(self, schema, name, path):
        fmt, pattern = schema.get("format"), schema.get("pattern")
        lo = self._count(schema, "minLength", path, 0)
        hi = self._count(schema, "maxLength", path)
        if hi is not None and hi < lo:
            raise GrammarError(f"{path}: maxLength {hi} < minLength {lo}")
        if sum(x is not None for x in (fmt, pattern)) + (lo > 0 or hi is not None) > 1:
            raise GrammarError(f"{path}: combining format, pattern and length limits is not supported")
        space = self.use("space")
        if fmt is not None:
            if fmt not in _FORMATS:
                raise GrammarError(f"{path}: unsupported string format {fmt!r} (supported: {', '.join(_FORMATS)})")
            return f'"\\"" {self.use(fmt)} "\\"" {space}'
        if pattern is not None:
            if not isinstance(pattern, str):
                raise GrammarError(f"{path}: pattern must be a string")
            self.use("char")
            return f'"\\"" ({_RegexToGbnf(pattern).convert()}) "\\"" {space}'
        if lo == 0 and hi is None:
            return self.use("string")
        rep = f"{{{lo},{'' if hi is None else hi}}}"
        return f'"\\"" {self.use("char")}{rep} "\\"" {space}'

    def visit_array(self, schema, name, path):
        space = self.use("space")
        prefix = schema.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise GrammarError(f"{path}: prefixItems must be a list")
        items = schema.get("items", False if "prefixItems" in schema else True)
        lo = self._count(schema, "minItems", path, 0)
        hi = self._count(schema, "maxItems", path)
        k = len(prefix)
        if items is False:
            hi = k if hi is None else min(hi, k)
        if hi is not None and lo > hi:
            raise GrammarError(f"{path}: no array length satisfies minItems {lo}, maxItems {hi} and the items")
        elems = [self.sub(s, f"{name}-item-{i}", f"{path}/prefixItems/{i}") for i, s in enumerate(prefix)]
        item = self.sub(items, f"{name}-item", f"{path}/items") if items is not False else None

        def tail(i):  # elements from position i >= k on (only `items`)
            if item is None:
                return ""
            a = max(lo - i, 0)
            b = None if hi is None else hi - i
            if b is not None and b <= 0:
                return ""
            return f'("," {space} {item}){{{a},{"" if b is None else b}}}'

        # rest[i]: the elements from position i on, i >= 1 elements already written; built from the end
        # as one rule per prefix position, so 1,000 prefixItems nest no deeper than one
        last = k if hi is None else max(1, min(k, hi))
        rest_i = tail(max(last, 1)) if last >= k else ""
        for i in range(last - 1, 0, -1):
            nxt = self.add(f"{name}-rest-{i + 1}", rest_i) if rest_i else ""
            inner = f'"," {space} {elems[i]} {nxt}'
            rest_i = inner if i < lo else f"({inner})?"

        if hi == 0:
            return f'"[" {space} "]" {space}'
        first = elems[0] if k else item
        body = f"{first} {rest_i}"
        if lo == 0:
            body = f"({body})?"
        return f'"[" {space} {body} "]" {space}'

    def visit_object(self, schema, name, path):
        space = self.use("space")
        props = schema.get("properties", {})
        if not isinstance(props, dict) or not all(isinstance(k, str) for k in props):
            raise GrammarError(f"{path}: properties must be an object with string keys")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarError(f"{path}: required must be a list of strings")
        extra = schema.get("additionalProperties", None if props or required else True)
        names = list(props) + [r for r in dict.fromkeys(required) if r not in props]
        required_set = set(required)
        if "properties" not in schema and "required" not in schema and extra is True:
            return self.use("object")
        kvs = []
        for i, key in enumerate(names):
            vrule = self.sub(props.get(key, True), f"{name}-{key}", f"{path}/properties/{key}")
            kvs.append(self.add(f"{name}-{key}-kv",
                                f'{gbnf_literal(json.dumps(key, ensure_ascii=False))} {space} ":" {space} {vrule}'))
        req = [k in required_set for k in names]
        extra_kv = None
        if extra not in (None, False):
            vrule = self.sub(extra, f"{name}-additional", f"{path}/additionalProperties")
            key_rule = self.other_key_rule(name, names)
            extra_kv = self.add(f"{name}-additional-kv", f'{key_rule} {space} ":" {space} {vrule}')
        n = len(names)
        # after[i]: properties i.. when something was written already (each starts with a comma);
        # first[i]: the same when nothing was written yet
        tail_after = f'("," {space} {extra_kv})*' if extra_kv else ""
        tail_first = f'({extra_kv} ("," {space} {extra_kv})*)?' if extra_kv else ""
        after, first = [None] * (n + 1), [None] * (n + 1)
        after[n], first[n] = tail_after, tail_first
        for i in range(n - 1, -1, -1):
            a_next = self.add(f"{name}-after-{i + 1}", after[i + 1]) if after[i + 1] else ""
            f_next = self.add(f"{name}-first-{i + 1}", first[i + 1]) if first[i + 1] else ""
            if req[i]:
                after[i] = f'"," {space} {kvs[i]} {a_next}'
                first[i] = f"{kvs[i]} {a_next}"
            else:
                after[i] = f'("," {space} {kvs[i]} {a_next}) | {a_next or chr(34) * 2}'
                first[i] = f'({kvs[i]} {a_next}) | {f_next or chr(34) * 2}'
        return f'"{{" {space} ({first[0] or chr(34) * 2}) "}}" {space}'

    def other_key_rule(self, name, names) -> str:
        """A JSON key without escapes that is none of `names`: walk the names' character trie."""
        plain = self.use("plain-char")
        trie: dict = {}
        for key in names:
            node = trie
            for ch in key:
                node = node.setdefault(ch, {})
            node[None] = True
        counter = [0]
        safe = set(chr(c) for lo, hi in _RAW_OK for c in range(lo, min(hi, 0x7F) + 1)) | {None}

        def reserve() -> str:
            counter[0] += 1
            return self.add(f"{name}-key-{counter[0]}", f"<key {counter[0]}>")

        # one rule per trie node, filled with an explicit stack (a 1,000-character name is 1,000 deep)
        root_rule = reserve()
        stack = [(trie, root_rule)]
        while stack:
            node, rname = stack.pop()
            alts = [] if None in node else ['"\\""']
            chars = [c for c in node if c is not None]
            for c in chars:
                if c in safe or ord(c) > 0x7F:
                    child = reserve()
                    stack.append((node[c], child))
                    alts.append(f"{gbnf_literal(c)} {child}")
            excluded = [(ord(c), ord(c)) for c in chars] + [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
            alts.append(f'{gbnf_class(negate_ranges(excluded))} {plain}* "\\""')
            self.rules[rname] = " | ".join(alts)
        return f'"\\"" {root_rule}'


def json_schema_to_gbnf(schema) -> str:
    """GBNF text whose root matches exactly the JSON texts this compiler generates for `schema`."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise GrammarError(f"JSON schema is not valid JSON: {e}") from e
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"a JSON schema must be an object, not {type(schema).__name__}")
    c = _Compiler(schema)
    root = c.visit(schema, "root", "#")
    lines = [f"root ::= {root}"]
    lines += [f"{k} ::= {v}" for k, v in c.rules.items()]
    return "\n".join(lines) + "\n"
