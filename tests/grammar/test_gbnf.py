"""GBNF parser: every construct, every rejection, and agreement with Python's re on generated strings."""
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxillama.errors import GrammarError, OxillamaError
from oxillama.grammar import MAX_ELEMENTS, MAX_NESTING, MAX_REPETITION, Grammar


def accepts(text, *strings, root="root"):
    g = Grammar.from_string(text, root=root)
    return [g.accepts(s) for s in strings]


def test_literal_alternation_and_sequence():
    assert accepts('root ::= "ab" "c" | "d"', "abc", "d", "ab", "abcd", "") == [True, True, False, False, False]


def test_prefixes_of_the_language_are_told_from_strings_that_left_it():
    g = Grammar.from_string('root ::= "(" [0-9]+ ")" | "ab"')
    assert [g.accepts_prefix(s) for s in ["", "(", "(12", "(12)", "a", "ab", "(x", "(12))", "b", "abc"]] == \
        [True, True, True, True, True, True, False, False, False, False]
    assert [g.accepts(s) for s in ["(12", "(12)"]] == [False, True]
    assert g.accepts_prefix(b"(7") and not g.accepts_prefix("\ud800")
    with pytest.raises(GrammarError, match="accepts_prefix"):
        g.accepts_prefix(12)


def test_literal_escapes():
    g = Grammar.from_string(r'root ::= "\n\t\r\\\"\x41\u00e9\U0001F600"')
    assert g.accepts('\n\t\r\\"A\u00e9\U0001F600')
    assert not g.accepts('\n\t\r\\"A\u00e9')


def test_unicode_literals_and_classes():
    g = Grammar.from_string('root ::= "日本" [α-ω]+ [^a-z]')
    assert g.accepts("日本αβγ€")
    assert g.accepts("日本ω\U0001F600")
    assert not g.accepts("日本αx")
    assert not g.accepts("日本")


def test_char_class_ranges_negation_and_escapes():
    g = Grammar.from_string(r'root ::= [a-cx\-\]] [^\n"0-9]')
    assert g.accepts("b!") and g.accepts("-é") and g.accepts("]a") and g.accepts("xZ")
    assert not g.accepts("d!") and not g.accepts("a\n") and not g.accepts('a"') and not g.accepts("a5")


def test_any_char_matches_every_code_point():
    g = Grammar.from_string("root ::= . .")
    for s in ["ab", "\n\x00", "é€", "\U0010FFFF\U0001F600"]:
        assert g.accepts(s), s
    assert not g.accepts("a") and not g.accepts("abc")


def test_lone_surrogates_are_not_accepted():
    assert not Grammar.from_string("root ::= .").accepts("\ud800")


@pytest.mark.parametrize("op, good, bad", [
    ("*", ["", "a", "aaaa"], ["b"]),
    ("+", ["a", "aaa"], [""]),
    ("?", ["", "a"], ["aa"]),
    ("{3}", ["aaa"], ["aa", "aaaa"]),
    ("{2,}", ["aa", "aaaaaaa"], ["a"]),
    ("{1,3}", ["a", "aa", "aaa"], ["", "aaaa"]),
    ("{0,2}", ["", "a", "aa"], ["aaa"]),
    ("{ 2 , 3 }", ["aa", "aaa"], ["a"]),
])
def test_repetitions(op, good, bad):
    g = Grammar.from_string(f'root ::= "a"{op}')
    assert all(g.accepts(s) for s in good)
    assert not any(g.accepts(s) for s in bad)


def test_repetition_applies_to_whole_literal_and_groups():
    g = Grammar.from_string('root ::= "ab"{2} ("x" | "yz")* "!"')
    assert g.accepts("abab!") and g.accepts("ababxyzx!")
    assert not g.accepts("abb!") and not g.accepts("abab")


def test_rules_comments_newlines_and_nested_groups():
    text = """
# a comment on its own line
root ::= greeting ws name   # trailing comment
greeting ::= ( "hi"
             | "hello" )
ws ::= [ ]+
name ::= [A-Z] [a-z]*
"""
    assert accepts(text, "hi Bob", "hello   X", "hey Bob", "hi bob") == [True, True, False, False]


def test_recursive_rules():
    g = Grammar.from_string('root ::= "(" root ")" | ""')
    assert g.accepts("((()))") and g.accepts("")
    assert not g.accepts("(()") and not g.accepts(")(")


def test_custom_root_and_from_file(tmp_path):
    p = tmp_path / "g.gbnf"
    p.write_text('start ::= "x" | other\nother ::= "é"\n', encoding="utf-8")
    g = Grammar.from_file(p, root="start")
    assert g.accepts("x") and g.accepts("é") and not g.accepts("y")
    with pytest.raises(GrammarError, match="cannot read"):
        Grammar.from_file(tmp_path / "missing.gbnf")


def test_accepts_bytes_and_rejects_other_types():
    g = Grammar.from_string('root ::= "é"')
    assert g.accepts("é".encode()) and not g.accepts(b"\xc3")
    with pytest.raises(GrammarError):
        g.accepts(5)


def test_json_grammar_basics():
    j = Grammar.json()
    assert j.accepts('{"a": [1, -2.5e+10, true, false, null, "x\\u00e9\\n"], "b": {}}')
    for bad in ['{"a":}', "[1,]", "01", '"\n"', "{'a': 1}", "nul"]:
        assert not j.accepts(bad), bad


# -- rejections ---------------------------------------------------------------------------------

def error_of(text, **kw):
    with pytest.raises(GrammarError) as e:
        Grammar.from_string(text, **kw)
    assert isinstance(e.value, OxillamaError) and isinstance(e.value, ValueError)
    return e.value


@pytest.mark.parametrize("text, line, col, words", [
    ('root ::= "abc', 1, 10, "unterminated string"),
    ("root ::= [abc", 1, 10, "unterminated character class"),
    ('root ::= ("a"', 1, 10, "unclosed"),
    ('root ::= "a")', 1, 13, "unexpected ')'"),
    ('root ::= "a"\nfoo = "b"', 2, 5, "::="),
    ('root ::= "\\q"', 1, 11, "unknown escape"),
    ('root ::= "\\x4"', 1, 11, "hex digits"),
    ('root ::= "\\uD800"', 1, 11, "not a Unicode scalar"),
    ('root ::= [z-a]', 1, 14, "reversed"),
    ('root ::= *"a"', 1, 10, "must follow"),
    ('root ::= "a"{3,1}', 1, 13, "maximum below"),
    ('root ::= "a"{2', 1, 15, "'}'"),
    ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
])
def test_syntax_errors_name_line_and_column(text, line, col, words):
    e = error_of(text)
    assert (e.line, e.column) == (line, col), str(e)
    assert words in str(e) and f"line {line}, column {col}" in str(e)


def test_undefined_rule():
    e = error_of('root ::= "a" thing\n')
    assert "undefined rule 'thing'" in str(e) and (e.line, e.column) == (1, 14)


def test_missing_root():
    e = error_of('start ::= "a"\n')
    assert "no 'root' rule" in str(e)
    assert Grammar.from_string('start ::= "a"', root="start").accepts("a")


@pytest.mark.parametrize("text, cycle", [
    ('root ::= root "a" | "b"', "root -> root"),
    ('root ::= a\na ::= b "x"\nb ::= a "y" | "z"', "a -> b -> a"),
    ('root ::= e root "x" | "y"\ne ::= "" | "q"', "root -> root"),        # through a nullable rule
    ('root ::= e? a\na ::= e* root | "x"\ne ::= "q"', "root -> a -> root"),
    ('root ::= ("a"?)* "b"', "left recursion"),                              # repeating something empty
])
def test_left_recursion_is_rejected(text, cycle):
    e = error_of(text)
    assert "left recursion" in str(e) and cycle in str(e)
    assert e.line >= 1 and e.column >= 1


def test_right_recursion_and_nullable_prefix_without_cycle_are_fine():
    g = Grammar.from_string('root ::= e "a" root | ""\ne ::= "" | "q"')
    assert g.accepts("aqaa") and not g.accepts("qq")


def test_repetition_count_limit():
    e = error_of(f'root ::= "a"{{{MAX_REPETITION + 1}}}')
    assert "limit" in str(e)
    e = error_of('root ::= "a"{99999999999999999999}')
    assert "limit" in str(e)
    assert Grammar.from_string(f'root ::= "a"{{0,{MAX_REPETITION}}}').accepts("a" * MAX_REPETITION)


def test_nesting_limit_without_stack_overflow():
    deep = "root ::= " + "(" * (MAX_NESTING + 1) + '"a"' + ")" * (MAX_NESTING + 1)
    e = error_of(deep)
    assert "nested deeper" in str(e)
    ok = "root ::= " + "(" * MAX_NESTING + '"a"' + ")" * MAX_NESTING
    assert Grammar.from_string(ok).accepts("a")
    # far beyond any limit: must fail fast and cleanly
    error_of("root ::= " + "(" * 100_000)


def test_size_limit_on_expanded_repetitions():
    e = error_of("root ::= " + " ".join(['"a"{10000}'] * (MAX_ELEMENTS // 10000 + 1)))
    assert "too large" in str(e)
    # nested repetitions refer to helper rules, so they stay small and usable
    g = Grammar.from_string('root ::= (("a"{100}){100}){100}')
    assert not g.accepts("a" * 999)


def test_deeply_recursive_input_does_not_overflow():
    g = Grammar.from_string('root ::= "[" root "]" | "x"')
    assert g.accepts("[" * 50_000 + "x" + "]" * 50_000)
    assert not g.accepts("[" * 50_000 + "x" + "]" * 49_999)


def test_exponentially_ambiguous_grammar_stays_fast():
    # each "a" may be parsed by several rules; de-duplicated stacks keep this linear
    g = Grammar.from_string('root ::= x*\nx ::= "a" | "a" "a" | "a" "a" "a" | y\ny ::= "a"+')
    assert g.accepts("a" * 3000)


# -- agreement with Python's re ----------------------------------------------------------------

EQUIVALENTS = [
    ('root ::= [a-c]* "d" ("ab" | "c")?', r"[a-c]*d(?:ab|c)?"),
    ('root ::= ("a" | "b" "c"){1,3} [^ab]+', r"(?:a|bc){1,3}[^ab]+"),
    ('root ::= x x? "é"*\nx ::= [abé] | "cd"', r"(?:[abé]|cd)(?:[abé]|cd)?é*"),
    ('root ::= ("ab"+ | "b"{2,}) .', r"(?:(?:ab)+|b{2,}).", ),
    ('root ::= "a" ("b" root)? "c"', None),  # not regular: checked against a recursive definition
]


def balanced(s):
    # L = a (b L)? c
    def parse(i):
        if i >= len(s) or s[i] != "a":
            return -1
        i += 1
        if i < len(s) and s[i] == "b":
            i = parse(i + 1)
            if i < 0:
                return -1
        return i + 1 if i < len(s) and s[i] == "c" else -1
    return parse(0) == len(s)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdé\n", max_size=10))
def test_accepts_agrees_with_re(s):
    for gtext, rx in EQUIVALENTS:
        g = _compiled(gtext)
        want = bool(re.fullmatch(rx, s, re.DOTALL)) if rx else balanced(s)
        assert g.accepts(s) == want, (gtext, s)


_cache = {}


def _compiled(text):
    if text not in _cache:
        _cache[text] = Grammar.from_string(text)
    return _cache[text]


# -- the JSON grammar against Python's json --------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10 ** 15, 10 ** 15)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(_json_values, st.sampled_from([None, 1, 2]), st.booleans(), st.data())
def test_json_grammar_agrees_with_json(value, indent, ascii_only, data):
    j = _compiled(JSON_TEXT)
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert j.accepts(text), text
    # one edit (delete or insert a character): the grammar and json.loads must still agree
    if text:
        i = data.draw(st.integers(0, len(text) - 1))
        c = data.draw(st.sampled_from(list('{}[],:"\\0123456789.eE-+ tfnulx\n')))
        for edited in (text[:i] + text[i + 1:], text[:i] + c + text[i:]):
            try:
                json.loads(edited)
                valid = True
            except ValueError:
                valid = False
            # the grammar bounds whitespace runs and digit counts and has no leading whitespace;
            # nothing else may differ
            if valid and (edited[:1].isspace() or re.search(r"\d{17}|[eE][-+]?\d{4}", edited) or any(
                    not re.fullmatch(r" |\n[ \t]{0,20}", w) for w in re.findall(r"[ \t\n\r]+", edited))):
                continue
            assert j.accepts(edited) == valid, edited


JSON_TEXT = Grammar.json().text


# -- robustness: arbitrary text is a grammar or a GrammarError, quickly ---------------------------

@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='root::=|()[]^-*+?{}0123456789,."\\xu# \nabé', max_size=40))
def test_arbitrary_text_parses_or_raises_grammar_error(text):
    try:
        g = Grammar.from_string(text)
    except GrammarError as e:
        assert "line" in str(e)
        return
    g.accepts("abc")
    g.accepts("")


def test_machine_rejects_malformed_arrays():
    from oxillama.grammar._cgrammar import Machine

    sets = bytes(32)
    with pytest.raises(GrammarError):
        Machine([0, -1], [0, 1], [0], sets + b"x")       # bitmaps not a multiple of 32 bytes
    with pytest.raises(GrammarError):
        Machine([5, -1], [0, 1], [0], sets)              # byte-set id out of range
    with pytest.raises(GrammarError):
        Machine([-9, -1], [0, 1], [0], sets)             # rule reference out of range
    with pytest.raises(GrammarError):
        Machine([0, -1], [0, 1], [7], sets)              # alternative start out of range
    with pytest.raises(GrammarError):
        Machine([0, 0], [0, 1], [0], sets)               # last alternative not terminated
    m = Machine([0, -1], [0, 1], [0], sets)
    with pytest.raises(GrammarError):
        m.walk(12345, b"a")                               # unknown state id
    with pytest.raises(GrammarError):
        m.initial(3)


def test_llama_cpp_layout_conventions():
    # body on the line after '::=', comments inside groups, raw tab/newline inside a class
    text = 'root ::=\n  "[" ws (\n    item  # first\n    ("," ws item)*\n  )? "]"\nitem ::= [a-z]+ ws\nws ::= ([ \t\n] ws)?\n'
    g = Grammar.from_string(text)
    assert g.accepts("[ab,\tc \n]") and g.accepts("[]") and not g.accepts("[a,]")


def test_root_that_can_never_finish_is_rejected():
    e = error_of('root ::= "a" root | "b" x\nx ::= "c" x')
    assert "never finish" in str(e) and (e.line, e.column) == (1, 1)
    # an unproductive rule that is only one alternative among others is harmless
    assert Grammar.from_string('root ::= "a" | x\nx ::= "c" x').accepts("a")
