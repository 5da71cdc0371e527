"""The public Grammar: parse GBNF or compile a JSON schema, check whole strings."""
from __future__ import annotations

import functools
import hashlib
import os

from oxillama.errors import GrammarError
from oxillama.grammar import gbnf
from oxillama.grammar._cgrammar import Machine

JSON_GBNF = r"""# any JSON value (RFC 8259); whitespace only after tokens and bounded, so a decoder cannot loop on blanks
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
"""


class Grammar:
    """A context-free grammar over text, from GBNF (llama.cpp's grammar language) or a JSON schema.

    >>> g = Grammar.from_string('root ::= "yes" | "no"')
    >>> g.accepts("yes"), g.accepts("maybe")
    (True, False)
    """

    def __init__(self, text: str, root: str = "root"):
        if not isinstance(text, str):
            raise GrammarError(f"grammar text must be str, not {type(text).__name__}")
        self.text = text
        self.root = root
        # names the grammar in saved matcher states, so a state is not restored into another grammar
        self.fingerprint = hashlib.sha256(f"{root}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
        self._arrays, self._root_id = _compile(text, root)
        self.n_rules = len(self._arrays[1]) - 1
        self._machine = None

    @classmethod
    def from_string(cls, text: str, root: str = "root") -> "Grammar":
        return cls(text, root)

    @classmethod
    def from_file(cls, path, root: str = "root") -> "Grammar":
        try:
            with open(os.fspath(path), encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise GrammarError(f"cannot read grammar file {path}: {e}") from e
        return cls(text, root)

    @classmethod
    def from_json_schema(cls, schema) -> "Grammar":
        from oxillama.grammar.json_schema import json_schema_to_gbnf

        return cls(json_schema_to_gbnf(schema))

    @classmethod
    def json(cls) -> "Grammar":
        """Any JSON value."""
        return cls(JSON_GBNF)

    def new_machine(self) -> Machine:
        """A fresh byte machine for this grammar (each matcher owns one)."""
        return Machine(*self._arrays)

    @property
    def root_id(self) -> int:
        return self._root_id

    def accepts(self, text) -> bool:
        """True if the whole of `text` (str, or UTF-8 bytes) is in the grammar's language."""
        state = self._walk(text, "accepts")
        return state != 0 and self._machine.can_end(state)

    def accepts_prefix(self, text) -> bool:
        """True if `text` can be continued into a string of the language (a generation cut off by
        max_tokens under this grammar is one); every complete match is also a prefix."""
        return self._walk(text, "accepts_prefix") != 0

    def _walk(self, text, what: str) -> int:
        """The machine state after walking `text` from the root, 0 if rejected on the way."""
        if isinstance(text, str):
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                return 0  # lone surrogates are not text any grammar can match
        elif isinstance(text, (bytes, bytearray)):
            data = bytes(text)
        else:
            raise GrammarError(f"{what}() needs str or bytes, not {type(text).__name__}")
        if self._machine is None:
            self._machine = self.new_machine()
        m = self._machine
        if m.n_states > 100_000:  # keep the lazily built tables bounded
            m.reset()
        return m.walk(m.initial(self._root_id), data)

    def __repr__(self):
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return f"Grammar({first[:60]!r}..., {self.n_rules} rules)"


@functools.lru_cache(maxsize=32)
def _compile(text: str, root: str) -> tuple:
    """((seq, alt_off, alts, sets), root rule id) of a GBNF text, cached: Grammar.json() and
    response_format grammars are built again for every generate() call."""
    ir = gbnf.lower_to_bytes(gbnf.parse_gbnf(text, root))
    alt_off = [0]
    alts = []
    for starts in ir.rule_alts:
        alts.extend(starts)
        alt_off.append(len(alts))
    return (tuple(ir.seq), tuple(alt_off), tuple(alts), b"".join(ir.sets)), ir.root


def grammar_from_response_format(response_format) -> Grammar | None:
    """The Grammar an OpenAI-style ``response_format`` asks for, or None for free text.

    Accepted shapes: ``{"type": "text"}``; ``{"type": "json_object"}`` (any JSON object);
    ``{"type": "json_object", "schema": {...}}``; and OpenAI's
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``.
    """
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or "type" not in response_format:
        raise GrammarError("response_format must be a dict with a 'type'")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        if schema is None:
            return Grammar(JSON_GBNF, root="object")
        return Grammar.from_json_schema(schema)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise GrammarError("response_format of type 'json_schema' needs json_schema.schema")
        return Grammar.from_json_schema(spec["schema"])
    raise GrammarError(f"unsupported response_format type {kind!r} (text, json_object, json_schema)")
