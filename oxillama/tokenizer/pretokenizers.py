"""The `tokenizer.ggml.pre` table: which split regexes a byte-level BPE vocabulary pre-tokenizes with.

Each entry is a list of regexes applied in order, as llama.cpp's `unicode_regex_split` does: every regex
splits each piece left by the previous one into its matches and the text between them (both kept).
That is exactly a chain of Hugging Face `Split(Regex(r), behavior="isolated")` pre-tokenizers.

The patterns are the ones llama.cpp uses (`llm_tokenizer_bpe` in llama-vocab.cpp), including its rewrites of
case-insensitive groups as `'[sS]|'[tT]...` and of `\\p{Lu}`-style classes as `(?=[\\p{L}])([^a-z])`, so the
splits agree with llama.cpp rather than with the model's original `tokenizer.json` where the two differ.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("oxillama.tokenizer")

# GPT-2's split: contractions, optional-space letter runs, digit runs, punctuation runs, trailing spaces.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

# Llama 3 (tiktoken cl100k-style): digits in groups of at most 3, newlines kept with the spaces before them.
LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2 / StableLM2: as Llama 3 but every digit alone.
QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Letter runs split at lower->upper case changes ("camelCase" -> "camel", "Case"); [^a-z] / [^A-Z] restricted
# to letters stand in for \p{Lu} / \p{Ll} as in llama.cpp.
_UPPER_THEN_LOWER = r"((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
_UPPER_RUN = r"((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER_THEN_LOWER + r"|[^\r\n\p{L}\p{N}]?" + _UPPER_RUN
          + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER_THEN_LOWER + _CONTRACTIONS + r"?|[^\r\n\p{L}\p{N}]?" + _UPPER_RUN
         + _CONTRACTIONS + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Latin-script letters DeepSeek's tokenizer keeps together (its tokenizer.json ranges; the \u escapes are code
# points that Unicode normalization would otherwise silently rewrite, e.g. U+1F7D into U+03CE).
_DEEPSEEK_LATIN = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-"
    "\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-"
    "ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"
)
_CJK_HANGUL = "[一-龥ࠀ-一가-퟿]+"

PRE_TOKENIZERS: dict[str, list[str]] = {
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT: punctuation runs first, then GPT-2, then digit runs, then
    # groups of three ASCII digits.
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt2": [GPT2],
    "llama3": [LLAMA3],
    "deepseek-llm": ["[\r\n]", r"\s?[" + _DEEPSEEK_LATIN + "]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$",
                     _CJK_HANGUL, r"\p{N}+"],
    "deepseek-v3": [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    # StarCoder family and SmolLM: every digit alone, then GPT-2.
    "starcoder": [r"\p{N}", GPT2],
    "qwen2": [QWEN2],
    "bloom": [r" ?[^(\s|.,!?…。，、।۔،)]+"],
    "viking": [r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
    "chameleon": [r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2],
    "tekken": [TEKKEN],
    "gpt-4o": [GPT4O],
}

# Single regexes that split exactly as a multi-regex entry above, used to save a pass over the text.
# starcoder: digits are isolated before GPT-2 runs, so GPT-2's " ?\p{N}+" only ever sees one digit, and a
# whitespace run just before a digit ends its piece, where "\s+(?!\S)" takes all of it: hence "\p{N}" and
# "\s+(?=\p{N})" ahead of "\s+(?!\S)".
FUSED: dict[str, list[str]] = {
    "starcoder": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?=\p{N})|\s+(?!\S)"],
}

# Other `tokenizer.ggml.pre` names llama.cpp maps onto one of the entries above.
ALIASES: dict[str, str] = {
    "": "default",
    "llama-bpe": "llama3", "llama-v3": "llama3", "falcon3": "llama3", "dbrx": "llama3", "smaug-bpe": "llama3",
    "chatglm-bpe": "llama3", "pixtral": "tekken",
    "gpt-2": "gpt2", "phi-2": "gpt2", "mpt": "gpt2", "olmo": "gpt2", "jais": "gpt2", "jina-es": "gpt2",
    "jina-de": "gpt2", "jina-v1-en": "gpt2", "jina-v2-es": "gpt2", "jina-v2-de": "gpt2", "jina-v2-code": "gpt2",
    "roberta-bpe": "gpt2", "gigachat": "gpt2",
    "smollm": "starcoder", "refact": "starcoder", "command-r": "starcoder", "codeshell": "starcoder",
    "exaone": "starcoder", "minerva-7b": "starcoder",
    "qwen2.5": "qwen2", "qwen-2.5": "qwen2", "deepseek-r1-qwen": "qwen2", "stablelm2": "qwen2", "megrez": "qwen2",
    "poro-chat": "bloom", "gpt3-finnish": "bloom", "llama4": "gpt-4o", "gpt4o": "gpt-4o",
}

# `tokenizer.ggml.pre` names (as written in the file, not canonical) whose vocabularies llama.cpp encodes with
# `ignore_merges` (a split piece that is itself a token is emitted whole, before any merge) and which add BOS
# unless the metadata says otherwise. dbrx, smaug-bpe and chatglm-bpe share Llama 3's regex but not these flags.
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "tekken", "pixtral", "gpt-4o", "gpt4o",
                           "llama4"})
ADD_BOS_BY_DEFAULT = IGNORE_MERGES | {"chameleon"}


def canonical_pre(pre: str | None) -> str:
    """The PRE_TOKENIZERS key for a `tokenizer.ggml.pre` value; unknown values warn and fall back to default."""
    name = (pre or "").strip().lower()
    name = ALIASES.get(name, name)
    if name not in PRE_TOKENIZERS:
        logger.warning("unknown tokenizer.ggml.pre %r: using the default pre-tokenizer; token ids may differ "
                       "from the model's own tokenizer", pre)
        return "default"
    return name


def split_regexes(pre: str | None) -> list[str]:
    """The split regexes, in order, for a `tokenizer.ggml.pre` value."""
    return list(PRE_TOKENIZERS[canonical_pre(pre)])
