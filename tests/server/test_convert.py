"""The server's pieces without a socket: request validation, the request -> generate() translation,
logprobs shapes and error classification."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from pydantic import ValidationError  # noqa: E402

from oxillama import errors as ox  # noqa: E402
from oxillama.server import convert  # noqa: E402
from oxillama.server.errors import classify  # noqa: E402
from oxillama.server.protocol.chat import ChatCompletionRequest  # noqa: E402
from oxillama.server.protocol.completions import CompletionRequest  # noqa: E402

MSG = [{"role": "user", "content": "hi"}]
N_VOCAB = 100


def chat(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": MSG, **kw})


def test_unset_sampling_fields_are_left_to_the_engine():
    kw = convert.generate_kwargs(chat(), N_VOCAB)
    assert kw == {"max_tokens": None}


def test_sampling_fields_pass_through():
    kw = convert.generate_kwargs(chat(temperature=0, top_p=0.9, top_k=20, min_p=0.1, repeat_penalty=1.1,
                                      max_tokens=7, stop="\n", logit_bias={"5": -100, "7": 2.5}), N_VOCAB)
    assert kw == {"temperature": 0.0, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1,
                  "max_tokens": 7, "stop": ["\n"], "logit_bias": {5: -100.0, 7: 2.5}}


def test_ignore_eos_bans_the_end_of_generation_tokens():
    kw = convert.generate_kwargs(chat(ignore_eos=True, logit_bias={"5": 1}), N_VOCAB, eog_ids={2, 9})
    assert kw["logit_bias"] == {5: 1.0, 2: -math.inf, 9: -math.inf}


def test_max_completion_tokens():
    assert convert.generate_kwargs(chat(max_completion_tokens=9), N_VOCAB)["max_tokens"] == 9
    assert convert.generate_kwargs(chat(max_completion_tokens=9, max_tokens=9), N_VOCAB)["max_tokens"] == 9
    with pytest.raises(ox.InvalidArgumentError, match="disagree"):
        convert.generate_kwargs(chat(max_completion_tokens=9, max_tokens=3), N_VOCAB)


@pytest.mark.parametrize("bias, match", [({"100": 1}, "outside the vocabulary"), ({"x": 1}, "not a token id"),
                                         ({"3": 101}, r"\[-100, 100\]")])
def test_bad_logit_bias(bias, match):
    with pytest.raises(ox.InvalidArgumentError, match=match):
        convert.generate_kwargs(chat(logit_bias=bias), N_VOCAB)


def test_logprobs_requests():
    assert convert.requested_logprobs(chat()) is None
    assert convert.requested_logprobs(chat(logprobs=True)) == 0
    assert convert.requested_logprobs(chat(logprobs=True, top_logprobs=4)) == 4
    with pytest.raises(ox.InvalidArgumentError):
        convert.requested_logprobs(chat(top_logprobs=4))
    assert convert.requested_logprobs(CompletionRequest(prompt="x", logprobs=2)) == 2


def test_structured_output_compiles_to_a_grammar():
    from oxillama.grammar import Grammar
    kw = convert.generate_kwargs(chat(response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}), N_VOCAB)
    assert isinstance(kw["grammar"], Grammar) and "response_format" not in kw
    assert "grammar" not in convert.generate_kwargs(chat(response_format={"type": "text"}), N_VOCAB)
    with pytest.raises(ox.GrammarError):
        convert.generate_kwargs(chat(response_format={"type": "json_schema", "json_schema": {
            "name": "p", "schema": {"type": "nonsense"}}}), N_VOCAB)
    with pytest.raises(ox.InvalidArgumentError, match="not both"):
        convert.generate_kwargs(chat(grammar='root ::= "a"', response_format={"type": "json_object"}), N_VOCAB)


def test_choice_seeds():
    assert [convert.choice_seed(7, i) for i in range(3)] == [7, 8, 9]
    assert convert.choice_seed(None, 2) is None


@pytest.mark.parametrize("body", [
    {"messages": "hi"}, {"messages": [{"content": "x"}]}, {"messages": [{"role": "user", "content": 3}]},
    {"messages": MSG, "temperature": "0.2"}, {"messages": MSG, "max_tokens": -1}, {"messages": MSG, "n": True},
    {"messages": MSG, "seed": 1.5}, {"messages": MSG, "stop": 5}, {"messages": MSG, "top_logprobs": 21},
])
def test_malformed_chat_bodies(body):
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate(body)


def test_content_parts_and_unknown_fields():
    req = ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        "user": "someone", "store": False})
    assert req.messages[0].text() == "ab"


class _Tok:
    """A tokenizer whose token i is the text 't<i>'."""

    def token_to_bytes(self, tid):
        return f"t{tid}".encode()


def test_chat_logprobs_shape():
    out = convert.chat_logprobs(_Tok(), [3, 1], [{3: -0.1, 4: -2.0, 5: -3.0}, {1: -1.5, 2: -0.5, 6: -float("inf")}], 2)
    first, second = out.content
    assert (first.token, first.logprob, [t.token for t in first.top_logprobs]) == ("t3", -0.1, ["t3", "t4"])
    assert (second.token, second.logprob, [t.token for t in second.top_logprobs]) == ("t1", -1.5, ["t2", "t1"])
    assert first.bytes == list(b"t3")


def test_completion_logprobs_shape():
    out = convert.completion_logprobs(_Tok(), [3, 10], [{3: -0.1}, {10: -float("inf"), 2: -0.2}], 1, offset=5)
    assert out.tokens == ["t3", "t10"]
    assert out.text_offset == [5, 7]
    assert out.token_logprobs[1] == -9999.0 and all(math.isfinite(x) for x in out.token_logprobs)
    assert out.top_logprobs == [{"t3": -0.1}, {"t2": -0.2}]


def test_error_classification():
    assert classify(ox.ContextOverflowError("x")) == (400, "exceed_context_size_error")
    assert classify(ox.InvalidArgumentError("x")) == (400, "invalid_request_error")
    assert classify(ox.GrammarError("x")) == (400, "invalid_request_error")
    assert classify(ox.ChatTemplateError("x")) == (400, "invalid_request_error")
    assert classify(ox.QueueFullError("x")) == (429, "rate_limit_error")
    assert classify(ox.SchedulerStoppedError("x")) == (503, "server_error")
    assert classify(ox.KVPoolExhaustedError("x")) == (400, "exceed_context_size_error")
    assert classify(RuntimeError("x")) == (500, "server_error")
