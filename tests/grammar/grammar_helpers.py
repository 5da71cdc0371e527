"""Shared helpers for the grammar tests: vocabularies from GGUF files, random walks under a matcher."""
import os

import numpy as np

from oxillama.grammar.vocab import gpt2_token_bytes

MODELS = os.path.expanduser("~/.cache/oxillama/models")
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_tokens(path):
    """(tokens, token_types, eos_id) from a GGUF file's tokenizer metadata (reads the header only)."""
    import struct

    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            if et in _GGUF_SCALARS:
                fmt = f"<{n}{_GGUF_SCALARS[et]}"
                nonlocal pos
                v = list(struct.unpack_from(fmt, data, pos))
                pos += struct.calcsize(fmt)
                return v
            return [value(et) for _ in range(n)]
        return take(_GGUF_SCALARS[t])

    assert data[:4] == b"GGUF"
    pos = 4
    take("I")
    take("Q")
    n_kv = take("Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("I"))
        if "tokenizer.ggml.tokens" in kv and "tokenizer.ggml.token_type" in kv and \
                "tokenizer.ggml.eos_token_id" in kv:
            break
    return kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"], kv["tokenizer.ggml.eos_token_id"]


def smollm2_vocab(path=SMOLLM2):
    """SmolLM2's vocab bytes (GPT-2 byte-level BPE) and its end-of-generation id."""
    tokens, types, eos = gguf_tokens(path)
    return gpt2_token_bytes(tokens, types), [eos]


def sentencepiece_token_bytes(tokens, types):
    """Bytes of SentencePiece tokens: '▁' is a space, <0xNN> byte tokens are that byte, control tokens b''."""
    out = []
    for t, ty in zip(tokens, types):
        if ty == 6:  # byte token
            out.append(bytes([int(t[3:5], 16)]))
        elif ty in (1, 4, 5):  # normal, user-defined, unused
            out.append(t.replace("\u2581", " ").encode("utf-8") if ty != 5 else b"")
        else:
            out.append(b"")
    return out


def gemma3_vocab(path=GEMMA3):
    tokens, types, eos = gguf_tokens(path)
    return sentencepiece_token_bytes(tokens, types), [eos]


def random_walk(matcher, rng, max_tokens=400, p_end=0.3, prefer=None):
    """Sample allowed tokens until an end-of-generation token is taken or max_tokens pass.

    Returns (bytes produced, ended). With `prefer` (token ids), half of the picks come from the
    allowed ones among them, which keeps walks over large vocabularies short.
    """
    out = bytearray()
    eog = np.asarray(matcher.eog_ids, dtype=np.int64)
    for _ in range(max_tokens):
        allowed = matcher.allowed_tokens()
        assert len(allowed) > 0, f"dead end after {bytes(out)!r}"
        ends = np.intersect1d(allowed, eog)
        body = np.setdiff1d(allowed, eog, assume_unique=True)
        if len(ends) and (rng.random() < p_end or not len(body)):
            matcher.accept_token(int(ends[0]))
            return bytes(out), True
        if prefer is not None and rng.random() < 0.5:
            pref = np.intersect1d(body, prefer, assume_unique=True)
            if len(pref):
                body = pref
        t = int(body[rng.integers(len(body))])
        assert matcher.is_token_allowed(t)
        matcher.accept_token(t)
        out += matcher.vocab.token_bytes(t)
    return bytes(out), False
