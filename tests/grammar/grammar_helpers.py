"""Shared helpers for the grammar tests: vocabularies from GGUF files, random walks under a matcher."""
import os

import numpy as np

from oxillama.grammar.vocab import gpt2_token_bytes

MODELS = os.path.expanduser("~/.cache/oxillama/models")
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")


def gguf_tokens(path):
    """(tokens, token_types, eos_id) from a GGUF file's tokenizer metadata, via the gguf package."""
    import gguf

    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    ft = r.fields["tokenizer.ggml.token_type"]
    types = [int(ft.parts[i][0]) for i in ft.data]
    fe = r.fields["tokenizer.ggml.eos_token_id"]
    eos = int(fe.parts[fe.data[0]][0])
    return tokens, types, eos


def smollm2_vocab():
    """SmolLM2's vocab bytes (GPT-2 byte-level BPE) and its end-of-generation id."""
    tokens, types, eos = gguf_tokens(SMOLLM2)
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


def gemma3_vocab():
    tokens, types, eos = gguf_tokens(GEMMA3)
    return sentencepiece_token_bytes(tokens, types), [eos]


def random_walk(matcher, rng, max_tokens=400, p_end=0.3, prefer=None):
    """Sample allowed tokens until an end-of-generation token is taken or max_tokens pass.

    Returns (bytes produced, ended). With `prefer` (token ids), half of the picks come from the
    allowed ones among them, which keeps walks over large vocabularies short.
    """
    out = bytearray()
    eog = set(int(t) for t in matcher.eog_ids)
    for _ in range(max_tokens):
        allowed = matcher.allowed_tokens()
        assert len(allowed) > 0, f"dead end after {bytes(out)!r}"
        ends = [t for t in allowed if t in eog]
        if ends and rng.random() < p_end:
            matcher.accept_token(ends[0])
            return bytes(out), True
        body = [t for t in allowed if t not in eog]
        if not body:
            matcher.accept_token(ends[0])
            return bytes(out), True
        if prefer is not None and rng.random() < 0.5:
            pref = np.intersect1d(body, prefer)
            if len(pref):
                body = pref
        t = int(body[rng.integers(len(body))])
        assert matcher.is_token_allowed(t)
        matcher.accept_token(t)
        out += matcher.vocab.token_bytes(t)
    return bytes(out), False
