"""Vocabulary bytes for the grammar matcher: the prefix trie (built in C, cached) and byte decoding.

``vocab_trie(vocab_bytes, eog_ids)`` returns the prefix trie over token bytes that
``GrammarMatcher`` walks; building one for Gemma's 262,144 tokens takes a fraction of a second,
so the last few are cached by content.
"""
from __future__ import annotations

import collections
import threading

from oxillama.grammar._cgrammar import Vocab

_CACHE_SIZE = 4
_cache: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()


def vocab_trie(vocab_bytes, eog_ids=()) -> Vocab:
    """The (cached) prefix trie of `vocab_bytes` (bytes per token id), leaving out `eog_ids`."""
    key_tokens = tuple(vocab_bytes)
    key = (key_tokens, tuple(sorted(set(int(t) for t in eog_ids))))
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    trie = Vocab(list(key_tokens), key[1])
    with _lock:
        _cache[key] = trie
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return trie


def gpt2_byte_decoder() -> dict:
    """GPT-2's byte-level BPE alphabet: printable stand-in character -> the byte it encodes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def gpt2_token_bytes(tokens, token_types=None) -> list:
    """Bytes of GPT-2 byte-level BPE token strings (as stored in GGUF tokenizer.ggml.tokens).

    Control tokens (token type 3) and tokens using characters outside the byte alphabet get b"",
    which the matcher never allows.
    """
    dec = gpt2_byte_decoder()
    out = []
    for i, t in enumerate(tokens):
        if token_types is not None and int(token_types[i]) == 3:
            out.append(b"")
            continue
        try:
            out.append(bytes(dec[c] for c in t))
        except KeyError:
            out.append(b"")
    return out
