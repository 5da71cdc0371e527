"""The request object (oxillama.runtime.request) and the token limit every entry point shares: max_tokens
None means until the end of generation or of the context, for generate(), the Scheduler, the server's
keywords and oxillama.Llama alike (issue 34: it used to stop at 256 tokens)."""
import math
from pathlib import Path

import pytest

from oxillama import InferenceEngine, Llama
from oxillama.errors import ContextOverflowError, InvalidArgumentError, SamplerError
from oxillama.runtime.request import DEFAULT_MAX_TOKENS, Request
from oxillama.runtime.scheduler import Scheduler

TINY = str(Path(__file__).parents[1] / "models" / "data" / "llama.gguf")
N_CTX = 300          # more room than the default limit of 256 tokens
PROMPT = [1, 5, 9, 13]


@pytest.fixture(scope="module")
def tiny():
    with InferenceEngine.from_gguf(TINY, n_ctx=N_CTX, n_threads=1) as engine:
        yield engine


def _no_eog(engine) -> dict:
    return {int(t): -math.inf for t in engine.tokenizer.eog_ids}


def test_max_tokens_none_runs_to_the_end_of_the_context(tiny):
    c = tiny.generate(PROMPT, max_tokens=None, temperature=0, logit_bias=_no_eog(tiny))
    # the last sampled token is never run, so it may take the position after the cache
    assert len(c.tokens) == N_CTX - len(PROMPT) + 1 > DEFAULT_MAX_TOKENS
    assert c.finish_reason == "length"
    assert tiny.generate(PROMPT, temperature=0, logit_bias=_no_eog(tiny)).tokens == c.tokens[:DEFAULT_MAX_TOKENS]


def test_max_tokens_none_in_the_scheduler_and_from_a_server_request(tiny):
    from oxillama.openai.request import generate_kwargs
    kw = generate_kwargs({"temperature": 0}, max_tokens=None, ban=tiny.tokenizer.eog_ids)  # as the server builds
    with Scheduler(tiny, n_seq_max=1) as sched:
        c = sched.submit(PROMPT, **kw).result()
    assert len(c.tokens) == N_CTX - len(PROMPT) + 1 and c.finish_reason == "length"


def test_llama_face_max_tokens_none():
    with Llama(TINY, n_ctx=N_CTX, verbose=False) as llm:
        r = llm(PROMPT, max_tokens=None, temperature=0, logit_bias={str(t): -100.0 for t in llm.engine.tokenizer.eog_ids})
    assert r["usage"]["completion_tokens"] > DEFAULT_MAX_TOKENS


def test_request_is_checked_once_with_the_vocabulary():
    req = Request.from_kwargs({"temp": 0.5, "max_new_tokens": 7, "stop": "x", "logprobs": 2}, n_vocab=100)
    assert req.config.temperature == 0.5 and req.max_tokens == 7 and req.stop == ["x"] and req.n_logprobs == 2
    assert Request.from_kwargs({}, n_vocab=100).max_tokens == DEFAULT_MAX_TOKENS
    assert Request.from_kwargs({"max_tokens": None}, n_vocab=100).max_tokens is None
    assert Request.from_kwargs({"n_predict": -1}, n_vocab=100).max_tokens is None
    with pytest.raises(InvalidArgumentError, match="outside the vocabulary"):
        Request.from_kwargs({"logit_bias": {100: 1.0}}, n_vocab=100)
    with pytest.raises(SamplerError, match="conflicting"):
        Request.from_kwargs({"temp": 0.5, "temperature": 0.7}, n_vocab=100)
    with pytest.raises(InvalidArgumentError, match="unknown generate"):
        Request.from_kwargs({"frobnicate": 1}, n_vocab=100)


def test_token_limit_against_the_context():
    req = Request.from_kwargs({"max_tokens": 10}, n_vocab=100)
    assert req.token_limit(5, 20) == 10
    with pytest.raises(ContextOverflowError, match="exceed n_ctx=12"):
        req.token_limit(5, 12)
    assert Request.from_kwargs({"max_tokens": None}, n_vocab=100).token_limit(5, 20) == 16


def test_a_continuation_fills_the_context_as_one_call_would(tiny):
    ban = _no_eog(tiny)
    whole = tiny.generate(PROMPT, max_tokens=None, temperature=0, logit_bias=ban)
    first = tiny.generate(PROMPT, max_tokens=10, temperature=0, logit_bias=ban)
    rest = tiny.generate(None, max_tokens=None)     # the last sampled token is pending, not yet run
    assert first.tokens + rest.tokens == whole.tokens
    with pytest.raises(ContextOverflowError):
        tiny.generate(None, max_tokens=1)           # the pending token itself has no room left
