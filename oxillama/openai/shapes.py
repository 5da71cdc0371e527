"""OpenAI response bodies as plain dicts: completion / chat.completion / chunk / embedding bodies with
exact usage, logprobs in OpenAI's two shapes (and StreamedLogprobs, which sends them chunk by chunk).

Everything here is JSON-serialisable: Python ints, floats and strs only. The keys are a superset of
llama-cpp-python's `llama_types` TypedDicts (its reference shapes); nothing here needs pydantic, and the
server's pydantic response models validate these dicts as they are.
"""
from __future__ import annotations

import math
import time
import uuid

# JSON has no -inf: OpenAI reports an impossible token's log-probability as -9999.0
MIN_LOGPROB = -9999.0


def new_id(prefix: str) -> str:
    """"cmpl-...", "chatcmpl-...": a fresh response id."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    out = {"prompt_tokens": int(prompt_tokens), "completion_tokens": int(completion_tokens),
           "total_tokens": int(prompt_tokens) + int(completion_tokens)}
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": int(cached_tokens)}
    return out


def generated_token_count(tokens, eog_ids) -> int:
    """Completion tokens as usage counts them: the end-of-generation token that ended the text is not
    part of it (llama.cpp and llama-cpp-python do not count it either)."""
    n = len(tokens)
    return n - 1 if n and int(tokens[-1]) in eog_ids else n


# ---- logprobs ----

def _finite(x: float) -> float:
    x = float(x)
    return x if math.isfinite(x) else MIN_LOGPROB


def _token_str(tokenizer, tid: int) -> tuple[str, list[int]]:
    data = tokenizer.token_to_bytes(int(tid))
    return data.decode("utf-8", errors="replace"), list(data)


def _top(entry: dict, n_top: int) -> list:
    return sorted(entry.items(), key=lambda kv: (-kv[1], kv[0]))[:n_top]


def chat_logprobs(tokenizer, tokens, logprobs, n_top: int) -> dict:
    """Chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": None}, one
    entry per generated token (logprobs: the engine's per-token {token_id: log-probability})."""
    content = []
    for tid, entry in zip(tokens, logprobs or []):
        text, data = _token_str(tokenizer, tid)
        top = []
        for i, lp in _top(entry, n_top):
            t, b = _token_str(tokenizer, i)
            top.append({"token": t, "logprob": _finite(lp), "bytes": b})
        content.append({"token": text, "logprob": _finite(entry[tid]), "bytes": data, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(tokenizer, tokens, logprobs, n_top: int, offset: int = 0) -> dict:
    """Legacy-completions shape: parallel lists of token texts, their log-probabilities, the top
    alternatives ({text: log-probability}) and each token's character offset in the text."""
    out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    pos = offset
    for tid, entry in zip(tokens, logprobs or []):
        text, _ = _token_str(tokenizer, tid)
        out["tokens"].append(text)
        out["token_logprobs"].append(_finite(entry[tid]))
        out["top_logprobs"].append({_token_str(tokenizer, i)[0]: _finite(lp) for i, lp in _top(entry, n_top)})
        out["text_offset"].append(pos)
        pos += len(text)
    return out


class StreamedLogprobs:
    """Logprobs of one streamed choice, sent with the chunks as its tokens are produced (as OpenAI streams
    them): take(n) converts the entries of the tokens not sent yet among the first n. `source` has
    .tokens and .token_logprobs, lists the generation appends to (a scheduler RequestHandle), or is a
    function giving that object when asked (an engine's streaming call, known once it starts); joined,
    the chunks' entries are the non-streamed response's."""

    def __init__(self, source, convert):
        self.source, self.convert, self.sent = source, convert, 0

    def take(self, n: int | None = None):
        """convert(tokens, entries) of tokens [sent, n) (n None: all so far), or None when there are none."""
        src = self.source() if callable(self.source) else self.source
        tokens, lps = src.tokens, src.token_logprobs
        n = len(tokens) if n is None else n
        if lps is None or n <= self.sent:
            return None
        lo, self.sent = self.sent, n
        return self.convert(tokens[lo:n], lps[lo:n])


def completion_logprobs_from(tokenizer, n_top: int, offset: int):
    """completion_logprobs for consecutive slices of one choice's tokens: text offsets run on from offset"""
    def convert(tokens, entries):
        nonlocal offset
        out = completion_logprobs(tokenizer, tokens, entries, n_top, offset)
        offset += sum(len(t) for t in out["tokens"])
        return out
    return convert


# ---- text completions ----

def completion_choice(text: str, index: int = 0, finish_reason: str | None = None, logprobs=None) -> dict:
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}


def completion_response(response_id: str, model: str, choices: list[dict], usage_: dict,
                        created: int | None = None) -> dict:
    return {"id": response_id, "object": "text_completion", "created": now() if created is None else created,
            "model": model, "choices": choices, "usage": usage_}


def completion_chunk(response_id: str, model: str, created: int, choice: dict) -> dict:
    return {"id": response_id, "object": "text_completion", "created": created, "model": model,
            "choices": [choice]}


# ---- chat ----

def chat_finish_reason(engine_reason: str | None, calls) -> str | None:
    """OpenAI's finish_reason: "tool_calls" when the message holds calls."""
    return "tool_calls" if calls else engine_reason


def chat_message(content: str | None, calls=()) -> dict:
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [c.to_openai() for c in calls]
    return msg


def chat_choice(index: int, content: str | None, calls, finish_reason: str | None, logprobs=None) -> dict:
    return {"index": index, "message": chat_message(content, calls), "logprobs": logprobs,
            "finish_reason": chat_finish_reason(finish_reason, calls)}


def chat_response(response_id: str, model: str, choices: list[dict], usage_: dict,
                  created: int | None = None) -> dict:
    return {"id": response_id, "object": "chat.completion", "created": now() if created is None else created,
            "model": model, "choices": choices, "usage": usage_}


def chat_chunk(response_id: str, model: str, created: int, delta: dict, index: int = 0,
               finish_reason: str | None = None, logprobs=None) -> dict:
    return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]}


# ---- embeddings ----

def embedding_response(model: str, vectors: list, prompt_tokens: int) -> dict:
    """vectors: per input, a list of floats (pooled) or a list of lists (one per token)."""
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": int(prompt_tokens), "total_tokens": int(prompt_tokens)}}
