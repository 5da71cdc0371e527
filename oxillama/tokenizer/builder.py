"""GGUF tokenizer metadata -> a parsed `Vocab` -> a Hugging Face `tokenizers.Tokenizer`.

The Hugging Face tokenizer built here encodes *raw text fragments*: the text between special tokens, after
`Tokenizer` (tokenizer.py) has cut those out the way llama.cpp does. It therefore carries no added tokens;
control and user-defined tokens are handled one level up, so that their matching rules are llama.cpp's.

Vocabulary kinds (`tokenizer.ggml.model`):
  gpt2   byte-level BPE: the GGUF merges, ranked by position; splits from `tokenizer.ggml.pre`.
  llama  SentencePiece-style BPE (llama.cpp's "SPM"): starting from characters, the adjacent pair whose
         concatenation is the highest-scoring token merges first (ties: leftmost). That is a BPE whose merge
         list is every split of every token into two tokens, ordered by the merged token's score. Characters
         without a token fall back to <0xNN> byte tokens. No pre-tokenizer splits; the caller escapes spaces
         to U+2581 first.
  t5     Unigram (Viterbi over token log-probabilities); only normal, user-defined and unused tokens can be
         matched, user-defined ones with score 0, as in llama.cpp's UGM tokenizer.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import TokenizerError
from oxillama.gguf.strings import StringArray
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

# Texts llama.cpp (as of the build the goldens come from) recognises whatever the metadata says; a token found
# this way is made a control token, which changes how text containing it encodes.
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
             "_<EOT>", "[EOT]", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>")
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# gpt-oss channel markers: always rendered, matched as user-defined text
ALWAYS_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

# Per vocabulary kind: llama.cpp's default special ids and flags, used when the metadata does not set them.
_DEFAULTS = {
    "gpt2": dict(bos=11, eos=11, unk=None, pad=None, add_bos=False, add_eos=False, add_space_prefix=False),
    "llama": dict(bos=1, eos=2, unk=0, pad=None, add_bos=True, add_eos=False, add_space_prefix=True),
    "t5": dict(bos=None, eos=1, unk=2, pad=0, add_bos=False, add_eos=True, add_space_prefix=False),
    # WordPiece (bert encoders): llama.cpp always adds [CLS] ... [SEP] with add_special
    "bert": dict(bos=101, eos=None, unk=100, sep=102, pad=0, mask=103, add_bos=True, add_eos=False,
                 add_space_prefix=False),
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

    model: str                      # "gpt2", "llama", "t5" or "bert" (WordPiece)
    pre: str                        # tokenizer.ggml.pre as written ("" when absent)
    tokens: list[str]               # n_vocab token texts (empty texts replaced as llama.cpp does)
    token_type: np.ndarray          # (n_vocab,) int32, TOKEN_* values (after llama.cpp's overrides)
    scores: np.ndarray | None       # (n_vocab,) float32
    merges: list[str] | None        # gpt2 only: "left right" strings, rank = position
    special: dict[str, int | None] = field(default_factory=dict)  # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False
    add_sep: bool = False           # SEP appended after the text with add_special (WordPiece)
    lowercase: bool = False         # WordPiece normalisation (tokenizer.ggml.normalizer.*)
    strip_accents: bool = False
    remove_extra_whitespaces: bool = False
    precompiled_charsmap: bytes | None = None
    eog_ids: frozenset[int] = frozenset()
    # llama.cpp ORs the control flag onto tokens it recognises by text: their type before that, which still
    # counts where llama.cpp tests the other flags (the Unigram lattice matches normal/user-defined tokens)
    type_before_control: dict[int, int] = field(default_factory=dict)
    chat_template: str | None = None
    chat_templates: dict[str, str] = field(default_factory=dict)  # named extra templates (tokenizer.chat_template.X)

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @functools.cached_property
    def token_to_id(self) -> dict[str, int]:
        """Text -> id; for repeated texts the last id wins, as in llama.cpp."""
        return {text: i for i, text in enumerate(self.tokens)}


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
    if isinstance(value, StringArray):  # as the GGUF reader gives it: kept compact, items are str
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TokenizerError(f"GGUF metadata {key!r} should be an array of strings, got {type(value).__name__}")
    if set(map(type, value)) <= {str}:  # the usual case, checked without a Python-level loop
        return list(value)
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
        raise TokenizerError(f"unsupported tokenizer.ggml.model {model!r} (supported: gpt2, llama, t5, bert)")
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
    remove_ws = _get(md, "tokenizer.ggml.remove_extra_whitespaces", bool, False)
    charsmap = md.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap is not None:
        charsmap = np.asarray(charsmap).astype(np.uint8).tobytes() if not isinstance(charsmap, bytes) else charsmap

    add_sep = False
    lowercase = _get(md, "tokenizer.ggml.normalizer.lowercase", bool, False)
    strip_accents = _get(md, "tokenizer.ggml.normalizer.strip_accents", bool, lowercase)
    if model == "bert":     # llama.cpp's WPM adds [CLS] and [SEP] whatever the add_* keys say
        add_bos, add_eos, add_sep = True, False, True
        if special["sep"] is None or special["sep"] >= n:
            raise TokenizerError("a bert (WordPiece) vocabulary needs a separator token ([SEP])")
    vocab = Vocab(model=model, pre=pre, tokens=tokens, token_type=token_type, scores=scores, merges=merges,
                  special=special, add_bos=add_bos, add_eos=add_eos, add_space_prefix=add_space_prefix,
                  add_sep=add_sep, lowercase=lowercase, strip_accents=strip_accents,
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
            vocab.type_before_control[tid] = int(vocab.token_type[tid])
            vocab.token_type[tid] = TOKEN_CONTROL

    def set_type(tid: int, ttype: int) -> None:  # llama.cpp replaces all flags here
        vocab.type_before_control.pop(tid, None)
        vocab.token_type[tid] = ttype

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
    for text in ALWAYS_USER_DEFINED:
        if text in t2i:
            set_type(t2i[text], TOKEN_USER_DEFINED)
    for name in ("eos", "eot", "eom"):
        if special.get(name) is not None:
            eog.add(special[name])
    texts = {vocab.tokens[t]: t for t in eog}
    # harmony / solar-open: "<|end|>" ends a message, not the generation
    if "<|end|>" in texts and (("<|return|>" in texts and "<|call|>" in texts)
                               or ("<|calls|>" in texts and "<|flush|>" in texts)):
        eog.discard(texts["<|end|>"])
        set_type(texts["<|end|>"], TOKEN_USER_DEFINED)
    # gemma4: "</s>" is ordinary text there
    if "</s>" in texts and "<|tool_response>" in texts:
        eog.discard(texts["</s>"])
        set_type(texts["</s>"], TOKEN_NORMAL)
    vocab.eog_ids = frozenset(eog)


# ---------------------------------------------------------------------------------------------------------
# Hugging Face tokenizer construction
# ---------------------------------------------------------------------------------------------------------

def build_hf_tokenizer(vocab: Vocab):
    """A `tokenizers.Tokenizer` that encodes raw text fragments (no special-token parsing) like llama.cpp."""
    build = {"gpt2": _build_gpt2, "llama": _build_spm, "t5": _build_unigram, "bert": _build_wpm}.get(vocab.model)
    if build is None:
        raise TokenizerError(f"unsupported tokenizer model {vocab.model!r}")
    try:
        return build(vocab)
    except TokenizerError:
        raise
    except Exception as exc:  # the tokenizers library rejects vocabularies with its own exception types
        raise TokenizerError(f"cannot build the {vocab.model} tokenizer from this vocabulary: {exc}") from exc


def _build_wpm(vocab: Vocab):
    """llama.cpp's WordPiece (tokenizer/wpm.py); not a Hugging Face tokenizer: Tokenizer calls its encode."""
    from oxillama.tokenizer.wpm import WpmModel
    return WpmModel(vocab.tokens, vocab.special.get("unk"), vocab.lowercase, vocab.strip_accents)


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
              for r in pretokenizers.FUSED.get(pre, pretokenizers.PRE_TOKENIZERS[pre])]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    return tok


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every (left, right) token pair whose concatenation is a token, highest-scoring result first.

    Ties between different results (equal scores) go to the lower token id; the splits of one token go
    left-to-right by split point. Computing this walks every split of every token (seconds for a 262k
    vocabulary), so the result is kept in the cache folder, keyed by a hash of the tokens and scores.
    """
    cache_path = _merges_cache_path(vocab)
    table = None
    if cache_path is not None and cache_path.exists():
        try:
            table = np.load(cache_path, allow_pickle=False)
            if table.ndim != 2 or table.shape[1] != 2 or (table.size and (table[:, 0].max() >= vocab.n_vocab)):
                table = None
        except (OSError, ValueError):
            table = None
    if table is None:
        table = _spm_merge_table(vocab)
        if cache_path is not None:
            _save_atomic(cache_path, table)
    tokens = vocab.tokens
    return [(tokens[tid][:k], tokens[tid][k:]) for tid, k in table.tolist()]


def _spm_merge_table(vocab: Vocab) -> np.ndarray:
    """(n_merges, 2) int32 rows (merged token id, split point in characters), in rank order."""
    t2i = vocab.token_to_id
    scores = vocab.scores if vocab.scores is not None else np.zeros(vocab.n_vocab, np.float32)
    neg = (-scores.astype(np.float64)).tolist()
    found: list[tuple[float, int, int]] = []
    append = found.append
    for text, tid in t2i.items():
        n = len(text)
        if n < 2:
            continue
        for k in range(1, n):
            if text[:k] in t2i and text[k:] in t2i:
                append((neg[tid], tid, k))
    found.sort()
    return np.array([(tid, k) for _, tid, k in found], dtype=np.int32).reshape(-1, 2)


def _merges_cache_path(vocab: Vocab):
    import hashlib
    import os
    from pathlib import Path

    if os.environ.get("OXILLAMA_NO_TOKENIZER_CACHE"):
        return None
    try:
        from oxillama.hub import cache_dir
        root = Path(cache_dir()).parent  # cache_dir() is the models/ folder
    except Exception:  # hub unavailable: the same default place
        root = Path(os.path.expanduser("~")) / ".cache" / "oxillama"
    h = hashlib.sha256()
    h.update("\x00".join(vocab.tokens).encode("utf-8", errors="surrogatepass"))
    h.update(b"\x01")
    if vocab.scores is not None:
        h.update(np.ascontiguousarray(vocab.scores, dtype=np.float32).tobytes())
    return root / "tokenizers" / f"spm-merges-v1-{h.hexdigest()[:32]}.npy"


def _save_atomic(path, table: np.ndarray) -> None:
    import os
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, table, allow_pickle=False)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache only costs time
        logger.debug("could not cache SPM merges at %s: %s", path, exc)


def _build_spm(vocab: Vocab):
    from tokenizers import Tokenizer, models

    has_bytes = bool(np.any(vocab.token_type == TOKEN_BYTE))
    unk = vocab.special.get("unk")
    model = models.BPE(vocab=dict(vocab.token_to_id), merges=spm_merges(vocab), byte_fallback=has_bytes,
                       unk_token=vocab.tokens[unk] if (unk is not None and not has_bytes) else None,
                       fuse_unk=False, ignore_merges=False)
    # spaces are escaped to U+2581 by Tokenizer before encoding (a Replace normalizer here would cost a
    # quarter of the encode time tracking alignments nobody reads)
    return Tokenizer(model)


def build_spm_model(vocab: Vocab):
    """llama.cpp's SPM encoder in C (oxillama.tokenizer._spm) over the vocabulary's UTF-8 texts: a hash of
    token ids over one text buffer, a few MB where the equivalent Hugging Face BPE (every split of every
    token as a merge) holds ~75 MB for a 262k vocabulary."""
    from oxillama.tokenizer._spm import SpmModel

    tokens = vocab.tokens
    if not isinstance(tokens, StringArray):
        tokens = StringArray.from_strings(tokens)
    has_bytes = bool(np.any(vocab.token_type == TOKEN_BYTE))
    unk = vocab.special.get("unk")
    scores = vocab.scores if vocab.scores is not None else np.zeros(vocab.n_vocab, np.float32)
    return SpmModel(tokens.buffer, tokens.offsets, scores, has_bytes,
                    unk if (unk is not None and not has_bytes) else -1)


# Stands in for tokens the Unigram lattice must never match (control, byte, unknown): a private-use code point
# plus the id keeps the texts unique and unreachable from ordinary text.
_UNMATCHABLE = "\U0010fffd\U0010fffe{}"


def _build_unigram(vocab: Vocab):
    from tokenizers import Tokenizer, models

    scores = vocab.scores if vocab.scores is not None else np.zeros(vocab.n_vocab, np.float32)
    flags = vocab.token_type.copy()
    for tid, ttype in vocab.type_before_control.items():
        flags[tid] = ttype
    matchable = np.isin(flags, (TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_UNUSED))
    pieces = []
    for i, text in enumerate(vocab.tokens):
        if not matchable[i]:
            pieces.append((_UNMATCHABLE.format(i), 0.0))
        elif flags[i] == TOKEN_USER_DEFINED:  # user-defined tokens score 0, as in llama.cpp
            pieces.append((text, 0.0))
        else:
            pieces.append((text, float(scores[i])))
    unk = vocab.special.get("unk")
    model = models.Unigram(pieces, unk_id=unk, byte_fallback=False)
    # normalization (charsmap, whitespace) is applied by Tokenizer before this model sees the text
    return Tokenizer(model)
