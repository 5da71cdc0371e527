"""InferenceEngine behaviour a user relies on: sessions, continuation, streaming, stops, errors."""
import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import ContextOverflowError, InvalidArgumentError, OxillamaError, SamplerError


def test_continuation_equals_one_long_generation(smollm2):
    whole = smollm2.generate("Once upon a time", max_tokens=24, temperature=0.9, seed=7)
    first = smollm2.generate("Once upon a time", max_tokens=12, temperature=0.9, seed=7)
    rest = smollm2.generate(None, max_tokens=12)
    assert whole.tokens == first.tokens + rest.tokens
    assert whole == first + rest


def test_same_seed_same_text_different_seed_differs(smollm2):
    a = smollm2.generate("My favourite food is", max_tokens=16, temperature=1.0, seed=1)
    b = smollm2.generate("My favourite food is", max_tokens=16, temperature=1.0, seed=1)
    c = smollm2.generate("My favourite food is", max_tokens=16, temperature=1.0, seed=2)
    assert a == b and a.tokens == b.tokens
    assert c.tokens != a.tokens


def test_stream_matches_non_stream_and_callback(smollm2):
    seen = []
    full = smollm2.generate("The sun is", max_tokens=20, temperature=0)
    pieces = list(smollm2.generate("The sun is", max_tokens=20, temperature=0, stream=True, callback=seen.append))
    assert "".join(pieces) == full == "".join(seen)
    assert len(pieces) > 1


def test_stream_stops_cleanly_on_break(smollm2):
    it = smollm2.generate("Count: one, two,", max_tokens=50, temperature=0, stream=True)
    for i, _ in enumerate(it):
        if i == 2:
            break
    it.close()
    assert smollm2.last_completion is not None and len(smollm2.last_completion.tokens) == 3
    # the session continues from where the stream was left
    more = smollm2.generate(None, max_tokens=3, temperature=0)
    assert len(more.tokens) == 3


def test_stop_string_cuts_text(smollm2):
    full = smollm2.generate("The capital of France is", max_tokens=12, temperature=0)
    assert "\n" in full
    cut = smollm2.generate("The capital of France is", max_tokens=12, temperature=0, stop=["\n"])
    assert cut == full[:full.index("\n")] and cut.finish_reason == "stop"
    alias = smollm2.generate("The capital of France is", max_new_tokens=12, do_sample=False, stop_strings="\n")
    assert alias == cut


def test_end_of_generation_token_ends(smollm2):
    prompt = smollm2.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}])
    out = smollm2.generate(prompt, max_tokens=200, temperature=0)
    assert out.finish_reason == "stop" and out.tokens[-1] in smollm2.tokenizer.eog_ids
    assert "<|im_end|>" not in out


def test_logprobs(smollm2):
    out = smollm2.generate("2 + 2 =", max_tokens=4, temperature=0, logprobs=5)
    assert len(out.logprobs) == len(out.tokens) == 4
    for tok, lp in zip(out.tokens, out.logprobs):
        assert len(lp) >= 5 and max(lp, key=lp.get) == tok   # greedy picks the most likely
        assert all(v <= 0 for v in lp.values())


def test_aliases_conflict(smollm2):
    with pytest.raises(SamplerError):
        smollm2.generate("x", max_tokens=2, temperature=0.5, temp=0.7)
    with pytest.raises(OxillamaError):
        smollm2.generate("x", max_tokens=2, max_new_tokens=3)
    with pytest.raises(InvalidArgumentError, match="unknown generate"):
        smollm2.generate("x", max_tokens=2, no_such_option=1)


def test_forward_truncate_and_reset(smollm2):
    smollm2.reset()
    ids = smollm2.tokenize("The quick brown fox jumps over the lazy dog")
    full = smollm2.forward(ids)
    smollm2.truncate(3)
    assert smollm2.n_past == 3
    again = smollm2.forward(ids[3:])
    assert np.array_equal(again, full)     # the logits depend only on the tokens before: bit for bit
    smollm2.reset()
    assert smollm2.n_past == 0 and smollm2.tokens == []


def test_chunked_prefill_equals_one_batch(smollm2_path):
    ids = list(range(100, 140))
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=64, n_batch=7) as small, \
            InferenceEngine.from_gguf(smollm2_path, n_ctx=64) as big:
        a = small.forward(ids, all_logits=True)
        b = big.forward(ids, all_logits=True)
    assert a.shape == (40, small.n_vocab)
    assert np.array_equal(a, b)           # chunking never changes a logit


def test_forward_refuses_a_cache_of_another_head_layout(smollm2):
    """The cache is head-major: one with the model's kv_dim but other head counts would be read wrongly."""
    from oxillama import _core
    from oxillama.runtime import ContiguousKVCache
    c = smollm2.config
    wrong = ContiguousKVCache(c.n_layer, 8, c.kv_dim, n_head_kv=1)   # SmolLM2 has 3 KV heads of 64
    with pytest.raises(OxillamaError, match="3 KV heads of 64"):
        _core.ForwardContext(smollm2.plan, wrong.buffers, 1, 1)


def test_f32_kv_cache_close_to_f16(smollm2_path):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=64, kv_type="f32") as e32, \
            InferenceEngine.from_gguf(smollm2_path, n_ctx=64, kv_type="f16") as e16:
        ids = e32.tokenize("Rain fell on the old stone bridge while the town slept and the river rose")
        a, b = e32.forward(ids, all_logits=True), e16.forward(ids, all_logits=True)
    assert e32.kv.k.dtype == np.float32 and e16.kv.k.dtype == np.float16
    # f16 rounding of K/V moves logits about as much as the 8-bit activations do
    assert np.median(np.abs(a - b).max(-1)) < 1.0   # measured: 0.6, the same as ours vs llama.cpp
    assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.8


def test_context_overflow(smollm2_path):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=16) as e:
        with pytest.raises(ContextOverflowError):
            e.forward(list(range(100, 120)))
        with pytest.raises(ContextOverflowError):
            e.generate("one two three four", max_tokens=20)
        e.reset()
        e.forward(list(range(100, 110)))
        with pytest.raises(ContextOverflowError):
            e.forward(list(range(100, 110)))
        assert e.n_past == 10     # a refused forward changes nothing


def test_bad_tokens_and_arguments(smollm2):
    with pytest.raises(InvalidArgumentError, match="outside the vocabulary"):
        smollm2.forward([smollm2.n_vocab])
    with pytest.raises(InvalidArgumentError):
        smollm2.forward([-1])
    with pytest.raises(InvalidArgumentError):
        smollm2.forward([])
    with pytest.raises(InvalidArgumentError):
        smollm2.generate("", max_tokens=2)
    smollm2.reset()
    with pytest.raises(InvalidArgumentError, match="continues a session"):
        smollm2.generate(None, max_tokens=2)


def test_n_ctx_zero_uses_trained_context_capped(smollm2_path):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=0) as e:
        assert e.n_ctx == min(8192, 4096)
        assert e.metadata["general.architecture"] == "llama"


def test_prompt_that_starts_with_bos_gets_one_bos(gemma3):
    bos = gemma3.tokenizer.bos_id
    out = gemma3.generate("<bos>The sky is", max_tokens=1, temperature=0)
    assert gemma3.tokens[:2] == [bos, gemma3.tokenize("The sky is", add_special=False)[0]]
    assert len(out.tokens) == 1


def test_cli_chat_template_file(smollm2_path, tmp_path, capsys):
    from oxillama.cli import main
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:")
    assert main(["run", "-m", smollm2_path, "--chat-template", str(template), "--temp", "0", "-n", "4",
                 "Is water wet?"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["run", "-m", smollm2_path, "--chat-template", str(tmp_path / "missing"), "x"]) == 1
