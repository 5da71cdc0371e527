"""Vocabulary masks: the walk that allows whole looping subtrees at once against the plain trie walk,
the unit summaries it relies on, and the per-matcher and shared mask caches against fresh masks."""
import os

import numpy as np
import pytest

from grammar_helpers import GEMMA3, gemma3_vocab, smollm2_vocab
from oxillama.grammar import Grammar, GrammarMatcher
from oxillama.grammar import matcher as matcher_mod
from oxillama.grammar._cgrammar import Vocab
from oxillama.grammar.matcher import shared_masks

UNIT_UTF8_2, UNIT_OTHER, UNIT_UNALIGNED = 41, 44, 63    # OXG_UNIT_* in csrc/grammar/grammar.h
PUNCTUATION = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

# bytes the looping walk must not be fooled by: truncated, malformed, overlong and surrogate
# sequences, stray continuation bytes, 4-byte characters, control bytes, quotes inside words
TRICKY = [bytes([b]) for b in range(256)] + [s.encode() for s in (
    "ab", "abc", "a\"b", "a\\n", "é", "éa", "aé", "€", "€€", "日本", "日本語", "😀", "a😀b", "\u07ff", "\u0800",
    "\uffff", "\U0010ffff", "\u4e00", "\u4e00x", "x\u4e00", "\tab", "a\nb", "ab\x7f", " name", "\"}",
    "\",\n", "-1.5e3", "true", "nul", "\\u00e9", "Ab9", "a-z", "é\"")] + [
    b"\xe2\x82", b"\xe2\x82a", b"\xc3", b"\xc3a", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    b"\xf0\x9f\x98", b"\x80\x80", b"a\xbf", b"\xff", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\x80", b""]

GRAMMARS = {
    "json": None,
    "no_quote": r'root ::= [^"]*',
    "lower_m": r"root ::= [a-m ]* ",
    "no_cjk_one": "root ::= [^\u4e00]* \"!\"",
    "two_byte_only": "root ::= [\u0080-\u07ff]*",
    "no_emoji": "root ::= [^\U0001F600]*",
    "lines": r'root ::= ([^\n] | "\n" "  ")*',
    "word_list": r'root ::= [a-z]+ ("," [a-z]+)* "."',
    "one_char": r'root ::= [^"] "!"',           # every character leads on, never back
    "pairs": r"root ::= ([a-z] [^a-z])*",
}


def grammar(name):
    return Grammar.json() if GRAMMARS[name] is None else Grammar.from_string(GRAMMARS[name])


def ascii_unit(b):
    if b in b"\t\n\r":
        return 1 + b"\t\n\r".index(b)
    if b < 0x20:
        return 0
    for kind, group in ((4, b" "), (5, b"0123456789"), (6, b"abcdefghijklmnopqrstuvwxyz"),
                        (7, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), (8, b"\x7f")):
        if b in group:
            return kind
    return 9 + PUNCTUATION.index(b)


def units(tok):
    """[(start, kind)] of a token, with Python's UTF-8 decoder judging multi-byte characters."""
    out, k = [], 0
    while k < len(tok):
        b = tok[k]
        want = 2 if 0xC0 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF7 else 1
        piece = tok[k:k + want]
        if b < 0x80:
            kind = ascii_unit(b)
        else:
            try:
                ok = want > 1 and len(piece) == want and len(piece.decode("utf-8")) == 1
            except UnicodeDecodeError:
                ok = False
            kind = UNIT_UTF8_2 + want - 2 if ok else UNIT_OTHER
        out.append((k, kind))
        k += len(piece)
    return out


def fresh_mask(m):
    """The mask of m's state by the plain trie walk, no cache involved."""
    mask = np.zeros(m.n_vocab, dtype=bool)
    if m.is_finished and m._ended:
        return mask
    m._machine.fill_mask(m._state, m.vocab, mask, skip_loops=False)
    mask[m.eog_ids] = m.can_end
    return mask


def test_unit_summaries_of_trie_nodes():
    v = Vocab(TRICKY, [len(TRICKY) - 1])
    byte, depth, end, below = (np.asarray(a) for a in (v.byte, v.depth, v.end, v.below))
    prefix = []
    toks = [t for t in TRICKY if t]
    for i in range(v.n_trie_nodes):
        del prefix[depth[i] - 1:]
        prefix.append(int(byte[i]))
        p = bytes(prefix)
        want = 0
        for t in toks:
            if len(t) > len(p) and t.startswith(p):
                us = units(t)
                for start, kind in us:
                    if start >= len(p) - 1:
                        want |= 1 << kind
                if all(start != len(p) - 1 for start, _ in us):
                    want |= 1 << UNIT_UNALIGNED
        assert int(below[i]) == want, (p, hex(int(below[i])), hex(want))
        assert end[i] > i


def test_trie_orders_tokens_by_bytes():
    # many shared prefixes, NUL bytes, duplicates and long tokens: every path of the radix sort
    rng = np.random.default_rng(4)
    vocab = [bytes(rng.choice(np.frombuffer(b"\x00ab\xffc", np.uint8), int(rng.integers(0, 40))))
             for _ in range(3000)] + TRICKY
    skip = [5, 17, len(vocab) - 1]
    v = Vocab(vocab, skip)
    want = sorted((i for i, b in enumerate(vocab) if b and i not in skip), key=lambda i: (vocab[i], i))
    got = np.asarray(v.toks)[:-1].tolist()
    assert [vocab[i] for i in got] == [vocab[i] for i in want]
    assert sorted(got) == sorted(want)


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_looping_walk_equals_plain_walk_tricky_vocab(name):
    m = GrammarMatcher(grammar(name), TRICKY, [len(TRICKY) - 1])
    rng = np.random.default_rng(0)
    for _ in range(6):
        m.reset()
        for _ in range(25):
            mask = m.fill_mask(np.zeros(m.n_vocab, bool))
            assert np.array_equal(mask, fresh_mask(m))
            # and each token alone agrees (the walk of its bytes through the transition table)
            assert mask.tolist() == [m.is_token_allowed(t) for t in range(m.n_vocab)]
            body = [t for t in np.flatnonzero(mask) if t not in m.eog_ids]
            if not body:
                break
            m.accept_token(int(rng.choice(body)))


def real_vocabs():
    out = [pytest.param(smollm2_vocab, id="smollm2")]
    if os.path.exists(GEMMA3):
        out.append(pytest.param(gemma3_vocab, id="gemma3"))
    return out


@pytest.mark.parametrize("vocab_fn", real_vocabs())
def test_looping_walk_equals_plain_walk_real_vocab(vocab_fn):
    if vocab_fn is smollm2_vocab and not os.path.exists(smollm2_vocab.__defaults__[0]):
        pytest.skip("SmolLM2 model file not available")
    vocab, eog = vocab_fn()
    rng = np.random.default_rng(1)
    for name in ("json", "no_cjk_one", "two_byte_only", "lines"):
        m = GrammarMatcher(grammar(name), vocab, eog)
        for _ in range(2):
            m.reset()
            if name == "json":
                m.accept_bytes(b'{"name": "')    # start inside a string, the state that matters most
                mask = np.zeros(m.n_vocab, bool)
                # most of the vocabulary is string content: allowed by subtrees, not walked
                assert 4 * m._machine.fill_mask(m._state, m.vocab, mask) < \
                    m._machine.fill_mask(m._state, m.vocab, mask, skip_loops=False)
            for _ in range(12):
                mask = m.fill_mask(np.zeros(m.n_vocab, bool))
                assert np.array_equal(mask, fresh_mask(m)), name
                body = np.setdiff1d(np.flatnonzero(mask), m.eog_ids)
                if not len(body):
                    break
                m.accept_token(int(rng.choice(body)))


def test_cached_masks_equal_fresh_ones_across_rollbacks_and_table_rebuilds(monkeypatch):
    # small tables: the machine is rebuilt often, so state ids are reused for other stacks
    monkeypatch.setattr(matcher_mod, "MAX_MACHINE_STATES", 12)
    g = Grammar.json()
    m = GrammarMatcher(g, TRICKY, [len(TRICKY) - 1])
    rng = np.random.default_rng(2)
    saved = []
    for step in range(300):
        if saved and rng.random() < 0.2:
            m.set_state(saved[rng.integers(len(saved))])    # roll back
        elif rng.random() < 0.2:
            saved.append(m.get_state())
        mask = m.fill_mask(np.zeros(m.n_vocab, bool))
        assert np.array_equal(mask, fresh_mask(m)), step
        body = np.setdiff1d(np.flatnonzero(mask), m.eog_ids)
        if not len(body) or m.is_finished:
            m.reset()
            continue
        m.accept_token(int(rng.choice(body)))


def test_shared_masks_serve_other_matchers_and_snapshots():
    g = Grammar.json()
    eog = [len(TRICKY) - 1]
    a = GrammarMatcher(g, TRICKY, eog)
    a.accept_bytes(b'{"k": [1, "x')
    want = a.fill_mask(np.zeros(a.n_vocab, bool))
    # a second matcher, built the way the engine builds one per generate() call, finds it shared
    b = GrammarMatcher(Grammar.json(), TRICKY, eog)
    b.accept_bytes(b'{"k": [1, "yz')
    assert b.vocab is a.vocab
    n_before = len(shared_masks(a.vocab)._masks)
    assert np.array_equal(b.fill_mask(np.zeros(b.n_vocab, bool)), want)
    assert len(shared_masks(a.vocab)._masks) == n_before
    # a matcher restored from a saved state
    c = GrammarMatcher(g, TRICKY, eog)
    c.set_state(a.get_state())
    assert np.array_equal(c.fill_mask(np.zeros(c.n_vocab, bool)), want)
    # the same stacks under another grammar are another key
    d = GrammarMatcher(Grammar.from_string('root ::= "b"*'), TRICKY, eog)
    e = GrammarMatcher(Grammar.from_string('root ::= "a"*'), TRICKY, eog)
    assert d.get_state()["stacks"] == e.get_state()["stacks"]
    assert d.allowed_tokens().tolist() == [ord("b"), eog[0]]
    assert e.allowed_tokens().tolist() == [ord("a"), eog[0]]
    # an ended matcher allows nothing, whatever a live state of the same stacks allows
    f = GrammarMatcher(Grammar.from_string('root ::= "a"*'), TRICKY, eog)
    f.accept_token(eog[0])
    assert not f.allowed_tokens().size and e.allowed_tokens().size


def test_apply_to_logits_into_another_buffer():
    m = GrammarMatcher(Grammar.from_string('root ::= "ab" | "b"'), TRICKY, [len(TRICKY) - 1])
    logits = np.random.default_rng(3).standard_normal(m.n_vocab).astype(np.float32)
    keep = logits.copy()
    out = np.empty_like(logits)
    assert m.apply_to_logits(logits, out=out) is out
    assert np.array_equal(logits, keep)
    allowed = m.allowed_tokens()
    assert np.array_equal(out[allowed], logits[allowed])
    assert np.isneginf(np.delete(out, allowed)).all()
    assert np.array_equal(m.apply_to_logits(logits.copy()), out)


def test_prebuilt_trie_must_match_eog_ids():
    from oxillama.errors import GrammarError
    v = Vocab(TRICKY, [len(TRICKY) - 1])
    assert GrammarMatcher(Grammar.json(), v, [len(TRICKY) - 1]).vocab is v
    with pytest.raises(GrammarError, match="end-of-generation"):
        GrammarMatcher(Grammar.json(), v, [])


def test_compiled_grammars_are_shared_and_errors_still_raised():
    from oxillama.errors import GrammarError
    assert Grammar.json()._arrays is Grammar.json()._arrays
    for _ in range(2):
        with pytest.raises(GrammarError):
            Grammar.from_string("root ::= undefined_rule")
