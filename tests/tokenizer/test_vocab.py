"""Tokenizers built from small hand-made metadata: each vocabulary kind's algorithm, token types, errors."""
import itertools
import logging

import numpy as np
import pytest

from oxillama.errors import TokenizerError
from oxillama.tokenizer import Tokenizer
from oxillama.tokenizer.tokenizer import _bytes_to_unicode

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BYTE_CHARS = [_bytes_to_unicode()[b] for b in range(256)]


def gpt2_metadata(extra_tokens=(), merges=(), pre="gpt-2", **kwargs):
    """256 byte-level single-character tokens, then `extra_tokens` as (text, type)."""
    tokens = list(BYTE_CHARS) + [t for t, _ in extra_tokens]
    types = [NORMAL] * 256 + [ty for _, ty in extra_tokens]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": np.array(types, np.int32), "tokenizer.ggml.merges": list(merges)}
    md.update(kwargs)
    return md


def spm_metadata(pieces, add_space_prefix=True, model="llama", byte_tokens=True, **kwargs):
    """<unk> <s> </s>, optional <0x00>..<0xFF>, then `pieces` as (text, score)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [UNKNOWN, CONTROL, CONTROL]
    scores = [0.0, 0.0, 0.0]
    if byte_tokens:
        tokens += [f"<0x{b:02X}>" for b in range(256)]
        types += [BYTE] * 256
        scores += [0.0] * 256
    for text, score in pieces:
        tokens.append(text)
        types.append(NORMAL)
        scores.append(score)
    md = {"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": np.array(types, np.int32), "tokenizer.ggml.scores": np.array(scores, np.float32),
          "tokenizer.ggml.add_space_prefix": add_space_prefix, "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
    md.update(kwargs)
    return md


# ---------------------------------------------------------------- byte-level BPE

def test_gpt2_merges_and_byte_level_decode():
    g = _bytes_to_unicode()
    md = gpt2_metadata([("he", NORMAL), (g[32] + "w", NORMAL)], merges=["h e", g[32] + " w"])
    tok = Tokenizer.from_metadata(md)
    he, sp_w = 256, 257
    assert tok.encode("he wh") == [he, sp_w, ord("h")]
    assert tok.decode([he, sp_w]) == "he w"
    assert tok.token_to_bytes(sp_w) == b" w"
    assert tok.token_to_bytes(0xE9 - 0) == bytes([0xE9])  # single byte-level tokens are their byte


def test_special_partition_is_longest_token_first_not_leftmost():
    """llama.cpp tries special tokens longest first over the whole text: in "abcd" the 3-character "bcd" wins
    although "ab" starts earlier (Hugging Face's added tokens would give ab, c, d)."""
    md = gpt2_metadata([("ab", USER_DEFINED), ("bcd", USER_DEFINED)])
    tok = Tokenizer.from_metadata(md)
    ab, bcd = 256, 257
    assert tok.encode("abcd") == [ord("a"), bcd]
    assert tok.encode("ab cd") == [ab, ord(" "), ord("c"), ord("d")]  # byte b is token id b here
    assert tok.encode("xabcdab") == [ord("x"), ord("a"), bcd, ab]


def test_control_tokens_only_parsed_when_asked():
    md = gpt2_metadata([("<|ctl|>", CONTROL), ("<user>", USER_DEFINED)])
    tok = Tokenizer.from_metadata(md)
    ctl, user = 256, 257
    assert ctl not in tok.encode("a<|ctl|>b")
    assert tok.encode("a<|ctl|>b", parse_special=True) == [ord("a"), ctl, ord("b")]
    assert tok.encode("a<user>b") == [ord("a"), user, ord("b")]
    assert tok.decode([ctl, user]) == "<|ctl|><user>"
    assert tok.decode([ctl, user], skip_special=True) == "<user>"


def test_eog_detected_by_text_and_forced_control():
    md = gpt2_metadata([("<|im_end|>", NORMAL), ("<|endoftext|>", CONTROL)],
                       **{"tokenizer.ggml.eos_token_id": 257, "tokenizer.ggml.bos_token_id": 257})
    tok = Tokenizer.from_metadata(md)
    assert tok.eog_ids == {256, 257}
    assert tok.is_special(256)  # llama.cpp makes such tokens control tokens
    assert 256 not in tok.encode("<|im_end|>")


def test_unknown_pre_warns_and_uses_default(caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        tok = Tokenizer.from_metadata(gpt2_metadata(pre="no-such-pre"))
    assert "no-such-pre" in caplog.text
    ref = Tokenizer.from_metadata(gpt2_metadata(pre="default"))
    text = "x 12345 ab!! cd"
    assert tok.encode(text) == ref.encode(text)


def test_add_bos_eos_flags():
    md = gpt2_metadata([("<s>", CONTROL), ("</s>", CONTROL)], pre="llama-bpe",
                       **{"tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 257,
                          "tokenizer.ggml.add_eos_token": True})
    tok = Tokenizer.from_metadata(md)
    assert tok.add_bos  # the llama3 family adds BOS unless the metadata says otherwise
    assert tok.encode("a") == [256, ord("a"), 257]
    assert tok.encode("a", add_special=False) == [ord("a")]
    md["tokenizer.ggml.add_bos_token"] = False
    assert Tokenizer.from_metadata(md).encode("a") == [ord("a"), 257]


@pytest.mark.parametrize("md,needle", [
    ({}, "tokenizer.ggml.model"),
    ({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]}, "bert"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []}, "tokenizer.ggml.tokens"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]}, "merges"),
    ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b"],
      "tokenizer.ggml.scores": np.zeros(3, np.float32)}, "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": "abc"}, "tokenizer.ggml.tokens"),
    ({"tokenizer.ggml.model": 3, "tokenizer.ggml.tokens": ["a"]}, "tokenizer.ggml.model"),
])
def test_bad_metadata_raises(md, needle):
    with pytest.raises(TokenizerError, match=needle.replace(".", r"\.")):
        Tokenizer.from_metadata(md)


def test_bad_arguments_raise():
    tok = Tokenizer.from_metadata(gpt2_metadata())
    with pytest.raises(TokenizerError):
        tok.encode(b"bytes")
    with pytest.raises(TokenizerError, match="surrogate"):
        tok.encode("ok \ud800 not")
    with pytest.raises(TokenizerError):
        tok.decode([True, False])
    with pytest.raises(TokenizerError):
        tok.decode([1.0])
    with pytest.raises(TokenizerError):
        tok.decode("abc")
    with pytest.raises(TokenizerError, match="out of range"):
        tok.decode([1, 256])
    with pytest.raises(TokenizerError, match="out of range"):
        tok.decode([-1])
    with pytest.raises(TokenizerError):
        tok.decode(["a"])
    with pytest.raises(TokenizerError):
        tok.token_to_bytes(10**6)
    with pytest.raises(TokenizerError):
        Tokenizer.from_gguf(12)


@pytest.mark.parametrize("call", [
    lambda tok: tok.is_eog(np.array(1)), lambda tok: tok.is_eog("a"), lambda tok: tok.is_eog(1.0),
    lambda tok: tok.is_eog(10**6), lambda tok: tok.token_to_id(["a"]), lambda tok: tok.token_to_id(None),
    lambda tok: tok.token_to_id(b"a"), lambda tok: tok.is_special([1]), lambda tok: tok.token_text(np.array([1])),
])
def test_wrong_types_raise_tokenizer_errors_not_type_errors(call):
    tok = Tokenizer.from_metadata(gpt2_metadata())
    with pytest.raises(TokenizerError):
        call(tok)
    assert tok.is_eog(np.int64(tok.eos_id)) if tok.eos_id is not None else True


def test_vocab_bytes_cached_and_consistent():
    tok = Tokenizer.from_metadata(gpt2_metadata([("<|ctl|>", CONTROL)]))
    table = tok.vocab_bytes()
    assert table is tok.vocab_bytes()
    assert len(table) == tok.n_vocab
    assert all(tok.token_to_bytes(i) == b for i, b in table)
    assert table[256] == (256, b"<|ctl|>")


# ---------------------------------------------------------------- SentencePiece-style BPE

def test_spm_merges_follow_scores():
    """The adjacent pair whose merged token scores highest merges first."""
    base = [("\u2581", -1.0), ("a", -1.0), ("b", -1.0), ("c", -1.0)]
    tok = Tokenizer.from_metadata(spm_metadata(base + [("ab", -5.0), ("bc", -2.0)], add_space_prefix=False))
    assert [tok.token_text(i) for i in tok.encode("abc", add_special=False)] == ["a", "bc"]
    tok = Tokenizer.from_metadata(spm_metadata(base + [("ab", -2.0), ("bc", -5.0)], add_space_prefix=False))
    assert [tok.token_text(i) for i in tok.encode("abc", add_special=False)] == ["ab", "c"]


def _spm_oracle(text, t2i, scores, unk):
    """llama.cpp's SPM by brute force: merge the best adjacent pair (highest score, then leftmost) until
    none is a token; pieces that are not tokens become byte tokens <0xNN> (here all present) or unk."""
    syms = list(text)
    while True:
        best = None
        for i in range(len(syms) - 1):
            tid = t2i.get(syms[i] + syms[i + 1])
            if tid is not None and (best is None or scores[tid] > best[0]):
                best = (scores[tid], i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    out = []
    for s in syms:
        if s in t2i:
            out.append(t2i[s])
        else:
            byte_ids = [t2i.get(f"<0x{b:02X}>") for b in s.encode()]
            out.extend(byte_ids if None not in byte_ids else [unk])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_spm_agrees_with_llama_cpp_algorithm_on_random_vocabularies(seed):
    """Random vocabularies over a few characters with many equal scores (ties go to the leftmost pair),
    one character ("é") that is never a token: the C encoder against a brute-force oracle."""
    rng = np.random.default_rng(seed)
    alphabet = ["a", "b", "c", "\u2581"]
    texts = {"".join(rng.choice(alphabet, size=int(rng.integers(2, 5)))) for _ in range(40)}
    pieces = [(ch, -1.0) for ch in alphabet] + [(t, float(rng.choice([-3.0, -2.0, -2.0, -1.5]))) for t in sorted(texts)]
    for byte_tokens in (True, False):
        md = spm_metadata(pieces, add_space_prefix=False, byte_tokens=byte_tokens)
        tok = Tokenizer.from_metadata(md)
        t2i = {t: i for i, t in enumerate(md["tokenizer.ggml.tokens"])}
        scores = md["tokenizer.ggml.scores"]
        for _ in range(200):
            text = "".join(rng.choice(alphabet + ["\u00e9"], size=int(rng.integers(1, 14))))
            expect = _spm_oracle(text.replace(" ", "\u2581"), t2i, scores, tok.unk_id)
            assert tok.encode(text, add_special=False) == expect, (text, byte_tokens)


def test_spm_ties_go_to_the_leftmost_pair_and_tokens_may_start_with_an_unknown_character():
    base = [("a", -1.0), ("b", -1.0)]
    tok = Tokenizer.from_metadata(spm_metadata(base + [("ab", -2.0), ("ba", -2.0)], add_space_prefix=False))
    assert [tok.token_text(i) for i in tok.encode("aba", add_special=False)] == ["ab", "a"]
    assert [tok.token_text(i) for i in tok.encode("bab", add_special=False)] == ["ba", "b"]
    # "é" alone is no token, "éa" is: llama.cpp merges it like any other pair
    tok = Tokenizer.from_metadata(spm_metadata(base + [("éa", -1.0)], add_space_prefix=False,
                                               byte_tokens=False))
    assert [tok.token_text(i) for i in tok.encode("béaé", add_special=False)] == ["b", "éa", "<unk>"]


def test_spm_space_prefix_byte_fallback_and_decode():
    pieces = [("\u2581", -1.0), ("a", -1.0), ("b", -1.0), ("\u2581a", -0.5), ("\u2581ab", -0.1), ("ab", -0.3)]
    tok = Tokenizer.from_metadata(spm_metadata(pieces))
    ids = tok.encode("ab")
    assert [tok.token_text(i) for i in ids] == ["<s>", "\u2581ab"]
    assert tok.decode(ids, skip_special=True) == "ab"
    # "é" has no token: its two UTF-8 bytes come out as byte tokens
    ids = tok.encode("aé", add_special=False)
    assert [tok.token_text(i) for i in ids] == ["\u2581a", "<0xC3>", "<0xA9>"]
    assert tok.decode(ids) == "aé"
    assert tok.token_to_bytes(ids[1]) == b"\xc3"
    no_prefix = Tokenizer.from_metadata(spm_metadata(pieces, add_space_prefix=False))
    assert [no_prefix.token_text(i) for i in no_prefix.encode("ab", add_special=False)] == ["ab"]


def test_spm_stream_matches_decode_with_space_prefix():
    """The prefix space llama.cpp adds is removed again by decode and by the streaming detokenizer alike."""
    pieces = [("\u2581", -1.0), ("a", -1.0), ("b", -1.0), ("\u2581a", -0.5), ("\u2581ab", -0.1), ("ab", -0.3)]
    tok = Tokenizer.from_metadata(spm_metadata(pieces))
    a, sp_ab, bos = tok.token_to_id("a"), tok.token_to_id("\u2581ab"), tok.bos_id
    for ids in ([bos, sp_ab, sp_ab], [sp_ab, a], [bos], [bos, bos, sp_ab], [a, sp_ab], [], [tok.eos_id, sp_ab]):
        for skip in (False, True):
            detok = tok.detokenizer(skip_special=skip)
            streamed = "".join(detok.add(t) for t in ids) + detok.flush()
            assert streamed == tok.decode(ids, skip_special=skip), (ids, skip)
    assert tok.decode([bos, sp_ab, sp_ab], skip_special=True) == "ab ab"


# ---------------------------------------------------------------- Unigram (t5)

def _viterbi_oracle(text, vocab):
    """Best-scoring segmentation by brute force over all splits (tiny inputs only)."""
    best = None
    n = len(text)
    for cuts in itertools.product([False, True], repeat=n - 1):
        pieces, start = [], 0
        for i, cut in enumerate(cuts, 1):
            if cut:
                pieces.append(text[start:i])
                start = i
        pieces.append(text[start:])
        if all(p in vocab for p in pieces):
            score = sum(vocab[p] for p in pieces)
            if best is None or score > best[0]:
                best = (score, pieces)
    return best[1]


def test_unigram_viterbi_matches_brute_force():
    # scores chosen so that no two segmentations of the test texts tie
    pieces = [("\u2581", -2.03), ("a", -3.07), ("b", -3.11), ("c", -3.5), ("\u2581a", -2.53), ("ab", -2.2),
              ("bc", -2.41), ("abc", -6.0), ("\u2581ab", -4.93), ("ca", -1.97)]
    md = spm_metadata(pieces, model="t5", byte_tokens=False, add_space_prefix=True,
                      **{"tokenizer.ggml.add_eos_token": False})
    tok = Tokenizer.from_metadata(md)
    vocab = dict(pieces)
    for text in ["abc", "abcab", "cabca", "a b c", "bcabca", "ccab b"]:
        norm = "\u2581" + text.replace(" ", "\u2581")
        want = _viterbi_oracle(norm, vocab)
        assert [tok.token_text(i) for i in tok.encode(text, add_special=False)] == want, text
    assert tok.decode(tok.encode("a b", add_special=False)) == "a b"  # the added prefix space is removed
