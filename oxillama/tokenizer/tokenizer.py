"""`Tokenizer`: text <-> token ids exactly as llama.cpp computes them, from a GGUF file's metadata.

Encoding follows llama.cpp's `llama_vocab::tokenize`:
  1. Special-token partition. Control and unknown tokens are cut out of the text only when `parse_special` is
     true; user-defined tokens always are. Tokens are tried longest first (by UTF-8 length), each one splitting
     every remaining raw fragment at its non-overlapping leftmost occurrences -- so a longer token wins over a
     shorter one that starts earlier and overlaps it, which is not the leftmost-longest rule of Hugging Face's
     added tokens.
  2. Each raw fragment is encoded by the vocabulary's model (builder.py), SPM fragments after a special token
     or at the start getting a leading space when `add_space_prefix` is set.
  3. BOS / EOS around it when `add_special` and the vocabulary asks for them.

Decoding renders each token's bytes (llama.cpp's `token_to_piece`) and decodes the concatenation as UTF-8,
replacing invalid sequences with U+FFFD.
"""
from __future__ import annotations

import bisect
import logging
import os
import re

import numpy as np

from oxillama.errors import ChatTemplateError, TokenizerError
from oxillama._system import release_free_heap
from oxillama.tokenizer import builder
from oxillama.tokenizer.builder import (SPM_SPACE, TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNKNOWN,
                                        TOKEN_USER_DEFINED, Vocab)

logger = logging.getLogger("oxillama.tokenizer")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_level_decode(text: str) -> bytes:
    out = bytearray()
    for ch in text:
        b = _BYTE_DECODER.get(ch)
        if b is not None:
            out.append(b)
        else:  # llama.cpp's llama_decode_text marks characters outside the byte table this way
            utf8 = ch.encode("utf-8")
            out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8") + b"]"
    return bytes(out)


def _trie_pattern(texts) -> str:
    """A regex matching any of `texts`, the longest one at a given start position (a character trie)."""
    trie: dict = {}
    for text in texts:
        node = trie
        for ch in text:
            node = node.setdefault(ch, {})
        node[None] = True

    def emit(node: dict) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in node.items() if ch is not None]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return "(?:" + body + ")?" if None in node else body

    return emit(trie)


# Byte-level BPE fragments longer than this are encoded in chunks.
_CHUNK_CHARS = 16384
# A space after a non-space and before an ASCII letter: every split regex in pretokenizers.py ends a piece
# before such a space and starts one at it (no pattern matches a non-space followed by a space, and each
# has a letter-run alternative with an optional leading space), so cutting the text there changes nothing.
_SAFE_CUT = re.compile(r"(?<=\S) (?=[A-Za-z])")


def _chunks(text: str) -> list[str]:
    out = []
    start = 0
    while len(text) - start > _CHUNK_CHARS:
        m = _SAFE_CUT.search(text, start + _CHUNK_CHARS // 2)
        if m is None:
            break
        out.append(text[start:m.start()])
        start = m.start()
    out.append(text[start:])
    return out


class _SpecialMatcher:
    """Cuts special tokens out of a text in llama.cpp's order (longest token first, see the module docstring).

    Fast path: one leftmost-longest regex scan. It gives llama.cpp's answer unless some token occurrence starts
    inside a match and runs past its end (a "straddler", e.g. "ab" matched in "abcd" while "bcd" is a longer
    token); only then is llama.cpp's token-by-token algorithm run, on the tokens present in the text.
    """

    def __init__(self, ids: list[int], tokens: list[str]):
        self.text_to_id: dict[str, int] = {}
        for tid in ids:  # equal texts: keep the id llama.cpp's text lookup would give (the last)
            self.text_to_id[tokens[tid]] = tid
        self.pattern = re.compile(_trie_pattern(self.text_to_id)) if self.text_to_id else None
        self._sorted_texts = sorted(self.text_to_id)
        self._order = {tid: (-len(tokens[tid].encode("utf-8")), tid) for tid in self.text_to_id.values()}
        self._straddle: dict[str, tuple[frozenset, list]] = {}
        self._contained: dict[str, list[int]] = {}
        self.tokens = tokens

    def _straddlers(self, match: str) -> tuple[frozenset, list]:
        """(first characters after the match, [(offset, token)]) of tokens that could start inside `match`
        and end after it."""
        info = self._straddle.get(match)
        if info is None:
            found = []
            texts = self._sorted_texts
            for j in range(1, len(match)):
                head = match[j:]
                k = bisect.bisect_left(texts, head)
                while k < len(texts) and texts[k].startswith(head):
                    if len(texts[k]) > len(head):
                        found.append((j, texts[k]))
                    k += 1
            info = (frozenset(t[len(match) - j] for j, t in found), found)
            self._straddle[match] = info
        return info

    def _contained_tokens(self, match: str) -> list[int]:
        found = self._contained.get(match)
        if found is None:
            t2i = self.text_to_id
            found = sorted({t2i[match[a:b]] for a in range(len(match)) for b in range(a + 1, len(match) + 1)
                            if match[a:b] in t2i})
            self._contained[match] = found
        return found

    def partition(self, text: str) -> list:
        """`text` as a list of raw str fragments and int token ids."""
        if self.pattern is None:
            return [text]
        matches = [(m.start(), m.end(), m.group()) for m in self.pattern.finditer(text)]
        if not matches:
            return [text]
        n = len(text)
        straddled = False
        for b, e, s in matches:
            if e < n and len(s) > 1:
                chars, found = self._straddle.get(s) or self._straddlers(s)
                if text[e] in chars and any(text.startswith(t, b + j) for j, t in found):
                    straddled = True
                    break
        if not straddled:
            t2i = self.text_to_id
            out: list = []
            pos = 0
            for b, e, s in matches:
                if b > pos:
                    out.append(text[pos:b])
                out.append(t2i[s])
                pos = e
            if pos < n:
                out.append(text[pos:])
            return out
        present: set[int] = set()
        for s in {s for _, _, s in matches}:
            present.update(self._contained_tokens(s))
            present.update(self.text_to_id[t] for _, t in self._straddlers(s)[1] if t in text)
        return self._partition_in_order(text, present)

    def _partition_in_order(self, text: str, present: set[int]) -> list:
        """llama.cpp's tokenizer_st_partition over the given tokens."""
        fragments: list = [text]
        for tid in sorted(present, key=self._order.__getitem__):
            needle = self.tokens[tid]
            out: list = []
            for frag in fragments:
                if type(frag) is int or needle not in frag:
                    out.append(frag)
                    continue
                parts = frag.split(needle)  # leftmost non-overlapping occurrences, as llama.cpp's find loop
                if parts[0]:
                    out.append(parts[0])
                for part in parts[1:]:
                    out.append(tid)
                    if part:
                        out.append(part)
            fragments = out
        return fragments


class Tokenizer:
    """A GGUF model's tokenizer: `encode`, `decode`, streaming detokenization, chat templates.

    Build it with `Tokenizer.from_gguf(path)` or `Tokenizer.from_metadata(metadata_dict)`.
    """

    def __init__(self, vocab: Vocab):
        if not isinstance(vocab, Vocab):
            raise TokenizerError("Tokenizer(vocab) needs a Vocab; use Tokenizer.from_gguf or from_metadata")
        self._vocab = vocab
        # SPM vocabularies encode in C (tokenizer/_spm); the Hugging Face equivalent is built on demand
        self._spm = builder.build_spm_model(vocab) if vocab.model == "llama" else None
        self._hf = builder.build_hf_tokenizer(vocab) if self._spm is None else None
        tt = vocab.token_type
        self._is_special = np.isin(tt, (TOKEN_CONTROL, TOKEN_UNKNOWN))  # hidden when skip_special
        self._pieces = self._build_pieces()
        self._pieces_skip = [b"" if s else p for p, s in zip(self._pieces, self._is_special.tolist())]
        self._matchers: dict[bool, _SpecialMatcher] = {}  # parse_special -> matcher, built on first use
        self._ugm_normalizer = None
        if vocab.model == "t5" and vocab.precompiled_charsmap:
            from tokenizers import normalizers
            self._ugm_normalizer = normalizers.Precompiled(vocab.precompiled_charsmap)
        self._vocab_bytes = None
        self._chat = None
        # the text -> id dict served the build; token_to_id() rebuilds it on demand (14 MB for 262k tokens)
        vocab.__dict__.pop("token_to_id", None)
        release_free_heap()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_metadata(cls, metadata: dict) -> "Tokenizer":
        """Build from a GGUF metadata dict (str keys; str lists; numeric arrays as numpy arrays)."""
        return cls(builder.read_vocab(metadata))

    @classmethod
    def from_gguf(cls, path_or_file) -> "Tokenizer":
        """Build from a GGUF file path, or from an already open `oxillama.gguf.GGUFFile`."""
        metadata = getattr(path_or_file, "metadata", None)
        if metadata is None:
            if not isinstance(path_or_file, (str, bytes, os.PathLike)):
                raise TokenizerError(f"from_gguf needs a path or a GGUFFile, got {type(path_or_file).__name__}")
            try:
                from oxillama.gguf import GGUFFile
            except ImportError as exc:
                raise TokenizerError(f"cannot read GGUF files: oxillama.gguf is unavailable ({exc})") from None
            with GGUFFile(path_or_file) as f:  # metadata values are copies: they outlive the map
                metadata = f.metadata
        return cls.from_metadata(dict(metadata))

    def _build_pieces(self) -> list[bytes]:
        """Each token's bytes as llama.cpp's token_to_piece(special=True) renders them."""
        v = self._vocab
        spm_like = v.model != "gpt2"
        types = v.token_type
        if spm_like:
            # all tokens at once: U+2581 -> space, UTF-8; the few non-normal tokens are fixed up below
            sep = "\x00\uffff\x00"
            joined = sep.join(v.tokens)
            pieces = joined.replace(SPM_SPACE, " ").encode("utf-8").split(sep.encode("utf-8"))
            if len(pieces) != v.n_vocab:  # a token containing the separator: do it one by one
                pieces = [t.replace(SPM_SPACE, " ").encode("utf-8") for t in v.tokens]
        else:
            pieces = [_byte_level_decode(t) for t in v.tokens]
        for tid in np.flatnonzero(types != TOKEN_NORMAL).tolist():
            ttype = int(types[tid])
            text = v.tokens[tid]
            if ttype in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED):
                pieces[tid] = text.encode("utf-8")
            elif ttype == TOKEN_BYTE and spm_like:
                m = _BYTE_TOKEN.fullmatch(text)
                pieces[tid] = bytes([int(m.group(1), 16)]) if m else b""
            else:  # unused / undefined tokens (and byte-type tokens of byte-level vocabularies) render as nothing
                pieces[tid] = b""
        return pieces

    # ------------------------------------------------------------------ properties
    @property
    def vocab(self) -> Vocab:
        return self._vocab

    @property
    def hf_tokenizer(self):
        """The Hugging Face tokenizer that encodes raw fragments: no special-token parsing, and for SPM
        vocabularies spaces must already be U+2581 (see `encode` for the whole pipeline). SPM vocabularies
        encode without it; asking for it builds it (seconds and ~75 MB for a 262k vocabulary)."""
        if self._hf is None:
            self._hf = builder.build_hf_tokenizer(self._vocab)
        return self._hf

    @property
    def n_vocab(self) -> int:
        return self._vocab.n_vocab

    @property
    def model(self) -> str:
        return self._vocab.model

    @property
    def bos_id(self) -> int | None:
        return self._vocab.special.get("bos")

    @property
    def eos_id(self) -> int | None:
        return self._vocab.special.get("eos")

    @property
    def eot_id(self) -> int | None:
        return self._vocab.special.get("eot")

    @property
    def eom_id(self) -> int | None:
        return self._vocab.special.get("eom")

    @property
    def unk_id(self) -> int | None:
        return self._vocab.special.get("unk")

    @property
    def pad_id(self) -> int | None:
        return self._vocab.special.get("pad")

    @property
    def add_bos(self) -> bool:
        return self._vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self._vocab.add_eos

    @property
    def eog_ids(self) -> frozenset[int]:
        """Tokens that end generation: EOS, EOT, EOM and the turn-ending tokens found by text."""
        return self._vocab.eog_ids

    def is_eog(self, token_id: int) -> bool:
        return self._check_id(token_id) in self._vocab.eog_ids

    def is_special(self, token_id: int) -> bool:
        """True for control and unknown tokens (the ones `skip_special` hides)."""
        return bool(self._is_special[self._check_id(token_id)])

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the vocabulary (byte-level / U+2581 form, not decoded)."""
        return self._vocab.tokens[self._check_id(token_id)]

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose stored text is `text`, or None."""
        if not isinstance(text, str):
            raise TokenizerError(f"token_to_id takes a token's text (a str), got {type(text).__name__}")
        return self._vocab.token_to_id.get(text)

    # ------------------------------------------------------------------ encode
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids for `text`, identical to llama.cpp's `llama_tokenize`.

        add_special: add BOS/EOS where the vocabulary asks for them (tokenizer.ggml.add_bos_token/add_eos_token).
        parse_special: also turn control-token texts such as "<|im_start|>" into their ids; when false those
        texts are encoded as ordinary text. User-defined tokens are always matched.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode() needs a str, got {type(text).__name__}")
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise TokenizerError(f"text is not valid Unicode: lone surrogate at index {exc.start}") from None
        v = self._vocab
        out: list[int] = []
        if add_special and v.add_bos:
            out.append(v.special["bos"])
        if text:
            fragments = self._matcher(bool(parse_special)).partition(text)
            if len(fragments) == 1 and type(fragments[0]) is str:
                out.extend(self._encode_raw([self._prepare(fragments[0], True)])[0])
            else:
                self._encode_fragments(fragments, out)
        if add_special and v.add_eos:
            out.append(v.special["eos"])
        if add_special and v.add_sep:
            out.append(v.special["sep"])
        return out

    def _matcher(self, parse_special: bool) -> _SpecialMatcher:
        matcher = self._matchers.get(parse_special)
        if matcher is None:
            tt = self._vocab.token_type
            kinds = (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN) if parse_special else (TOKEN_USER_DEFINED,)
            matcher = _SpecialMatcher(np.flatnonzero(np.isin(tt, kinds)).tolist(), self._vocab.tokens)
            self._matchers[parse_special] = matcher
        return matcher

    def _prepare(self, raw: str, after_special: bool) -> str:
        """The text handed to the vocabulary model for one raw fragment."""
        v = self._vocab
        if v.model == "llama":
            return (SPM_SPACE + raw if (v.add_space_prefix and after_special) else raw).replace(" ", SPM_SPACE)
        if v.model == "t5":
            return self._ugm_normalize(raw)
        return raw

    def _encode_fragments(self, fragments: list, out: list[int]) -> None:
        raws = []
        prev_special = True
        for frag in fragments:
            if type(frag) is int:
                prev_special = True
            else:
                raws.append(self._prepare(frag, prev_special))
                prev_special = False
        encoded = iter(self._encode_raw(raws))
        for frag in fragments:
            if type(frag) is int:
                out.append(frag)
            else:
                out.extend(next(encoded))

    def _encode_raw(self, texts: list[str]) -> list[list[int]]:
        """Encode raw fragments with the Hugging Face model; long byte-level BPE fragments are cut into chunks
        at points where every pre-tokenizer in the table splits anyway, and the chunks encoded in parallel."""
        if self._vocab.model == "gpt2" and any(len(t) > _CHUNK_CHARS for t in texts):
            pieces, owner = [], []
            for i, text in enumerate(texts):
                for chunk in _chunks(text):
                    pieces.append(chunk)
                    owner.append(i)
            out: list[list[int]] = [[] for _ in texts]
            for i, enc in zip(owner, self._hf.encode_batch_fast(pieces, add_special_tokens=False)):
                out[i].extend(enc.ids)
            return out
        if self._spm is not None:
            encode = self._spm.encode
            return [encode(t.encode("utf-8", "surrogatepass")) for t in texts]
        if self._vocab.model == "bert":
            return [self._hf.encode(t) for t in texts]
        if len(texts) == 1:
            return [self._hf.encode(texts[0], add_special_tokens=False).ids] if texts[0] else [[]]
        return [e.ids for e in self._hf.encode_batch_fast(texts, add_special_tokens=False)]

    def _ugm_normalize(self, text: str) -> str:
        """llama.cpp's UGM normalization: charsmap, then whitespace escaping / prefixing / merging."""
        v = self._vocab
        if self._ugm_normalizer is not None:
            text = self._ugm_normalizer.normalize_str(text)
        merge = v.remove_extra_whitespaces
        out = []
        prepended = False
        in_word = False
        for ch in text:
            if ch != " ":
                if not in_word:
                    in_word = True
                    if (v.add_space_prefix and not prepended) or merge:
                        out.append(SPM_SPACE)
                        prepended = True
                out.append(ch)
            else:
                in_word = False
                if not merge:
                    out.append(SPM_SPACE)
        return "".join(out)

    # ------------------------------------------------------------------ decode
    def _check_id(self, token_id) -> int:
        if isinstance(token_id, (bool, np.bool_)) or not isinstance(token_id, (int, np.integer)):
            raise TokenizerError(f"token ids are ints, got {type(token_id).__name__}")
        if not 0 <= token_id < self._vocab.n_vocab:
            raise TokenizerError(f"token id {token_id} out of range [0, {self._vocab.n_vocab})")
        return int(token_id)

    def _check_ids(self, ids) -> list[int]:
        if isinstance(ids, (str, bytes)):
            raise TokenizerError(f"token ids must be a sequence of ints, got {type(ids).__name__}")
        try:
            arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids if isinstance(ids, list) else list(ids))
        except (TypeError, ValueError, OverflowError):
            raise TokenizerError(f"token ids must be a sequence of ints, got {type(ids).__name__}") from None
        if arr.size == 0:
            return []
        # bools and floats are not ids; a list mixing types becomes an object array
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise TokenizerError(f"token ids must be a flat sequence of ints, got {arr.dtype} with shape {arr.shape}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self._vocab.n_vocab:
            raise TokenizerError(f"token id {lo if lo < 0 else hi} out of range [0, {self._vocab.n_vocab})")
        if type(ids) is list and all(type(t) is int for t in ids):
            return ids
        if not isinstance(ids, np.ndarray) and any(isinstance(t, (bool, np.bool_)) for t in ids):
            raise TokenizerError("token ids must be ints, not bools")   # np.asarray made them 0/1
        return arr.tolist()     # NumPy integers as Python ints (a table index must be an int)

    def _piece_table(self, skip_special: bool) -> list[bytes]:
        return self._pieces_skip if skip_special else self._pieces

    def _strip_index(self, ids: list[int]) -> int:
        """Index of the token whose leading space `add_space_prefix` put there (-1: none)."""
        if not self._vocab.add_space_prefix or self._vocab.model == "gpt2" or not ids:
            return -1
        i = 1 if (ids[0] == self.bos_id and len(ids) > 1) else 0
        return i

    def decode_bytes(self, ids, skip_special: bool = False) -> bytes:
        """The bytes the tokens stand for (may end inside a UTF-8 character)."""
        ids = self._check_ids(ids)
        table = self._piece_table(skip_special)
        k = self._strip_index(ids)
        if k >= 0 and table[ids[k]][:1] == b" ":
            return b"".join([*map(table.__getitem__, ids[:k]), table[ids[k]][1:],
                             *map(table.__getitem__, ids[k + 1:])])
        return b"".join(map(table.__getitem__, ids))

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text for token ids; control-token texts are kept unless `skip_special`. Invalid UTF-8 -> U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def token_to_bytes(self, token_id: int) -> bytes:
        """The bytes one token renders as (control tokens as their text; byte tokens as that byte)."""
        return self._pieces[self._check_id(token_id)]

    def vocab_bytes(self) -> list[tuple[int, bytes]]:
        """[(id, bytes)] for every token, as token_to_bytes gives them; built once and cached."""
        if self._vocab_bytes is None:
            self._vocab_bytes = list(enumerate(self._pieces))
        return self._vocab_bytes

    def detokenizer(self, skip_special: bool = False):
        """A fresh IncrementalDetokenizer for streaming output."""
        from oxillama.tokenizer.streaming import IncrementalDetokenizer
        return IncrementalDetokenizer(self, skip_special=skip_special)

    # ------------------------------------------------------------------ chat
    @property
    def chat_template(self) -> str | None:
        return self._vocab.chat_template

    def _default_template_source(self) -> str:
        """The file's template, else a built-in one matching the vocabulary's turn tokens."""
        if self._vocab.chat_template is not None:
            return self._vocab.chat_template
        from oxillama.tokenizer.chat import builtin_template

        tt = self._vocab.token_type
        special = {self._vocab.tokens[i] for i in np.flatnonzero(tt != TOKEN_NORMAL).tolist()}
        found = builtin_template(special)
        if found is None:
            raise ChatTemplateError("this model's GGUF file has no tokenizer.chat_template and its vocabulary "
                                    "matches no built-in chat format; pass chat_template= to apply_chat_template")
        logger.info("no chat template in the GGUF file: using the built-in %s format", found[0])
        return found[1]

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template: str | None = None, tokenize: bool = False, return_dict: bool = False,
                            **kwargs):
        """Render `messages` with the model's chat template (or `chat_template`, a template text or the name
        of one of the file's named templates) in a jinja2 sandbox.

        Returns the text, or with tokenize=True its token ids as Hugging Face's apply_chat_template gives
        them (special tokens in the text parsed, none added: the template writes them), and with
        return_dict=True as well {"input_ids": ids, "attention_mask": [1, ...]}. Unlike Hugging Face,
        tokenize defaults to False, since generate() takes the text."""
        if return_dict and not tokenize:
            raise TokenizerError("return_dict=True needs tokenize=True (as in Hugging Face)")
        text = self._render_chat(messages, add_generation_prompt, tools, chat_template, kwargs)
        if not tokenize:
            return text
        ids = self.encode(text, add_special=False, parse_special=True)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids

    def _render_chat(self, messages, add_generation_prompt, tools, chat_template, kwargs: dict) -> str:
        from oxillama.tokenizer.chat import ChatTemplate

        if chat_template is None:
            if self._chat is None:
                self._chat = ChatTemplate(self._default_template_source())
            template = self._chat
        elif isinstance(chat_template, str) and chat_template in self._vocab.chat_templates:
            template = ChatTemplate(self._vocab.chat_templates[chat_template])
        else:
            template = ChatTemplate(chat_template)
        bos = self.bos_id
        eos = self.eos_id
        kwargs.setdefault("bos_token", self._vocab.tokens[bos] if bos is not None else "")
        kwargs.setdefault("eos_token", self._vocab.tokens[eos] if eos is not None else "")
        return template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs)

    def __repr__(self) -> str:
        v = self._vocab
        return f"Tokenizer(model={v.model!r}, pre={v.pre!r}, n_vocab={v.n_vocab})"
