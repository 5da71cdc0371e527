"""What a generate() call returns: `Completion`, the text as a `str` with the token ids, why
generation ended, token counts (`Usage`), timings in llama.cpp's terms (`Timings`) and, when asked
for, log-probabilities keyed by token id (`.logprobs`) and with each token's text (`.token_logprobs`)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, repr=False)
class Usage:
    """Token counts, as in OpenAI's and llama-cpp-python's `usage`. prompt_tokens is the context the
    completion followed: the prompt, or for a continuation (generate(None)) the session's tokens."""
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __repr__(self) -> str:     # total_tokens too, as the OpenAI usage object prints
        return (f"Usage(prompt_tokens={self.prompt_tokens}, completion_tokens={self.completion_tokens}, "
                f"total_tokens={self.total_tokens})")


@dataclass(frozen=True)
class Timings:
    """Where a generate() call spent its time, named as llama.cpp's server reports it.

    prompt_n: prompt tokens actually run through the model (a prefix kept in the session's cache is
    not run again), in prompt_ms; predicted_n: generated tokens, in predicted_ms (their forward passes
    and sampling; time a streaming caller spends between pieces is not counted); ttft_ms: from the
    call to the first generated token, prompt included."""
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    ttft_ms: float

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / (self.prompt_ms / 1e3) if self.prompt_ms > 0 else 0.0

    @property
    def predicted_per_second(self) -> float:
        return self.predicted_n / (self.predicted_ms / 1e3) if self.predicted_ms > 0 else 0.0

    def report(self, load_ms: float | None = None) -> str:
        """The lines llama.cpp prints after a run (load time, prompt eval, eval, time to first token)."""
        lines = []
        if load_ms is not None:
            lines.append(f"{'load time':<19s} = {load_ms:10.2f} ms")
        lines.append(f"{'prompt eval time':<19s} = {self.prompt_ms:10.2f} ms / {self.prompt_n:5d} tokens "
                     f"({_per_token(self.prompt_ms, self.prompt_n)} ms per token, "
                     f"{self.prompt_per_second:8.2f} tokens per second)")
        lines.append(f"{'eval time':<19s} = {self.predicted_ms:10.2f} ms / {self.predicted_n:5d} tokens "
                     f"({_per_token(self.predicted_ms, self.predicted_n)} ms per token, "
                     f"{self.predicted_per_second:8.2f} tokens per second)")
        lines.append(f"{'time to first token':<19s} = {self.ttft_ms:10.2f} ms")
        return "\n".join(lines)


def _per_token(ms: float, n: int) -> str:
    return f"{ms / n:8.2f}" if n else f"{'-':>8s}"


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the top alternatives, each as
    (token id, token text, log-probability), most likely first."""
    id: int
    text: str
    logprob: float
    top: tuple[tuple[int, str, float], ...]


class Completion(str):
    """The generated text, with the generated token ids, why generation ended ("stop" or
    "length"), `usage` (token counts), `timings` and, when asked for (logprobs=N), the top-N
    log-probabilities of every generated token: `logprobs` keyed by token id, `token_logprobs`
    with each token's text."""

    tokens: list[int]
    finish_reason: str
    logprobs: list[dict[int, float]] | None
    token_logprobs: list[TokenLogprob] | None
    usage: Usage | None
    timings: Timings | None

    def __new__(cls, text: str, *, tokens=(), finish_reason: str = "stop", logprobs=None, usage=None,
                timings=None, token_logprobs=None):
        obj = super().__new__(cls, text)
        obj.tokens = list(tokens)
        obj.finish_reason = finish_reason
        obj.logprobs = logprobs
        obj.token_logprobs = token_logprobs
        obj.usage = usage
        obj.timings = timings
        return obj

    def with_text(self, text: str) -> "Completion":
        return Completion(text, tokens=self.tokens, finish_reason=self.finish_reason, logprobs=self.logprobs,
                          usage=self.usage, timings=self.timings, token_logprobs=self.token_logprobs)


def logprob_entries(tokens: list[int], logprobs: list[dict[int, float]], token_text) -> list[TokenLogprob]:
    """logprobs keyed by id -> TokenLogprob entries; token_text(id) gives a token's text."""
    out = []
    for tok, entry in zip(tokens, logprobs):
        top = sorted(entry.items(), key=lambda kv: -kv[1])
        out.append(TokenLogprob(tok, token_text(tok), entry[tok], tuple((i, token_text(i), lp) for i, lp in top)))
    return out
