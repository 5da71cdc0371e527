"""GrammarMatcher over synthetic and real vocabularies: masks, single-token checks, UTF-8 splits, EOG, state."""
import json

import msgpack
import numpy as np
import pytest

from grammar_helpers import random_walk, smollm2_vocab
from oxillama.errors import GrammarError
from oxillama.grammar import Grammar, GrammarMatcher
from oxillama.grammar import matcher as matcher_mod
from oxillama.grammar.matcher import tokenizer_vocab

ARITH = r"""
root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= "0" | [1-9] [0-9]{0,2} | "(" ws expr ws ")"
ws     ::= " "?
"""

SYNTH = [bytes([b]) for b in range(256)] + [b"12", b" + ", b"(", b"))", b"\xe2", b"\x82\xac", b"\xe2\x82",
                                            b"\xac", "€a".encode(), b"", b"ab", b"{\"", b"\": "]
EOG = [len(SYNTH)]
SYNTH = SYNTH + [b""]


def mask_by_single_checks(m):
    return np.array([m.is_token_allowed(t) for t in range(m.n_vocab)])


@pytest.mark.parametrize("grammar", [ARITH, None])
def test_mask_agrees_with_single_token_checks_along_walks(grammar):
    g = Grammar.from_string(grammar) if grammar else Grammar.json()
    m = GrammarMatcher(g, SYNTH, EOG)
    rng = np.random.default_rng(0)
    for _ in range(3):
        m.reset()
        for _ in range(30):
            mask = m.fill_mask(np.zeros(m.n_vocab, dtype=bool))
            assert np.array_equal(mask, mask_by_single_checks(m))
            body = [t for t in np.flatnonzero(mask) if t not in EOG]
            if not body:
                break
            m.accept_token(int(rng.choice(body)))


def test_walks_that_end_are_accepted_by_the_grammar():
    g = Grammar.from_string(ARITH)
    m = GrammarMatcher(g, SYNTH, EOG)
    rng = np.random.default_rng(1)
    prefer = np.array([ord(c) for c in "0123456789+-*/() "])
    ended = 0
    for _ in range(30):
        m.reset()
        data, done = random_walk(m, rng, max_tokens=200, p_end=0.5, prefer=prefer)
        if done:
            ended += 1
            assert g.accepts(data), data
            eval(data.decode().replace("/", "*"))  # well-formed arithmetic
    assert ended >= 20


def test_utf8_characters_split_across_tokens():
    g = Grammar.from_string('root ::= "€" [^a] "a"')
    m = GrammarMatcher(g, SYNTH, EOG)
    # multi-byte tokens after the 256 single bytes (b"\xe2" exists twice: both are allowed)
    t_e2, t_82ac, t_e282, t_ac, t_eur_a = (SYNTH.index(b, 256) for b in (b"\xe2", b"\x82\xac", b"\xe2\x82",
                                                                          b"\xac", "€a".encode()))
    assert set(m.allowed_tokens()) == {0xE2, t_e2, t_e282}
    m.accept_token(t_e282)          # half of "€"
    assert not m.can_end
    assert set(m.allowed_tokens()) == {0xAC, t_ac}
    m.accept_token(t_ac)
    allowed = set(m.allowed_tokens())
    assert ord("a") not in allowed and ord("b") in allowed and t_e2 in allowed and t_eur_a in allowed
    assert 0x80 not in allowed       # a lone continuation byte is never a character start
    m.accept_token(t_eur_a)          # "€" for [^a], then "a"
    assert m.can_end and m.is_finished
    assert set(m.allowed_tokens()) == set(EOG)


def test_eog_only_where_the_grammar_can_end():
    g = Grammar.from_string('root ::= "a" "b"?')
    m = GrammarMatcher(g, SYNTH, EOG)
    assert not m.is_token_allowed(EOG[0]) and not m.can_end
    with pytest.raises(GrammarError, match="cannot end"):
        m.accept_token(EOG[0])
    m.accept_token(ord("a"))
    assert m.can_end and not m.is_finished and m.is_token_allowed(EOG[0])
    assert m.fill_mask(np.zeros(m.n_vocab, bool))[EOG[0]]
    m.accept_token(EOG[0])
    assert m.is_finished and not m.is_token_allowed(ord("b"))
    assert not m.fill_mask(np.zeros(m.n_vocab, bool)).any()
    with pytest.raises(GrammarError, match="already ended"):
        m.accept_token(ord("b"))


def test_empty_tokens_are_never_allowed():
    m = GrammarMatcher(Grammar.from_string("root ::= .*"), SYNTH, EOG)
    empty = SYNTH.index(b"")
    assert not m.is_token_allowed(empty)
    assert not m.fill_mask(np.zeros(m.n_vocab, bool))[empty]


def test_rejected_token_raises_and_leaves_state_alone():
    m = GrammarMatcher(Grammar.from_string('root ::= "ab"'), SYNTH, EOG)
    with pytest.raises(GrammarError, match="not allowed"):
        m.accept_token(ord("b"))
    m.accept_token(SYNTH.index(b"ab"))
    assert m.can_end


def test_state_roundtrip_through_msgpack():
    g = Grammar.json()
    m = GrammarMatcher(g, SYNTH, EOG)
    m.accept_bytes(b'{"a": [1, {"b": "x')
    state = msgpack.unpackb(msgpack.packb(m.get_state()), raw=False)
    want = m.allowed_tokens()
    m2 = GrammarMatcher(g, SYNTH, EOG)
    m2.set_state(state)
    assert np.array_equal(m2.allowed_tokens(), want)
    m2.accept_bytes(b'"}]}')
    assert m2.can_end
    m.reset()
    m.set_state(state)
    m.accept_bytes(b'y"}]}')
    assert m.can_end


@pytest.mark.parametrize("bad", [None, {}, {"version": 99, "stacks": [[1]]}, {"version": 1, "stacks": []},
                                 {"version": 1, "stacks": [[10 ** 9]]}, {"version": 1, "stacks": [["x"]]},
                                 {"version": 1, "stacks": [[-5]]}, {"version": 1, "stacks": [[0, 10 ** 12]]},
                                 {"version": 1, "stacks": [[1]], "grammar": "0" * 16}])
def test_bad_state_is_rejected(bad):
    m = GrammarMatcher(Grammar.json(), SYNTH, EOG)
    if isinstance(bad, dict) and "grammar" not in bad:
        bad = dict(bad, grammar=m.grammar.fingerprint)
    with pytest.raises(GrammarError):
        m.set_state(bad)
    assert m.is_token_allowed(ord("{"))  # the matcher is still usable


def test_state_from_another_grammar_is_rejected():
    a = GrammarMatcher(Grammar.from_string('root ::= "a"+'), SYNTH, EOG)
    b = GrammarMatcher(Grammar.from_string('root ::= "b"+'), SYNTH, EOG)
    with pytest.raises(GrammarError, match="different grammar"):
        b.set_state(a.get_state())


def test_apply_to_logits_and_argument_checks():
    m = GrammarMatcher(Grammar.from_string('root ::= [0-9]+'), SYNTH, EOG)
    logits = np.random.default_rng(0).standard_normal(m.n_vocab).astype(np.float32)
    orig = logits.copy()
    m.apply_to_logits(logits)
    allowed = m.allowed_tokens()
    assert np.all(np.isneginf(np.delete(logits, allowed)))
    assert np.array_equal(logits[allowed], orig[allowed])
    assert set(allowed) == set(range(48, 58)) | {SYNTH.index(b"12")}
    for bad in [np.zeros(3, np.float32), np.zeros(m.n_vocab, np.float64), [0.0] * m.n_vocab]:
        with pytest.raises(GrammarError):
            m.apply_to_logits(bad)
    with pytest.raises(GrammarError):
        m.fill_mask(np.zeros(m.n_vocab, np.int32))
    for tok in (-1, m.n_vocab):
        with pytest.raises(GrammarError, match="out of range"):
            m.is_token_allowed(tok)
    with pytest.raises(GrammarError, match="out of range"):
        GrammarMatcher(Grammar.json(), SYNTH, [len(SYNTH)])
    with pytest.raises(GrammarError):
        GrammarMatcher(Grammar.json(), ["a", b"b"], [])


def test_tables_are_rebuilt_when_large(monkeypatch):
    monkeypatch.setattr(matcher_mod, "MAX_MACHINE_STATES", 5)
    g = Grammar.json()
    m = GrammarMatcher(g, SYNTH, EOG)
    text = b'{"key": [1, 2.5, {"x": null}, "str\\n"], "b": true}'
    for i in range(len(text)):
        m.accept_token(text[i])
        assert m.is_token_allowed(text[i + 1]) if i + 1 < len(text) else m.can_end
    assert m._machine.n_states < 60


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    from oxillama.tokenizer import Tokenizer

    return Tokenizer.from_gguf(smollm2_path)


@pytest.fixture(scope="module")
def smollm2(smollm2_tokenizer):
    return tokenizer_vocab(smollm2_tokenizer)


def test_tokenizer_vocab_matches_gguf_byte_decoding(smollm2, smollm2_path):
    # the tokenizer's bytes agree with an independent GPT-2 byte decoding of the GGUF token list
    # (control tokens blanked in both)
    vocab, eog = smollm2
    ref, ref_eog = smollm2_vocab(smollm2_path)
    assert vocab == ref and ref_eog[0] in eog


def test_real_tokenizer_json_text_and_control_tokens(smollm2_tokenizer):
    tok = smollm2_tokenizer
    m = GrammarMatcher.from_tokenizer(Grammar.json(), tok)
    text = '{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "ok": true, "x": null}'
    for t in tok.encode(text, add_special=False):
        assert m.is_token_allowed(t), (t, tok.token_to_bytes(t))
        assert not m.can_end
        m.accept_token(t)
    assert m.can_end and all(m.is_token_allowed(t) for t in tok.eog_ids)
    m.reset()
    m.accept_bytes(b'{"a": "')
    control = [i for i in range(tok.n_vocab) if tok.is_special(i)]
    assert control and not m.allowed_tokens()[np.isin(m.allowed_tokens(), control)].size
    assert m.is_token_allowed(tok.token_to_id("<"))
    # the (id, bytes) pairs Tokenizer.vocab_bytes() returns are accepted as they are
    m2 = GrammarMatcher(Grammar.json(), tok.vocab_bytes(), sorted(tok.eog_ids))
    assert m2.is_token_allowed(tok.encode("{", add_special=False)[0])


def test_real_vocab_json_walks(smollm2):
    vocab, eog = smollm2
    g = Grammar.json()
    m = GrammarMatcher(g, vocab, eog)
    rng = np.random.default_rng(0)
    structural = np.array([i for i, b in enumerate(vocab) if b and set(b) <= set(b'{}[]",:0123456789 ')])
    ended = 0
    for _ in range(6):
        m.reset()
        data, done = random_walk(m, rng, max_tokens=150, p_end=0.5, prefer=structural)
        if done:
            ended += 1
            json.loads(data.decode("utf-8"))
        # spot-check the full mask against single-token checks in the state the walk reached
        if not m.is_finished:
            mask = m.fill_mask(np.zeros(m.n_vocab, bool))
            for t in rng.choice(m.n_vocab, 300, replace=False):
                assert mask[t] == m.is_token_allowed(int(t))
    assert ended >= 3


def test_real_vocab_arithmetic(smollm2):
    vocab, eog = smollm2
    g = Grammar.from_string(ARITH)
    m = GrammarMatcher(g, vocab, eog)
    rng = np.random.default_rng(2)
    ended = 0
    for _ in range(8):
        m.reset()
        data, done = random_walk(m, rng, max_tokens=100, p_end=0.5)
        if done:
            ended += 1
            assert g.accepts(data)
            eval(data.decode().replace("/", "*"))
    assert ended >= 4


def test_masks_agree_with_regex_partial_matching():
    """An independent oracle: a token is allowed iff prefix + token can still be extended to a match."""
    regex = pytest.importorskip("regex")
    from test_gbnf import EQUIVALENTS

    alphabet = "abcdé\n"
    words = list(alphabet) + [a + b for a in alphabet for b in alphabet] + ["abab", "bcbc", "ééé", "cab"]
    vocab = [w.encode() for w in words] + [b""]
    eog = len(vocab) - 1
    rng = np.random.default_rng(5)
    for gtext, rx in EQUIVALENTS:
        if rx is None:
            continue
        m = GrammarMatcher(Grammar.from_string(gtext), vocab, [eog])
        pat = regex.compile(rx, regex.DOTALL)
        for _ in range(4):
            m.reset()
            prefix = ""
            for _ in range(12):
                mask = m.fill_mask(np.zeros(m.n_vocab, bool))
                want = [pat.fullmatch(prefix + w, partial=True) is not None for w in words]
                assert mask[:-1].tolist() == want, (gtext, prefix)
                assert mask[eog] == (pat.fullmatch(prefix) is not None)
                body = np.flatnonzero(mask[:-1])
                if not len(body):
                    break
                t = int(rng.choice(body))
                m.accept_token(t)
                prefix += words[t]


def test_vocabulary_that_cannot_continue_raises_on_apply():
    # the vocabulary has no token for "z", so after "a" nothing can follow
    vocab = [b"a", b"b", b""]
    m = GrammarMatcher(Grammar.from_string('root ::= "a" "z"'), vocab, [2])
    m.accept_token(0)
    assert not m.allowed_tokens().size
    with pytest.raises(GrammarError, match="no token of the vocabulary"):
        m.apply_to_logits(np.zeros(3, np.float32))


def test_tokenizer_vocab_blanks_exactly_the_special_tokens(smollm2_tokenizer, smollm2):
    tok = smollm2_tokenizer
    vocab, eog = smollm2
    raw = dict(tok.vocab_bytes())
    assert [i for i, b in enumerate(vocab) if b != raw[i]] == [i for i in range(tok.n_vocab) if tok.is_special(i)]
    assert eog == sorted(tok.eog_ids)
    # every matcher over the tokenizer reuses one trie (and so one shared mask cache)
    assert GrammarMatcher.from_tokenizer(Grammar.json(), tok).vocab is \
        GrammarMatcher.from_tokenizer(Grammar.from_string('root ::= "x"'), tok).vocab
