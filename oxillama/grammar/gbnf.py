"""GBNF (llama.cpp's grammar language) parser and the rule IR the matcher runs on.

Two stages:

1. ``parse_gbnf`` reads the text into *code-point rules*: each rule is a list of alternatives, each
   alternative a list of elements ``("cp", ranges)`` (one code point in a sorted tuple of inclusive
   ranges) or ``("ref", rule_id)``. Groups and repetitions become helper rules, as llama.cpp does:
   ``x*`` is ``r ::= x r | ""``, ``x{m,n}`` is m copies of ``x`` then n-m nested optionals.
   Then every rule reference is resolved and left recursion (direct, indirect or through
   rules that match the empty string) is rejected, since a top-down matcher would loop on it.
2. ``lower_to_bytes`` turns code points into UTF-8 bytes so the matcher works on bytes only: a
   code-point class becomes the alternation of its UTF-8 byte-range sequences (the construction
   regex engines use). A token that ends inside a multi-byte character then simply leaves the
   matcher in the middle of that sequence, which is how partial UTF-8 across tokens is handled.

The byte IR (``ByteGrammar``) is flat integer arrays for the C matcher:
``seq`` holds every alternative's elements, each alternative ended by ``END``; an element ``>= 0``
is a byte-set id (a 256-bit bitmap in ``sets``), ``<= -2`` is a reference to rule ``-(e + 2)``.
``rule_alts[r]`` lists the start offsets of rule r's alternatives in ``seq``.
"""
from __future__ import annotations

import bisect

import dataclasses

from oxillama.errors import GrammarError

MAX_REPETITION = 10_000
"""Largest m or n accepted in ``{m}``, ``{m,}``, ``{m,n}``."""
MAX_NESTING = 100
"""Deepest accepted nesting of parenthesised groups."""
MAX_ELEMENTS = 2_000_000
"""Largest grammar, counted in elements after repetitions are expanded."""

MAX_CODE_POINT = 0x10FFFF
END = -1

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-",
            "'": "'", "/": "/", "^": "^", "0": "\0", "f": "\f", "v": "\v", "a": "\a", "b": "\b",
            ".": ".", "(": "(", ")": ")", "|": "|", "*": "*", "+": "+", "?": "?", "{": "{", "}": "}"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _is_name_char(c: str) -> bool:
    return len(c) == 1 and c.isascii() and (c.isalnum() or c in "-_")


@dataclasses.dataclass
class CodePointGrammar:
    """Rules over code points. ``rules[i]`` is a list of alternatives; ``names[i]`` the rule's name
    (helper rules get names like ``root-3``); ``origins[i]`` the (line, column) it came from."""
    rules: list
    names: list
    origins: list
    root: int


def merge_ranges(ranges) -> tuple:
    """Sort and merge inclusive code-point ranges."""
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def negate_ranges(ranges) -> tuple:
    """The complement of merged ranges over all code points."""
    out, nxt = [], 0
    for lo, hi in merge_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return tuple(out)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.rules: list = []        # rule id -> alternatives (None until defined)
        self.names: list = []
        self.origins: list = []
        self.by_name: dict = {}
        self.ref_pos: dict = {}      # rule id -> position of its first reference
        self.n_elements = 0
        self.depth = 0
        self._line_starts: list | None = None

    # -- positions and errors --------------------------------------------------------------------
    def line_col(self, pos: int) -> tuple:
        # a binary search in the line starts, not a count from the text's start: a rule records its
        # origin, so a count made compiling a 5,000-rule grammar quadratic (17 s)
        starts = self._line_starts
        if starts is None:
            starts = self._line_starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]
        line = bisect.bisect_right(starts, pos)
        return line, pos - starts[line - 1] + 1

    def error(self, msg: str, pos: int | None = None) -> GrammarError:
        line, col = self.line_col(self.pos if pos is None else pos)
        err = GrammarError(f"line {line}, column {col}: {msg}")
        err.line, err.column = line, col
        return err

    def peek(self, k: int = 0) -> str:
        p = self.pos + k
        return self.text[p] if p < len(self.text) else ""

    def skip_space(self, newline_ok: bool) -> None:
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            if c == "#":
                while self.pos < len(t) and t[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            else:
                break

    # -- rules -----------------------------------------------------------------------------------
    def rule_id(self, name: str, pos: int) -> int:
        rid = self.by_name.get(name)
        if rid is None:
            rid = len(self.rules)
            self.by_name[name] = rid
            self.rules.append(None)
            self.names.append(name)
            self.origins.append(self.line_col(pos))
            self.ref_pos[rid] = pos
        return rid

    def new_rule(self, base: str, alts: list, pos: int) -> int:
        rid = len(self.rules)
        self.rules.append(alts)
        self.names.append(f"{base}-{rid}")
        self.origins.append(self.line_col(pos))
        return rid

    def count(self, n: int) -> None:
        self.n_elements += n
        if self.n_elements > MAX_ELEMENTS:
            raise self.error(f"grammar too large (over {MAX_ELEMENTS} elements after expanding repetitions)")

    def parse(self) -> None:
        self.skip_space(True)
        while self.pos < len(self.text):
            self.parse_rule()
            self.skip_space(True)

    def parse_name(self) -> str:
        start = self.pos
        while _is_name_char(self.peek()):
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected a rule name, found {self.peek()!r}" if self.peek() else
                             "expected a rule name, found the end of the text")
        return self.text[start:self.pos]

    def parse_rule(self) -> None:
        start = self.pos
        name = self.parse_name()
        self.skip_space(False)
        if not self.text.startswith("::=", self.pos):
            raise self.error("expected '::=' after the rule name")
        self.pos += 3
        self.skip_space(True)
        rid = self.rule_id(name, start)
        if self.rules[rid] is not None:
            raise self.error(f"rule '{name}' is defined twice", start)
        self.origins[rid] = self.line_col(start)
        self.rules[rid] = []  # mark as defined before the body, for self references
        self.rules[rid] = self.parse_alternatives(name, nested=False)
        self.ref_pos.pop(rid, None)
        if self.pos < len(self.text) and self.peek() not in "\r\n":
            raise self.error(f"unexpected {self.peek()!r}")

    def parse_alternatives(self, name: str, nested: bool) -> list:
        alts = [self.parse_sequence(name, nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(True)
            alts.append(self.parse_sequence(name, nested))
        return alts

    def parse_sequence(self, name: str, nested: bool) -> list:
        seq: list = []
        last_start = None  # where the last symbol's elements begin in seq, for a postfix operator
        while True:
            c = self.peek()
            start = self.pos
            if not c:
                break
            if c == '"':
                self.pos += 1
                last_start = len(seq)
                while self.peek() != '"':
                    if not self.peek():
                        raise self.error("unterminated string literal", start)
                    cp = self.parse_char()
                    seq.append(("cp", ((cp, cp),)))
                self.pos += 1
            elif c == "[":
                self.pos += 1
                negated = self.peek() == "^"
                if negated:
                    self.pos += 1
                ranges = []
                while self.peek() != "]":
                    if not self.peek():
                        raise self.error("unterminated character class", start)
                    lo = self.parse_char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) not in ("]", ""):
                        self.pos += 1
                        hi = self.parse_char()
                        if hi < lo:
                            raise self.error(f"character range {chr(lo)!r}-{chr(hi)!r} is reversed")
                    ranges.append((lo, hi))
                self.pos += 1
                ranges = negate_ranges(ranges) if negated else merge_ranges(ranges)
                if not ranges:
                    raise self.error("character class matches nothing", start)
                last_start = len(seq)
                seq.append(("cp", ranges))
            elif c == ".":
                self.pos += 1
                last_start = len(seq)
                seq.append(("cp", ((0, MAX_CODE_POINT),)))
            elif _is_name_char(c):
                ref = self.parse_name()
                last_start = len(seq)
                seq.append(("ref", self.rule_id(ref, start)))
            elif c == "(":
                self.pos += 1
                self.depth += 1
                if self.depth > MAX_NESTING:
                    raise self.error(f"groups nested deeper than {MAX_NESTING}")
                self.skip_space(True)
                alts = self.parse_alternatives(name, nested=True)
                if self.peek() != ")":
                    if not self.peek():
                        raise self.error("unclosed '('", start)
                    raise self.error(f"expected ')', found {self.peek()!r}")
                self.pos += 1
                self.depth -= 1
                last_start = len(seq)
                seq.append(("ref", self.new_rule(name, alts, start)))
            elif c in "*+?{":
                if last_start is None:
                    raise self.error(f"'{c}' must follow a symbol")
                lo, hi = self.parse_repetition()
                self.expand_repetition(name, seq, last_start, lo, hi, start)
                last_start = None
            else:
                break
            self.count(1)
            self.skip_space(nested)
        return seq

    def parse_repetition(self) -> tuple:
        c = self.peek()
        start = self.pos
        self.pos += 1
        if c == "*":
            return 0, None
        if c == "+":
            return 1, None
        if c == "?":
            return 0, 1
        self.skip_space(True)
        lo = self.parse_int()
        self.skip_space(True)
        hi = lo
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(True)
            hi = self.parse_int() if self.peek().isdigit() else None
            self.skip_space(True)
        if self.peek() != "}":
            raise self.error("expected '}' to close the repetition count")
        self.pos += 1
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{lo},{hi}}} has its maximum below its minimum", start)
        return lo, hi

    def parse_int(self) -> int:
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
            if self.pos - start > 9:
                raise self.error(f"repetition count over the limit of {MAX_REPETITION}", start)
        if self.pos == start:
            raise self.error("expected a repetition count")
        n = int(self.text[start:self.pos])
        if n > MAX_REPETITION:
            raise self.error(f"repetition count {n} over the limit of {MAX_REPETITION}", start)
        return n

    def expand_repetition(self, name, seq, last_start, lo, hi, pos) -> None:
        item = seq[last_start:]
        del seq[last_start:]
        if len(item) > 1:  # a literal of several characters repeats as a whole
            item = [("ref", self.new_rule(name, [item], pos))]
        self.count(lo + (1 if hi is None else hi - lo))
        seq.extend(item * lo)
        if hi is None:
            rid = self.new_rule(name, None, pos)
            self.rules[rid] = [item + [("ref", rid)], []]
            seq.append(("ref", rid))
        elif hi > lo:
            rid = self.new_rule(name, [item, []], pos)
            for _ in range(hi - lo - 1):
                rid = self.new_rule(name, [item + [("ref", rid)], []], pos)
            seq.append(("ref", rid))

    def parse_char(self) -> int:
        """One code point of a literal or class, decoding escapes."""
        c = self.peek()
        start = self.pos
        if c == "\\":
            e = self.peek(1)
            if e in _HEX_ESCAPES:
                n = _HEX_ESCAPES[e]
                digits = self.text[self.pos + 2:self.pos + 2 + n]
                if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise self.error(f"'\\{e}' needs {n} hex digits")
                cp = int(digits, 16)
                if cp > MAX_CODE_POINT or 0xD800 <= cp <= 0xDFFF:
                    raise self.error(f"'\\{e}{digits}' is not a Unicode scalar value", start)
                self.pos += 2 + n
                return cp
            if e in _ESCAPES:
                self.pos += 2
                return ord(_ESCAPES[e])
            raise self.error(f"unknown escape '\\{e}'" if e else "escape at the end of the text")
        cp = ord(c)
        if 0xD800 <= cp <= 0xDFFF:
            raise self.error("lone surrogate in the grammar text")
        self.pos += 1
        return cp


def parse_gbnf(text: str, root: str = "root") -> CodePointGrammar:
    """Parse GBNF text; raises GrammarError naming line and column."""
    if not isinstance(text, str):
        raise GrammarError(f"grammar text must be str, not {type(text).__name__}")
    p = _Parser(text)
    p.parse()
    for rid, pos in p.ref_pos.items():
        if p.rules[rid] is None:
            raise p.error(f"undefined rule '{p.names[rid]}'", pos)
    if root not in p.by_name:
        raise p.error(f"the grammar has no '{root}' rule", len(text))
    g = CodePointGrammar(p.rules, p.names, p.origins, p.by_name[root])
    check_left_recursion(g)
    if not productive_rules(g.rules)[g.root]:
        line, col = g.origins[g.root]
        err = GrammarError(f"line {line}, column {col}: rule '{root}' can never finish "
                           "(every alternative recurses forever), so nothing matches it")
        err.line, err.column = line, col
        raise err
    return g


def productive_rules(rules: list) -> list:
    """productive[r]: rule r matches at least one finite string (least fixpoint)."""
    productive = [False] * len(rules)
    changed = True
    while changed:
        changed = False
        for r, alts in enumerate(rules):
            if not productive[r] and any(all(k != "ref" or productive[v] for k, v in alt) for alt in alts):
                productive[r] = changed = True
    return productive


def nullable_rules(rules: list) -> list:
    """nullable[r]: rule r can match the empty string (least fixpoint)."""
    nullable = [False] * len(rules)
    changed = True
    while changed:
        changed = False
        for r, alts in enumerate(rules):
            if not nullable[r] and any(all(k == "ref" and nullable[v] for k, v in alt) for alt in alts):
                nullable[r] = changed = True
    return nullable


def check_left_recursion(g: CodePointGrammar) -> None:
    """Reject a rule that can reach itself without consuming input (it would never terminate)."""
    nullable = nullable_rules(g.rules)
    # left[r]: rules that can start r, i.e. appear after a nullable prefix of one of its alternatives
    left = []
    for alts in g.rules:
        s = set()
        for alt in alts:
            for k, v in alt:
                if k != "ref":
                    break
                s.add(v)
                if not nullable[v]:
                    break
        left.append(sorted(s))
    # iterative DFS for a cycle (white 0, grey 1, black 2)
    color = [0] * len(g.rules)
    for start in range(len(g.rules)):
        if color[start]:
            continue
        stack = [(start, iter(left[start]))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
            elif color[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                named = [g.names[r] for r in cycle]
                line, col = g.origins[nxt]
                err = GrammarError(f"line {line}, column {col}: left recursion: "
                                   f"{' -> '.join(named)} (a rule reaches itself without consuming input)")
                err.line, err.column = line, col
                raise err
            elif color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(left[nxt])))


# -- lowering to bytes ---------------------------------------------------------------------------

_SURROGATES = (0xD800, 0xDFFF)


def _utf8_sequences(lo: int, hi: int, out: list) -> None:
    """Append the UTF-8 byte-range sequences matching exactly the code points lo..hi (no surrogates)."""
    for bound in (0x7F, 0x7FF, 0xFFFF):
        if lo <= bound < hi:
            _utf8_sequences(lo, bound, out)
            _utf8_sequences(bound + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append(((lo, hi),))
        return
    for i in (1, 2, 3):
        m = (1 << (6 * i)) - 1
        if (lo & ~m) != (hi & ~m):
            if lo & m:
                _utf8_sequences(lo, lo | m, out)
                _utf8_sequences((lo | m) + 1, hi, out)
                return
            if (hi & m) != m:
                _utf8_sequences(lo, (hi & ~m) - 1, out)
                _utf8_sequences(hi & ~m, hi, out)
                return
    a, b = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
    out.append(tuple(zip(a, b)))


def utf8_sequences(ranges) -> list:
    """UTF-8 byte-range sequences for a tuple of code-point ranges, surrogates left out."""
    out: list = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi)):
            if a <= b:
                _utf8_sequences(a, b, out)
    return out


@dataclasses.dataclass
class ByteGrammar:
    """The flat byte-level IR the C matcher runs (see the module docstring)."""
    seq: list
    rule_alts: list
    sets: list          # 32-byte bitmaps
    root: int
    names: list


def lower_to_bytes(g: CodePointGrammar) -> ByteGrammar:
    set_ids: dict = {}
    sets: list = []

    def byte_set(lo: int, hi: int) -> int:
        key = (lo, hi)
        sid = set_ids.get(key)
        if sid is None:
            bits = bytearray(32)
            for b in range(lo, hi + 1):
                bits[b >> 3] |= 1 << (b & 7)
            sid = set_ids[key] = len(sets)
            sets.append(bytes(bits))
        return sid

    def ascii_set(ranges) -> int:
        key = ranges
        sid = set_ids.get(key)
        if sid is None:
            bits = bytearray(32)
            for lo, hi in ranges:
                for b in range(lo, hi + 1):
                    bits[b >> 3] |= 1 << (b & 7)
            sid = set_ids[key] = len(sets)
            sets.append(bytes(bits))
        return sid

    byte_rules: list = [None] * len(g.rules)   # alternatives as lists of byte elements
    names = list(g.names)
    class_rules: dict = {}

    def class_rule(ranges) -> int:
        rid = class_rules.get(ranges)
        if rid is None:
            seqs = utf8_sequences(ranges)
            ascii = tuple(s[0] for s in seqs if len(s) == 1)
            alts = [[ascii_set(ascii)]] if ascii else []
            alts += [[byte_set(lo, hi) for lo, hi in s] for s in seqs if len(s) > 1]
            rid = class_rules[ranges] = len(byte_rules)
            byte_rules.append(alts)
            names.append("char-class")
        return rid

    def lower_element(kind, v, out):
        if kind == "ref":
            out.append(-(v + 2))
        elif len(v) == 1 and v[0][0] == v[0][1]:
            for b in chr(v[0][0]).encode("utf-8"):
                out.append(byte_set(b, b))
        elif v[-1][1] <= 0x7F:
            out.append(ascii_set(v))
        else:
            out.append(-(class_rule(v) + 2))

    for r, alts in enumerate(g.rules):
        lowered = []
        for alt in alts:
            out: list = []
            for kind, v in alt:
                lower_element(kind, v, out)
            lowered.append(out)
        byte_rules[r] = lowered

    seq: list = []
    rule_alts: list = []
    for alts in byte_rules:
        starts = []
        for alt in alts:
            starts.append(len(seq))
            seq.extend(alt)
            seq.append(END)
        rule_alts.append(starts)
    return ByteGrammar(seq, rule_alts, sets, g.root, names)
