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

import logging
import os
import re

import numpy as np

from oxillama.errors import ChatTemplateError, TokenizerError
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


class _SpecialMatcher:
    """Finds which special tokens occur in a text, then partitions it in llama.cpp's order."""

    def __init__(self, ids: list[int], tokens: list[str]):
        self.text_to_id = {}
        for tid in ids:  # equal texts: keep the id llama.cpp's text lookup would give (the last)
            self.text_to_id[tokens[tid]] = tid
        self.pattern = re.compile(_trie_pattern(self.text_to_id)) if self.text_to_id else None
        self._prefixes: dict[str, list[int]] = {}
        self._order = {tid: (-len(tokens[tid].encode("utf-8")), tid) for tid in self.text_to_id.values()}
        self.tokens = tokens

    def _prefix_tokens(self, match: str) -> list[int]:
        found = self._prefixes.get(match)
        if found is None:
            t2i = self.text_to_id
            found = [t2i[match[:k]] for k in range(1, len(match) + 1) if match[:k] in t2i]
            self._prefixes[match] = found
        return found

    def partition(self, text: str) -> list:
        """`text` as a list of raw str fragments and int token ids."""
        if self.pattern is None:
            return [text]
        present: set[int] = set()
        search = self.pattern.search
        m = search(text)
        while m is not None:
            # every token that occurs at this start is a prefix of the longest one that does
            present.update(self._prefix_tokens(m.group()))
            m = search(text, m.start() + 1)
        if not present:
            return [text]
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
        self._hf = builder.build_hf_tokenizer(vocab)
        tt = vocab.token_type
        self._is_special = np.isin(tt, (TOKEN_CONTROL, TOKEN_UNKNOWN))  # hidden when skip_special
        self._pieces = self._build_pieces()
        self._pieces_skip = [b"" if s else p for p, s in zip(self._pieces, self._is_special.tolist())]
        user_ids = np.flatnonzero(tt == TOKEN_USER_DEFINED).tolist()
        all_ids = np.flatnonzero(np.isin(tt, (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN))).tolist()
        self._matcher_user = _SpecialMatcher(user_ids, vocab.tokens)
        self._matcher_all = _SpecialMatcher(all_ids, vocab.tokens)
        self._ugm_normalizer = None
        if vocab.model == "t5" and vocab.precompiled_charsmap:
            from tokenizers import normalizers
            self._ugm_normalizer = normalizers.Precompiled(vocab.precompiled_charsmap)
        self._vocab_bytes = None
        self._chat = None

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
            metadata = GGUFFile(path_or_file).metadata
        return cls.from_metadata(dict(metadata))

    def _build_pieces(self) -> list[bytes]:
        """Each token's bytes as llama.cpp's token_to_piece(special=True) renders them."""
        v = self._vocab
        pieces: list[bytes] = []
        spm_like = v.model != "gpt2"
        for text, ttype in zip(v.tokens, v.token_type.tolist()):
            if ttype in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED):
                pieces.append(text.encode("utf-8"))
            elif ttype == TOKEN_NORMAL:
                pieces.append(text.replace(SPM_SPACE, " ").encode("utf-8") if spm_like else _byte_level_decode(text))
            elif ttype == TOKEN_BYTE and spm_like:
                m = _BYTE_TOKEN.fullmatch(text)
                pieces.append(bytes([int(m.group(1), 16)]) if m else b"")
            else:  # unused / undefined tokens render as nothing
                pieces.append(b"")
        return pieces

    # ------------------------------------------------------------------ properties
    @property
    def vocab(self) -> Vocab:
        return self._vocab

    @property
    def hf_tokenizer(self):
        """The Hugging Face tokenizer that encodes raw fragments (no special-token parsing)."""
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
        return token_id in self._vocab.eog_ids

    def is_special(self, token_id: int) -> bool:
        """True for control and unknown tokens (the ones `skip_special` hides)."""
        return bool(self._is_special[self._check_id(token_id)])

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the vocabulary (byte-level / U+2581 form, not decoded)."""
        return self._vocab.tokens[self._check_id(token_id)]

    def token_to_id(self, text: str) -> int | None:
        """The id of the token whose stored text is `text`, or None."""
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
        v = self._vocab
        out: list[int] = []
        if add_special and v.add_bos:
            out.append(v.special["bos"])
        if text:
            matcher = self._matcher_all if parse_special else self._matcher_user
            fragments = matcher.partition(text)
            if len(fragments) == 1 and type(fragments[0]) is str:
                out.extend(self._encode_raw([self._prepare(fragments[0], True)])[0])
            else:
                self._encode_fragments(fragments, out)
        if add_special and v.add_eos:
            out.append(v.special["eos"])
        return out

    def _prepare(self, raw: str, after_special: bool) -> str:
        """The text handed to the vocabulary model for one raw fragment."""
        v = self._vocab
        if v.model == "llama":
            return " " + raw if (v.add_space_prefix and after_special) else raw
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
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise TokenizerError(f"token ids must be a 1-D integer array, got shape {ids.shape} {ids.dtype}")
            arr = ids
        else:
            try:
                seq = list(ids)
            except TypeError:
                raise TokenizerError(f"token ids must be a sequence of ints, got {type(ids).__name__}") from None
            if not all(isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_)) for t in seq):
                raise TokenizerError("token ids must all be ints")
            arr = np.asarray(seq, dtype=np.int64) if seq else np.zeros(0, np.int64)
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self._vocab.n_vocab):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise TokenizerError(f"token id {bad} out of range [0, {self._vocab.n_vocab})")
        return arr.tolist()

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
        data = b"".join(map(table.__getitem__, ids))
        k = self._strip_index(ids)
        if k >= 0:
            head = b"".join(map(table.__getitem__, ids[:k]))
            if data[len(head):len(head) + 1] == b" ":
                data = head + data[len(head) + 1:]
        return data

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

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template: str | None = None, **kwargs) -> str:
        """Render `messages` with the model's chat template (or `chat_template`, a template text or the name
        of one of the file's named templates) in a jinja2 sandbox."""
        from oxillama.tokenizer.chat import ChatTemplate

        if chat_template is None:
            if self._vocab.chat_template is None:
                raise ChatTemplateError("this model's GGUF file has no tokenizer.chat_template; "
                                        "pass chat_template= to apply_chat_template")
            if self._chat is None:
                self._chat = ChatTemplate(self._vocab.chat_template)
            template = self._chat
        elif chat_template in self._vocab.chat_templates:
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
