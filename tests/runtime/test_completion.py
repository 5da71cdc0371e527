"""What generate() returns: Completion's usage, timings and log-probabilities with token text, and
engine.last_completion after a streamed call."""
import math

from oxillama import Completion
from oxillama.runtime.completion import Usage


def test_last_completion_after_streaming_has_the_text(smollm2):
    pieces = list(smollm2.generate("The sun is", max_tokens=20, temperature=0, stream=True))
    last = smollm2.last_completion
    assert isinstance(last, Completion)
    assert last == "".join(pieces) and len(last) > 0
    assert len(last.tokens) == 20 and last.finish_reason == "length"


def test_last_completion_after_a_broken_stream_has_the_text_seen(smollm2):
    it = smollm2.generate("Count: one, two,", max_tokens=50, temperature=0, stream=True)
    seen = []
    for piece in it:
        seen.append(piece)
        if len(seen) == 3:
            break
    it.close()
    assert smollm2.last_completion == "".join(seen)


def test_usage_repr_shows_the_total():
    assert repr(Usage(prompt_tokens=5, completion_tokens=3)) == \
        "Usage(prompt_tokens=5, completion_tokens=3, total_tokens=8)"


def test_usage_counts_prompt_and_completion_tokens(smollm2):
    prompt = "The capital of France is"
    n_prompt = len(smollm2.tokenize(prompt))
    out = smollm2.generate(prompt, max_tokens=8, temperature=0)
    assert out.usage.prompt_tokens == n_prompt
    assert out.usage.completion_tokens == len(out.tokens) == 8
    assert out.usage.total_tokens == n_prompt + 8
    more = smollm2.generate(None, max_tokens=4)
    # a continuation follows the whole session: prompt, the 8 tokens, nothing else
    assert more.usage.prompt_tokens == n_prompt + 8 and more.usage.completion_tokens == 4


def test_timings_describe_the_call(smollm2):
    smollm2.reset()
    out = smollm2.generate("Once upon a time there was a", max_tokens=6, temperature=0)
    t = out.timings
    assert t.prompt_n == out.usage.prompt_tokens and t.predicted_n == 6
    assert t.prompt_ms > 0 and t.predicted_ms > 0 and t.prompt_ms <= t.ttft_ms
    assert t.prompt_per_second > 0 and t.predicted_per_second > 0
    assert math.isclose(t.predicted_per_second, 6 / (t.predicted_ms / 1e3))
    # the same prompt again: its cached prefix is not run again (the last token always is)
    again = smollm2.generate("Once upon a time there was a", max_tokens=2, temperature=0)
    assert again.timings.prompt_n == 1
    report = t.report(load_ms=smollm2.load_ms)
    for words in ("prompt eval time", "tokens per second", "eval time", "time to first token"):
        assert words in report


def test_load_time_is_recorded(smollm2):
    assert smollm2.load_ms is not None and smollm2.load_ms > 0


def test_logprobs_with_token_text(smollm2):
    out = smollm2.generate("The capital of France is", max_tokens=4, temperature=0, logprobs=3)
    assert len(out.token_logprobs) == len(out.tokens) == len(out.logprobs)
    assert "".join(e.text for e in out.token_logprobs) == out
    for tok, by_id, entry in zip(out.tokens, out.logprobs, out.token_logprobs):
        assert entry.id == tok and entry.logprob == by_id[tok]
        assert entry.top[0][2] == max(by_id.values())          # most likely first
        assert {i for i, _, _ in entry.top} == set(by_id)
        assert all(text == smollm2.detokenize([i]) for i, text, _ in entry.top)
    plain = smollm2.generate("The capital of France is", max_tokens=2, temperature=0)
    assert plain.token_logprobs is None and plain.logprobs is None


def test_last_completion_after_speculative_and_beam_calls(smollm2):
    prompt = "The capital of France is Paris. The capital of France is"
    for kwargs in ({"speculative": "ngram"}, {"num_beams": 2}):
        out = smollm2.generate(prompt, max_tokens=8, temperature=0, **kwargs)
        assert smollm2.last_completion == out and smollm2.last_completion.tokens == out.tokens
        assert out.usage.completion_tokens == len(out.tokens)
        assert out.usage.prompt_tokens == len(smollm2.tokenize(prompt))
        pieces = list(smollm2.generate(prompt, max_tokens=8, temperature=0, stream=True, **kwargs))
        assert smollm2.last_completion == "".join(pieces) == out, kwargs
