"""oxillama.Llama as a drop-in for llama_cpp.Llama, on SmolLM2: the response dicts have
llama-cpp-python's keys and types, usage counts are exact, streams join to the non-streamed
result, and the session, tokenizer and embedding methods behave as llama-cpp-python's do."""
import json

import numpy as np
import pytest
from llama_shapes import (CHAT, CHAT_CHUNK, CHAT_LOGPROBS, COMPLETION, COMPLETION_CHUNK, COMPLETION_LOGPROBS, EMBEDDING,
                    assert_shape)

from oxillama import Llama, LlamaGrammar, OxillamaError
from oxillama.errors import LoraError, InvalidArgumentError

pytestmark = pytest.mark.slow
GREEDY = dict(temperature=0.0)


def test_completion_shape_and_exact_usage(llm):
    prompt = "The capital of France is"
    r = llm(prompt, max_tokens=6, **GREEDY)
    assert_shape(r, COMPLETION)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == llm.model_path
    choice = r["choices"][0]
    assert choice["finish_reason"] == "length"
    assert r["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode()))
    assert r["usage"]["completion_tokens"] == 6
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + 6
    # the text is the detokenized continuation of the prompt
    assert choice["text"] == llm.create_completion(llm.tokenize(prompt.encode()), max_tokens=6,
                                                   **GREEDY)["choices"][0]["text"]
    json.dumps(r)


def test_completion_stream_joins_to_the_completion(llm):
    prompt = "List three colours:"
    whole = llm.create_completion(prompt, max_tokens=12, **GREEDY)
    chunks = list(llm.create_completion(prompt, max_tokens=12, stream=True, **GREEDY))
    for c in chunks:
        assert_shape(c, COMPLETION_CHUNK)
        json.dumps(c)
    assert len({c["id"] for c in chunks}) == 1
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_completion_stop_echo_and_logprobs(llm):
    r = llm("1, 2, 3, 4,", max_tokens=20, stop=[" 7"], echo=True, logprobs=3, **GREEDY)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"].startswith("1, 2, 3, 4,")
    assert " 7" not in choice["text"]
    lp = choice["logprobs"]
    assert_shape(lp, COMPLETION_LOGPROBS)
    n = r["usage"]["completion_tokens"]
    assert len(lp["tokens"]) >= n and all(len(t) <= 3 for t in lp["top_logprobs"])
    assert all(x <= 0.0 for x in lp["token_logprobs"])
    # offsets count from the start of the returned text (the echoed prompt first)
    assert lp["text_offset"][0] == len("1, 2, 3, 4,")
    json.dumps(r)


def test_chat_shape_usage_and_stream(llm):
    messages = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": "What colour is the sky on a clear day?"}]
    r = llm.create_chat_completion(messages, max_tokens=24, **GREEDY)
    assert_shape(r, CHAT)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"] and "tool_calls" not in msg
    prompt = llm.engine.tokenizer.apply_chat_template(messages)
    assert r["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode(), special=True))
    chunks = list(llm.create_chat_completion(messages, max_tokens=24, stream=True, **GREEDY))
    for c in chunks:
        assert_shape(c, CHAT_CHUNK)
        assert c["object"] == "chat.completion.chunk"
        json.dumps(c)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"]


def test_chat_logprobs(llm):
    r = llm.create_chat_completion([{"role": "user", "content": "Say hi"}], max_tokens=5, logprobs=True,
                                   top_logprobs=2, **GREEDY)
    lp = r["choices"][0]["logprobs"]
    assert_shape(lp, CHAT_LOGPROBS)
    assert len(lp["content"]) == r["usage"]["completion_tokens"] or len(lp["content"]) == 5
    for entry in lp["content"]:
        assert len(entry["top_logprobs"]) == 2
        # greedy: the chosen token is the most likely one
        assert entry["logprob"] == pytest.approx(entry["top_logprobs"][0]["logprob"])
        assert bytes(entry["bytes"]).decode("utf-8", "replace") == entry["token"]
    with pytest.raises(InvalidArgumentError, match="top_logprobs"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], max_tokens=1, top_logprobs=2)


def test_streamed_logprobs_come_with_their_chunks(llm):
    """Each streamed chunk carries the logprobs of its tokens (as llama-cpp-python streams them); joined,
    they are the non-streamed response's, text offsets included."""
    messages = [{"role": "user", "content": "Name a colour."}]
    kw = dict(max_tokens=10, logprobs=True, top_logprobs=2, **GREEDY)
    whole = llm.create_chat_completion(messages, **kw)["choices"][0]["logprobs"]["content"]
    parts = [c["choices"][0]["logprobs"] for c in llm.create_chat_completion(messages, stream=True, **kw)]
    parts = [p["content"] for p in parts if p and p["content"]]
    assert len(parts) >= 2 and [e for p in parts for e in p] == whole
    kw = dict(max_tokens=10, logprobs=2, echo=True, **GREEDY)
    whole = llm("1, 2, 3,", **kw)["choices"][0]["logprobs"]
    parts = [c["choices"][0]["logprobs"] for c in llm("1, 2, 3,", stream=True, **kw)]
    parts = [p for p in parts if p and p["tokens"]]
    assert len(parts) >= 2
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert [x for p in parts for x in p[key]] == whole[key]


def test_chat_response_format_and_grammar(llm):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}}, "required": ["answer"]}
    r = llm.create_chat_completion([{"role": "user", "content": "Capital of Italy? Answer in JSON."}],
                                   response_format={"type": "json_object", "schema": schema}, max_tokens=40, **GREEDY)
    assert set(json.loads(r["choices"][0]["message"]["content"])) == {"answer"}
    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    r = llm("Is water wet? Answer:", grammar=g, max_tokens=4, **GREEDY)
    assert r["choices"][0]["text"] in ("yes", "no")
    g = LlamaGrammar.from_json_schema(json.dumps({"type": "integer", "minimum": 0, "maximum": 9}))
    assert llm("A digit:", grammar=g, max_tokens=4, **GREEDY)["choices"][0]["text"].strip().isdigit()


def test_seeded_sampling_is_reproducible(llm):
    a = llm("Once upon a time", max_tokens=12, temperature=0.9, seed=7)["choices"][0]["text"]
    b = llm("Once upon a time", max_tokens=12, temperature=0.9, seed=7)["choices"][0]["text"]
    assert a == b


def test_tokenize_detokenize(llm):
    text = "Hello, world! Ünïcödé and   spaces\nnew line"
    ids = llm.tokenize(text.encode())
    assert all(type(i) is int for i in ids)
    assert llm.detokenize(ids) == text.encode()
    assert llm.tokenize(text.encode(), add_bos=False) == [i for i in ids if i != llm.token_bos()]
    special = llm.tokenize(b"<|im_start|>user", add_bos=False, special=True)
    plain = llm.tokenize(b"<|im_start|>user", add_bos=False, special=False)
    assert len(special) < len(plain)
    assert llm.detokenize(special, special=True) == b"<|im_start|>user"
    assert llm.detokenize(special) == b"user"      # control tokens render only with special=True
    assert 0 <= llm.token_eos() < llm.n_vocab() and llm.n_ctx() == 1024 and llm.n_embd() > 0


def test_eval_state_and_reset(llm):
    llm.reset()
    ids = llm.tokenize(b"The quick brown fox")
    llm.eval(ids)
    assert llm.n_tokens == len(ids) and list(llm.input_ids) == ids
    assert llm.scores.shape == (1, llm.n_vocab())
    state = llm.save_state()
    first = llm.create_completion(ids, max_tokens=8, **GREEDY)["choices"][0]["text"]
    llm.reset()
    assert llm.n_tokens == 0
    llm.load_state(state)
    assert llm.n_tokens == len(ids) and list(llm.input_ids) == ids
    assert llm.create_completion(ids, max_tokens=8, **GREEDY)["choices"][0]["text"] == first


def test_embeddings_per_token_and_pooled(llm, smollm2_path):
    r = llm.create_embedding(["hello world", "a longer sentence to embed"])
    assert_shape(r, EMBEDDING)
    json.dumps(r)
    # SmolLM2's GGUF declares no pooling: one vector per token, as llama.cpp's pooling_type none
    n0, n1 = (len(llm.tokenize(t.encode())) for t in ["hello world", "a longer sentence to embed"])
    assert [len(d["embedding"]) for d in r["data"]] == [n0, n1]
    assert r["usage"]["prompt_tokens"] == n0 + n1
    assert all(len(v) == llm.n_embd() and type(v[0]) is float for d in r["data"] for v in d["embedding"])
    per_token = np.array(r["data"][1]["embedding"])
    with Llama(smollm2_path, n_ctx=256, embedding=True, pooling_type=1, verbose=False) as mean_llm:
        pooled = mean_llm.embed("a longer sentence to embed")
        np.testing.assert_allclose(pooled, per_token.mean(0), rtol=1e-4, atol=1e-5)
        unit = mean_llm.embed("a longer sentence to embed", normalize=True)
        assert np.linalg.norm(unit) == pytest.approx(1.0, abs=1e-5)
        assert len(mean_llm.embed(["x", "y z"])) == 2
    with Llama(smollm2_path, n_ctx=256, pooling_type="last", verbose=False) as last_llm:
        np.testing.assert_allclose(last_llm.embed("a longer sentence to embed"), per_token[-1], rtol=1e-4, atol=1e-5)


def test_constructor_keywords_and_errors(smollm2_path, tmp_path):
    with Llama(smollm2_path, n_ctx=128, n_gpu_layers=-1, use_mmap=True, flash_attn=True, n_threads=1,
               n_threads_batch=2, type_k=1, type_v=1, chat_format="chatml", verbose=False) as m:
        assert m.n_ctx() == 128
        r = m.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=3)
        assert r["choices"][0]["message"]["role"] == "assistant"
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ValueError, match="does not exist") as e:
        Llama(str(missing))
    assert isinstance(e.value, OxillamaError)
    with pytest.raises(InvalidArgumentError, match="unknown keyword"):
        Llama(smollm2_path, n_gpu_layer=1)
    with pytest.raises(InvalidArgumentError, match="chat_format"):
        Llama(smollm2_path, n_ctx=64, chat_format="no-such-format")
    with pytest.raises(LoraError, match="adapter.gguf"):       # a missing adapter file is named
        Llama(smollm2_path, n_ctx=64, lora_path="adapter.gguf")
    with pytest.raises(InvalidArgumentError, match="type_k"):
        Llama(smollm2_path, n_ctx=64, type_k=1, type_v=0)
