"""GGUF tokenizer metadata -> a parsed `Vocab` -> a Hugging Face `tokenizers.Tokenizer`.

The Hugging Face tokenizer built here encodes *raw text fragments*: the text between special tokens, after
`Tokenizer` (tokenizer.py) has cut those out the way llama.cpp does. It therefore carries no added tokens;
control and user-defined tokens are handled one level up, so that their matching rules are llama.cpp's.

Vocabulary kinds (`tokenizer.ggml.model`):
  gpt2   byte-level BPE: the GGUF merges, ranked by position; splits from `tokenizer.ggml.pre`.
  llama  SentencePiece-style BPE (llama.cpp's "SPM"): starting from characters, the adjacent pair whose
         concatenation is the highest-scoring token merges first (ties: leftmost). That is a BPE whose merge
         list is every split of every token into two tokens, ordered by the merged token's score. Characters
         without a token fall back to <0xNN> byte tokens. Spaces become U+2581 and no pre-tokenizer splits.
  t5     Unigram (Viterbi over token log-probabilities); only normal, user-defined and unused tokens can be
         matched, user-defined ones with score 0, as in llama.cpp's UGM tokenizer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import TokenizerError
from oxillama.tokenizer import pretokenizers

logger = logging.getLogger("oxillama.tokenizer")

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
TOKEN_UNDEFINED = 0
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

SPM_SPACE = "\u2581"  # SentencePiece's visible space "▁"

# Texts llama.cpp treats as end-of-turn / end-of-generation whatever the metadata says (and forces to control).
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
             "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
             "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>")
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<PAD>"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"),
    "fim_sep": ("<|file_sep|>",),
}

# Per vocabulary kind: llama.cpp's default special ids and flags, used when the metadata does not set them.
_DEFAULTS = {
    "gpt2": dict(bos=11, eos=11, unk=None, pad=None, add_bos=False, add_eos=False, add_space_prefix=False),
    "llama": dict(bos=1, eos=2, unk=0, pad=None, add_bos=True, add_eos=False, add_space_prefix=True),
    "t5": dict(bos=None, eos=1, unk=2, pad=0, add_bos=False, add_eos=True, add_space_prefix=False),
}

_SPECIAL_KEYS = {
    "bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id", "eom": "eom_token_id",
    "unk": "unknown_token_id", "sep": "seperator_token_id", "pad": "padding_token_id", "mask": "mask_token_id",
    "fim_pre": "fim_pre_token_id", "fim_suf": "fim_suf_token_id", "fim_mid": "fim_mid_token_id",
    "fim_pad": "fim_pad_token_id", "fim_rep": "fim_rep_token_id", "fim_sep": "fim_sep_token_id",
}
_DEPRECATED_FIM_KEYS = {"fim_pre": "prefix_token_id", "fim_suf": "suffix_token_id", "fim_mid": "middle_token_id"}


@dataclass
class Vocab:
    """The tokenizer described by a GGUF file's `tokenizer.*` metadata, checked and with llama.cpp's defaults."""

    model: str                      # "gpt2", "llama" or "t5"
    pre: str                        # tokenizer.ggml.pre as written ("" when absent)
    tokens: list[str]               # n_vocab token texts (empty texts replaced as llama.cpp does)
    token_type: np.ndarray          # (n_vocab,) int32, TOKEN_* values (after llama.cpp's overrides)
    scores: np.ndarray | None       # (n_vocab,) float32
    merges: list[str] | None        # gpt2 only: "left right" strings, rank = position
    special: dict[str, int | None] = field(default_factory=dict)  # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False
    remove_extra_whitespaces: bool = False
    precompiled_charsmap: bytes | None = None
    eog_ids: frozenset[int] = frozenset()
    chat_template: str | None = None
    chat_templates: dict[str, str] = field(default_factory=dict)  # named extra templates (tokenizer.chat_template.X)

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def token_to_id(self) -> dict[str, int]:
        """Text -> id; for repeated texts the last id wins, as in llama.cpp."""
        mapping = getattr(self, "_token_to_id", None)
        if mapping is None:
            mapping = {text: i for i, text in enumerate(self.tokens)}
            object.__setattr__(self, "_token_to_id", mapping)
        return mapping


def _get(md: dict, key: str, kind, default=None):
    value = md.get(key, default)
    if value is None or value is default:
        return value
    if kind is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
    elif kind is int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
    elif kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", errors="replace")
    raise TokenizerError(f"GGUF metadata {key!r} should be a {kind.__name__}, got {type(value).__name__}")


def _str_list(md: dict, key: str) -> list[str] | None:
    value = md.get(key)
    if value is None:
        return None
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TokenizerError(f"GGUF metadata {key!r} should be an array of strings, got {type(value).__name__}")
    out = []
    for item in value:
        if isinstance(item, (bytes, bytearray)):
            item = bytes(item).decode("utf-8", errors="replace")
        elif not isinstance(item, str):
            raise TokenizerError(f"GGUF metadata {key!r} should be an array of strings, found {type(item).__name__}")
        out.append(item)
    return out


def _num_array(md: dict, key: str, dtype, n: int) -> np.ndarray | None:
    value = md.get(key)
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TokenizerError(f"GGUF metadata {key!r} should be a numeric array: {exc}") from None
    if arr.shape != (n,):
        raise TokenizerError(f"GGUF metadata {key!r} has {arr.size} entries, expected one per token ({n})")
    return arr


def read_vocab(md: dict) -> Vocab:
    """Parse and check the `tokenizer.*` keys of a GGUF metadata dict (llama.cpp's `llama_vocab::load`)."""
    if not isinstance(md, dict):
        raise TokenizerError(f"metadata should be a dict of GGUF keys, got {type(md).__name__}")
    model = _get(md, "tokenizer.ggml.model", str)
    if model is None:
        raise TokenizerError("GGUF metadata has no 'tokenizer.ggml.model': the file carries no tokenizer")
    if model not in _DEFAULTS:
        raise TokenizerError(f"unsupported tokenizer.ggml.model {model!r} (supported: gpt2, llama, t5)")
    tokens = _str_list(md, "tokenizer.ggml.tokens")
    if not tokens:
        raise TokenizerError("GGUF metadata has no 'tokenizer.ggml.tokens' (or it is empty)")
    n = len(tokens)
    for i, text in enumerate(tokens):
        if not text:
            logger.warning("empty token at index %d", i)
            tokens[i] = f"[EMPTY_{i}]"

    token_type = _num_array(md, "tokenizer.ggml.token_type", np.int64, n)
    token_type = (np.full(n, TOKEN_NORMAL, np.int32) if token_type is None else token_type.astype(np.int32))
    token_type[(token_type < TOKEN_UNDEFINED) | (token_type > TOKEN_BYTE)] = TOKEN_UNDEFINED
    scores = _num_array(md, "tokenizer.ggml.scores", np.float32, n)
    merges = _str_list(md, "tokenizer.ggml.merges")
    if model == "gpt2" and merges is None:
        raise TokenizerError("gpt2 tokenizer without 'tokenizer.ggml.merges'")

    pre = _get(md, "tokenizer.ggml.pre", str) or ""
    defaults = dict(_DEFAULTS[model])
    if model == "gpt2" and pre.strip().lower() in pretokenizers.ADD_BOS_BY_DEFAULT:
        defaults["add_bos"] = True

    special: dict[str, int | None] = {name: defaults.get(name) for name in _SPECIAL_KEYS}
    for name, key in list(_SPECIAL_KEYS.items()) + list(_DEPRECATED_FIM_KEYS.items()):
        value = _get(md, "tokenizer.ggml." + key, int)
        if value is None:
            continue
        if not 0 <= value < n:
            logger.warning("bad special token tokenizer.ggml.%s = %d (n_vocab %d): ignored", key, value, n)
            continue
        special[name] = value
    for name in ("bos", "eos", "unk", "pad"):  # llama.cpp's defaults can point past a small vocabulary
        if special[name] is not None and special[name] >= n:
            special[name] = None

    add_bos = _get(md, "tokenizer.ggml.add_bos_token", bool, defaults["add_bos"])
    add_eos = _get(md, "tokenizer.ggml.add_eos_token", bool, defaults["add_eos"])
    add_space_prefix = _get(md, "tokenizer.ggml.add_space_prefix", bool, defaults["add_space_prefix"])
    if model == "gpt2":
        add_space_prefix = _get(md, "tokenizer.ggml.add_space_prefix", bool, False)
    remove_ws = _get(md, "tokenizer.ggml.remove_extra_whitespaces", bool, False)
    charsmap = md.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap is not None:
        charsmap = np.asarray(charsmap).astype(np.uint8).tobytes() if not isinstance(charsmap, bytes) else charsmap

    vocab = Vocab(model=model, pre=pre, tokens=tokens, token_type=token_type, scores=scores, merges=merges,
                  special=special, add_bos=add_bos, add_eos=add_eos, add_space_prefix=add_space_prefix,
                  remove_extra_whitespaces=remove_ws, precompiled_charsmap=charsmap or None)
    _detect_turn_tokens(vocab)

    vocab.chat_template = _get(md, "tokenizer.chat_template", str)
    for key in md:
        if key.startswith("tokenizer.chat_template.") and isinstance(md[key], str):
            vocab.chat_templates[key[len("tokenizer.chat_template."):]] = md[key]
    if add_bos and special["bos"] is None:
        raise TokenizerError("tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token")
    if add_eos and special["eos"] is None:
        raise TokenizerError("tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token")
    return vocab


def _detect_turn_tokens(vocab: Vocab) -> None:
    """EOT/EOM/FIM ids found by text, and the end-of-generation set (llama.cpp's text-based workaround).

    Tokens found this way are forced to control type, which also changes how text containing them encodes.
    """
    t2i = vocab.token_to_id
    special = vocab.special

    def force_control(tid: int) -> None:
        if vocab.token_type[tid] != TOKEN_CONTROL:
            logger.debug("token %d %r looks like a control token: treating it as one", tid, vocab.tokens[tid])
            vocab.token_type[tid] = TOKEN_CONTROL

    for name, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        if special.get(name) is not None:
            continue
        for text in texts:
            if text in t2i:
                special[name] = t2i[text]
                force_control(t2i[text])
                break
    eog = set()
    for name in ("fim_pad", "fim_rep", "fim_sep"):
        if special.get(name) is not None:
            eog.add(special[name])
    for text in EOG_TEXTS:
        if text in t2i:
            eog.add(t2i[text])
            force_control(t2i[text])
    for name in ("eos", "eot", "eom"):
        if special.get(name) is not None:
            eog.add(special[name])
    vocab.eog_ids = frozenset(eog)


# ---------------------------------------------------------------------------------------------------------
# Hugging Face tokenizer construction
# ---------------------------------------------------------------------------------------------------------

def build_hf_tokenizer(vocab: Vocab):
    """A `tokenizers.Tokenizer` that encodes raw text fragments (no special-token parsing) like llama.cpp."""
    if vocab.model == "gpt2":
        return _build_gpt2(vocab)
    if vocab.model == "llama":
        return _build_spm(vocab)
    if vocab.model == "t5":
        return _build_unigram(vocab)
    raise TokenizerError(f"unsupported tokenizer model {vocab.model!r}")


def _build_gpt2(vocab: Vocab):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    t2i = vocab.token_to_id
    merges: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    dropped = 0
    for line in vocab.merges:
        pos = line.find(" ", 1)  # llama.cpp splits at the first space after the first character
        if pos < 0:
            dropped += 1
            continue
        pair = (line[:pos], line[pos + 1:])
        if pair in seen:  # llama.cpp keeps the first rank of a repeated pair
            continue
        # a merge whose parts or result are not tokens can never take part in producing a token id
        if pair[0] not in t2i or pair[1] not in t2i or pair[0] + pair[1] not in t2i:
            dropped += 1
            continue
        seen.add(pair)
        merges.append(pair)
    if dropped:
        logger.debug("gpt2 vocabulary: %d merges ignored (malformed or not in the vocabulary)", dropped)

    pre = pretokenizers.canonical_pre(vocab.pre)
    ignore_merges = vocab.pre.strip().lower() in pretokenizers.IGNORE_MERGES
    model = models.BPE(vocab=dict(t2i), merges=merges, ignore_merges=ignore_merges, fuse_unk=False,
                       byte_fallback=False)
    tok = Tokenizer(model)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False)
              for r in pretokenizers.PRE_TOKENIZERS[pre]]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    return tok


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every (left, right) token pair whose concatenation is a token, highest-scoring result first.

    Ties between different results (equal scores) go to the lower token id; the splits of one token go
    left-to-right by split point.
    """
    t2i = vocab.token_to_id
    scores = vocab.scores if vocab.scores is not None else np.zeros(vocab.n_vocab, np.float32)
    found: list[tuple[int, int, str, str]] = []  # (result id, split point, left, right)
    for text, tid in t2i.items():
        n = len(text)
        if n < 2:
            continue
        for k in range(1, n):
            left = text[:k]
            if left in t2i:
                right = text[k:]
                if right in t2i:
                    found.append((tid, k, left, right))
    order = sorted(range(len(found)), key=lambda j: (-float(scores[found[j][0]]), found[j][0], found[j][1]))
    return [(found[j][2], found[j][3]) for j in order]


def _build_spm(vocab: Vocab):
    from tokenizers import Tokenizer, models, normalizers

    has_bytes = bool(np.any(vocab.token_type == TOKEN_BYTE))
    unk = vocab.special.get("unk")
    model = models.BPE(vocab=dict(vocab.token_to_id), merges=spm_merges(vocab), byte_fallback=has_bytes,
                       unk_token=vocab.tokens[unk] if (unk is not None and not has_bytes) else None,
                       fuse_unk=False, ignore_merges=False)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Replace(" ", SPM_SPACE)
    return tok


# Stands in for tokens the Unigram lattice must never match (control, byte, unknown): a private-use code point
# plus the id keeps the texts unique and unreachable from ordinary text.
_UNMATCHABLE = "\U0010fffd\U0010fffe{}"


def _build_unigram(vocab: Vocab):
    from tokenizers import Tokenizer, models

    scores = vocab.scores if vocab.scores is not None else np.zeros(vocab.n_vocab, np.float32)
    matchable = np.isin(vocab.token_type, (TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_UNUSED))
    pieces = []
    for i, text in enumerate(vocab.tokens):
        if not matchable[i]:
            pieces.append((_UNMATCHABLE.format(i), 0.0))
        elif vocab.token_type[i] == TOKEN_USER_DEFINED:
            pieces.append((text, 0.0))
        else:
            pieces.append((text, float(scores[i])))
    unk = vocab.special.get("unk")
    model = models.Unigram(pieces, unk_id=unk, byte_fallback=False)
    # normalization (charsmap, whitespace) is applied by Tokenizer before this model sees the text
    return Tokenizer(model)
