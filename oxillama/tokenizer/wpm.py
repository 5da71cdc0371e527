"""llama.cpp's WordPiece tokenizer (WPM, `tokenizer.ggml.model == "bert"`), for bert-style encoders.

The GGUF converter stores a word-initial piece as U+2581 + text and a continuation ("##x" in the Hugging Face
vocabulary) as plain text. Encoding, as llama.cpp's llm_tokenizer_wpm_session:
  1. preprocess: (NFD first when accents are stripped) each code point: whitespace ends a word; NUL, U+FFFD and
     control characters are dropped; accent marks too when accents are stripped; the rest lowercased (when
     lowercase) and, if punctuation, an ASCII symbol or a CJK ideograph, made a word of its own;
  2. each word, prefixed with U+2581, is cut greedily from the left into the longest vocabulary pieces (over
     UTF-8 bytes, at most the longest token's length); a word with a part no piece matches becomes [UNK].
"""
from __future__ import annotations

import unicodedata

SPM_SPACE = "\u2581"
_WHITESPACE = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])   # llama.cpp's unicode_set_whitespace
_CHINESE = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
            (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))   # as llama.cpp (and HF's Rust code)


def _is_chinese(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CHINESE)


def _lower(ch: str) -> str:
    low = ch.lower()
    return low[0] if low else ch    # one code point, as llama.cpp's single-code-point map


def preprocess(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[str]:
    """The words of a text (step 1 of the module docstring)."""
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
    words: list[str] = []
    cur: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp in _WHITESPACE:
            if cur:
                words.append("".join(cur))
                cur = []
            continue
        cat = unicodedata.category(ch)
        if cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf", "Co", "Cs"):
            continue
        if strip_accents and cat[0] == "M":
            continue
        s = _lower(ch) if lowercase else ch
        if cat[0] == "P" or (cp < 0x7F and cat[0] == "S") or _is_chinese(cp):
            if cur:
                words.append("".join(cur))
                cur = []
            words.append(s)
        else:
            cur.append(s)
    if cur:
        words.append("".join(cur))
    return words


class WpmModel:
    """Greedy longest-match WordPiece over a vocabulary (step 2 of the module docstring)."""

    def __init__(self, tokens: list[str], unk_id: int | None, lowercase: bool = True, strip_accents: bool = True):
        self.piece_to_id = {t.encode("utf-8"): i for i, t in enumerate(tokens)}   # repeated texts: last id wins
        self.max_len = max((len(b) for b in self.piece_to_id), default=1)
        self.unk_id = unk_id
        self.lowercase, self.strip_accents = lowercase, strip_accents

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        lookup, max_len = self.piece_to_id.get, self.max_len
        for word in preprocess(text, self.lowercase, self.strip_accents):
            w = (SPM_SPACE + word).encode("utf-8")
            n, start = len(w), len(out)
            i = 0
            while i < n:
                for j in range(min(n, i + max_len + 1), i, -1):
                    tid = lookup(w[i:j])
                    if tid is not None:
                        out.append(tid)
                        i = j
                        break
                else:               # a part no piece matches: the whole word is unknown
                    del out[start:]
                    break
            if len(out) == start and self.unk_id is not None:
                out.append(self.unk_id)
        return out
