"""Incremental detokenization for streaming generation.

Tokens can end in the middle of a UTF-8 character (byte tokens, byte-level BPE pieces), so text is released
only up to the last complete character; the bytes of an unfinished one wait for the next token. Because the
same incremental UTF-8 decoder (errors="replace") sees the same bytes `Tokenizer.decode` sees, the pieces
concatenated (including `flush()`) equal `decode(all_ids)` exactly.
"""
from __future__ import annotations

import codecs

from oxillama.errors import TokenizerError


class IncrementalDetokenizer:
    """Feed token ids one at a time (`add`) or in batches (`add_many`); `flush()` at the end of the stream."""

    def __init__(self, tokenizer, skip_special: bool = False):
        self._tok = tokenizer
        self._table = tokenizer._piece_table(skip_special)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ids: list[int] = []      # only the first few, to place the add_space_prefix strip
        self._n = 0
        self._strip_done = tokenizer._strip_index([0]) < 0  # vocabularies without a space prefix never strip
        self._pending_head = b""       # bytes held while the strip position is undecided (leading BOS)
        self._finished = False

    def add(self, token_id: int) -> str:
        """Text that became complete with this token ('' while a character is unfinished)."""
        if self._finished:
            raise TokenizerError("this detokenizer was flushed; start a new one")
        tid = self._tok._check_id(token_id)
        data = self._table[tid]
        self._n += 1
        if not self._strip_done:
            data = self._strip(tid, data)
        return self._decoder.decode(data, final=False)

    def add_many(self, ids) -> str:
        return "".join([self.add(t) for t in self._tok._check_ids(ids)])

    def _strip(self, tid: int, data: bytes) -> bytes:
        # mirror Tokenizer._strip_index: the space goes from ids[0], or from ids[1] when ids[0] is BOS
        self._ids.append(tid)
        if len(self._ids) == 1 and tid == self._tok.bos_id:
            self._pending_head = data  # wait: a second token decides where the strip applies
            return b""
        self._strip_done = True
        head, self._pending_head = self._pending_head, b""
        if data[:1] == b" ":
            data = data[1:]
        return head + data

    def flush(self) -> str:
        """The rest of the text: held bytes of an unfinished character become U+FFFD."""
        self._finished = True
        data = self._pending_head
        self._pending_head = b""
        if data and not self._strip_done and len(self._ids) == 1:
            # a lone BOS: decode() strips its own leading space (index 0) in that case
            data = data[1:] if data[:1] == b" " else data
        return self._decoder.decode(data, final=True)

    @property
    def n_tokens(self) -> int:
        return self._n
