"""LFM2 (short convolutions + attention, with a sliding window, with experts: lfm2moe), Qwen3-Next and Qwen3.5
(gated DeltaNet + gated attention, with experts: qwen3next, qwen35moe) against transformers and llama.cpp, through
the engine, and their bad files.

The tiny models are written at test time (tiny_hybrid.py); the reference logits were computed once by
make_hybrid_goldens.py from the same weights (transformers in float32; llama.cpp 0.3.36 on the GGUF files, F32 and
Q8_0). The forward runs here through the C plan directly (ForwardContext with a recurrent-state pool), over a
prompt of 150 tokens fed in chunks of 64 (crossing chunks, KV pages and the conv state).
"""
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import _core
from oxillama.errors import ModelError
from oxillama.gguf import GGUFFile
from oxillama.runtime.model import Model

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
import tiny_hybrid  # noqa: E402
from prompt_reuse import fresh_and_reused  # noqa: E402  tests/runtime/prompt_reuse.py

GOLDENS = Path(__file__).parent / "data" / "hybrid_goldens.npz"
# float32 everywhere on both sides; what is left is summation order (transformers vs llama.cpp: 4.8e-5)
TOL_F32 = 2e-4
PREFILL_CHUNK = 64
# Q8_0 weights and activations, relative to the logits' largest magnitude (~45 here); achieved: max 0.057,
# median row max 0.021, 96% of argmaxes kept
TOL_Q8_MAX, TOL_Q8_MEDIAN, Q8_ARGMAX_AGREE = 0.1, 0.04, 0.9
TOL_Q8_P90_MOE, Q8_ARGMAX_AGREE_MOE = 0.12, 0.75   # qwen3next: see test_qwen3next_quantized_stays_close


class Rig:
    """A model's plan with a KV cache, a recurrent-state pool and a forward context: one sequence at a time."""

    def __init__(self, path, *, n_ctx=256, n_threads=1, n_slots=4, kv_dtype=np.float32):
        self.model = Model(GGUFFile(path))
        plan = self.plan = self.model.plan
        k = np.zeros((plan.n_kv_layer, plan.n_head_kv, n_ctx, plan.head_dim), kv_dtype)
        self.kv = _core.KVBuffers(k, np.zeros_like(k))
        # NaN: a slot the forward did not clear or fill would poison the logits
        self.state = _core.StateBuffers(np.full((n_slots, plan.state_floats), np.nan, np.float32))
        self.ctx = _core.ForwardContext(plan, self.kv, n_ctx, n_threads, state=self.state)
        self.n_vocab = plan.n_vocab

    def logits(self, tokens, chunk=None, slot=0, pos0=0):
        """Every position's logits of tokens fed at pos0.. in chunks of `chunk` (whole by default)."""
        tokens = np.asarray(tokens, np.int32)
        chunk = chunk or len(tokens)
        out = []
        for i in range(0, len(tokens), chunk):
            part = np.ascontiguousarray(tokens[i:i + chunk])
            lg = np.zeros(len(part) * self.n_vocab, np.float32)
            self.ctx.run(part, pos0 + i, lg, all_logits=True, state_slot=slot)
            out.append(lg.reshape(len(part), self.n_vocab))
        return np.concatenate(out)


def expect_model_error_naming(key, write, tmp_path, overrides, drop, reshape):
    """The bad files' harness of every family: a tiny file written by `write` with the metadata overrides, the
    tensors in drop left out and those in reshape replaced is refused by the loader with a ModelError naming key."""
    path = write(tmp_path / "bad.gguf", overrides=overrides, drop=drop, reshape=reshape)
    with pytest.raises(ModelError, match=key.replace(".", r"\.")):
        Model(GGUFFile(path))


def expect_engine_matches_transformers(e, toks, want):
    """The engine's logits of toks fed in chunks of 50 against transformers' (want)."""
    got = np.concatenate([e.forward(toks[i:i + 50], all_logits=True) for i in range(0, len(toks), 50)])
    assert np.abs(got - want).max() < TOL_F32


def expect_scheduler_writes_what_generate_writes(e, toks):
    """Three prompts decoded together by a Scheduler (two at a time) give the tokens generate() gives each alone."""
    from oxillama import Scheduler
    prompts = [toks[:n].tolist() for n in (5, 40, 17)]
    with Scheduler(e, n_seq_max=2) as sched:
        outs = [h.result(120) for h in [sched.submit(p, max_tokens=6, temperature=0) for p in prompts]]
    for p, out in zip(prompts, outs):
        e.reset()
        assert out.tokens == e.generate(p, max_tokens=6, temperature=0).tokens


@pytest.fixture(scope="module")
def lfm2_path(tmp_path_factory):
    return tiny_hybrid.write_tiny_lfm2(tmp_path_factory.mktemp("lfm2") / "lfm2.gguf")


@pytest.fixture(scope="module")
def goldens():
    return np.load(GOLDENS)


def test_lfm2_reads_its_layer_kinds(lfm2_path):
    rig = Rig(lfm2_path)
    assert rig.plan.kinds == tiny_hybrid.LFM2_KINDS
    conv_layers = [il for il, k in enumerate(tiny_hybrid.LFM2_KINDS) if k == "shortconv"]
    # one conv state (n_embd, l_cache - 1) per conv layer, nothing for the attention layers
    assert [(il, name, shape) for il, name, shape, _ in rig.plan.state_layout] == \
        [(il, "conv", (tiny_hybrid.N_EMBD, tiny_hybrid.CONV_L - 1)) for il in conv_layers]
    assert rig.plan.state_floats == len(conv_layers) * tiny_hybrid.N_EMBD * (tiny_hybrid.CONV_L - 1)


def test_lfm2_matches_transformers(lfm2_path, goldens):
    toks = goldens["tokens"]
    got = Rig(lfm2_path).logits(toks, chunk=PREFILL_CHUNK)
    ref = goldens["lfm2/transformers"]
    assert np.abs(got - ref).max() < TOL_F32
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_lfm2_matches_llama_cpp(lfm2_path, goldens):
    if "lfm2/llama_cpp" not in goldens:
        pytest.skip("the goldens were made without llama-cpp-python")
    got = Rig(lfm2_path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    assert np.abs(got - goldens["lfm2/llama_cpp"]).max() < TOL_F32


@pytest.fixture(scope="module")
def lfm2_swa_path(tmp_path_factory):
    return tiny_hybrid.write_tiny_lfm2(tmp_path_factory.mktemp("lfm2swa") / "lfm2_swa.gguf",
                                       overrides={"lfm2.attention.sliding_window": tiny_hybrid.LFM2_SWA})


def test_lfm2_sliding_window_matches_transformers_and_llama_cpp(lfm2_swa_path, goldens):
    """lfm2.attention.sliding_window (24 here, the prompt 150): every attention layer sees the last 24 positions,
    as transformers does under the sliding-window mask and llama.cpp on the same file. Fed in chunks of 64 and
    then token by token, so the window slides over cached positions. The window matters: without it the logits
    are far off."""
    rig = Rig(lfm2_swa_path)
    attention = [il for il, kind in enumerate(tiny_hybrid.LFM2_KINDS) if kind == "attention"]
    assert [rig.model.arch.layer(il)["sliding_window"] for il in attention] == [tiny_hybrid.LFM2_SWA] * 2
    toks = goldens["tokens"]
    got = rig.logits(toks[:100], chunk=PREFILL_CHUNK)
    got = np.concatenate([got] + [rig.logits(toks[i:i + 1], pos0=i) for i in range(100, len(toks))])
    ref = goldens["lfm2_swa/transformers"]
    assert np.abs(got - ref).max() < TOL_F32
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    if "lfm2_swa/llama_cpp" in goldens:   # its first 64 positions (40 past the window)
        ref = goldens["lfm2_swa/llama_cpp"]
        assert np.abs(got[:len(ref)] - ref).max() < TOL_F32
    assert np.abs(got - goldens["lfm2/transformers"]).max() > 100 * TOL_F32


def test_lfm2_the_conv_state_matters(lfm2_path, goldens):
    """A forward that lost the state between chunks (a fresh sequence at every chunk) is visibly wrong: the
    parity above can fail."""
    toks = goldens["tokens"][:128]
    rig = Rig(lfm2_path)
    good = rig.logits(toks, chunk=64)
    rig.logits(toks[:64])
    rig.state.data[0] = 0.0   # the conv state of the first 64 tokens forgotten
    lost = rig.logits(toks[64:], pos0=64)
    assert np.array_equal(good[:64], rig.logits(toks[:64]))
    assert np.abs(lost - good[64:]).max() > 100 * TOL_F32


def test_lfm2_quantized_stays_close(tmp_path, goldens):
    path = tiny_hybrid.write_tiny_lfm2(tmp_path / "q8.gguf", qtype="Q8_0")
    got = Rig(path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens["lfm2/transformers"]
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() < TOL_Q8_MAX * scale
    assert np.median(np.abs(got - ref).max(-1)) < TOL_Q8_MEDIAN * scale
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= Q8_ARGMAX_AGREE


def test_lfm2_needs_a_state_pool(lfm2_path):
    rig = Rig(lfm2_path)
    with pytest.raises(ModelError, match="state pool"):
        _core.ForwardContext(rig.plan, rig.kv, 16, 1)
    with pytest.raises(ModelError, match="slot 9"):
        rig.ctx.run(np.array([1, 2], np.int32), 0, np.zeros(rig.n_vocab, np.float32), state_slot=9)


HCKV = "lfm2.attention.head_count_kv"
BAD_FILES = [
    # the layer-kind list: too short, kinds that disagree with the tensors, two KV head counts
    ({HCKV: np.array([0, 0, 2], np.int32)}, (), {}, HCKV),
    ({HCKV: np.array([0, 2, 2, 0, 2, 0], np.int32)}, (), {}, HCKV),
    ({HCKV: np.array([0, 0, 2, 0, 1, 0], np.int32)}, (), {}, HCKV),
    ({HCKV: None}, (), {}, HCKV),
    # the conv kernel width
    ({"lfm2.shortconv.l_cache": None}, (), {}, "lfm2.shortconv.l_cache"),
    ({"lfm2.shortconv.l_cache": 4}, (), {}, "lfm2.shortconv.l_cache"),
    ({"lfm2.shortconv.l_cache": 1}, (), {}, "lfm2.shortconv.l_cache"),
    ({}, (), {"blk.3.shortconv.conv.weight": np.zeros((tiny_hybrid.N_EMBD, 5), np.float32)},
     "lfm2.shortconv.l_cache"),
    # a conv layer without its conv
    ({}, ("blk.1.shortconv.conv.weight",), {}, HCKV),
    ({}, ("token_embd_norm.weight",), {}, "token_embd_norm"),
    # bidirectional (embedding) files
    ({"lfm2.attention.causal": False}, (), {}, "lfm2.attention.causal"),
    ({}, (), {"dense_2_out.weight": np.zeros((32, tiny_hybrid.N_EMBD), np.float32)}, "dense_2_out"),
]


@pytest.mark.parametrize("overrides, drop, reshape, key", BAD_FILES)
def test_bad_lfm2_metadata_is_a_model_error_naming_the_key(tmp_path, overrides, drop, reshape, key):
    expect_model_error_naming(key, tiny_hybrid.write_tiny_lfm2, tmp_path, overrides, drop, reshape)


# ---- through the engine: the session's state slot, checkpoints, snapshots, the scheduler ----

@pytest.fixture(scope="module")
def lfm2(lfm2_path):
    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf(lfm2_path, n_ctx=256, n_threads=2, kv_type="f32") as e:
        yield e


def test_lfm2_engine_matches_transformers(lfm2, goldens):
    lfm2.reset()
    toks = goldens["tokens"]
    got = np.concatenate([lfm2.forward(toks[i:i + 50], all_logits=True) for i in range(0, len(toks), 50)])
    assert np.abs(got - goldens["lfm2/transformers"]).max() < TOL_F32


def test_lfm2_truncate_goes_back_through_checkpoints(lfm2, goldens):
    ids = goldens["tokens"][:90]
    lfm2.reset()
    ref = lfm2.forward(ids, all_logits=True)
    lfm2.reset()
    lfm2.forward(ids[:40])
    lfm2.checkpoint()
    lfm2.forward(ids[40:])
    for n in (70, 40, 25):
        lfm2.truncate(n)
        np.testing.assert_array_equal(lfm2.forward(ids[n:n + 3], all_logits=True), ref[n:n + 3])
        lfm2.truncate(n)


def test_lfm2_snapshot_resumes_token_for_token(lfm2, lfm2_path, goldens, tmp_path):
    from oxillama import InferenceEngine
    ids = goldens["tokens"][:40].tolist()
    lfm2.reset()
    full = lfm2.generate(ids, max_tokens=16, temperature=0).tokens
    lfm2.reset()
    first = lfm2.generate(ids, max_tokens=6, temperature=0).tokens
    lfm2.save(tmp_path / "s.oxl")
    with InferenceEngine.resume(tmp_path / "s.oxl", lfm2_path, n_threads=1) as r:
        rest = r.generate(None, max_tokens=10, temperature=0).tokens
    assert first + rest == full


def test_lfm2_scheduler_writes_what_generate_writes(lfm2, goldens):
    from oxillama import Scheduler
    prompts = [goldens["tokens"][:n].tolist() for n in (5, 40, 17, 64)]
    with Scheduler(lfm2, n_seq_max=3) as sched:
        outs = [h.result(120) for h in [sched.submit(p, max_tokens=8, temperature=0) for p in prompts]]
    for p, out in zip(prompts, outs):
        lfm2.reset()
        assert out.tokens == lfm2.generate(p, max_tokens=8, temperature=0).tokens


# ---- LFM2's chat template through the chat path ----

# LFM2.5-Instruct's template as llama.cpp ships it (models/templates/LFM2.5-Instruct.jinja): ChatML-like, the BOS
# first, an optional system turn, past assistant turns without their <think> part
LFM2_TEMPLATE = (Path(__file__).parent / "data" / "lfm2.5-instruct.jinja").read_text()


@pytest.fixture(scope="module")
def lfm2_chat_path(tmp_path_factory):
    return tiny_hybrid.write_tiny_lfm2(tmp_path_factory.mktemp("lfm2chat") / "lfm2-chat.gguf",
                                       vocab=tiny_hybrid.lfm2_chat_vocab(LFM2_TEMPLATE))


def test_lfm2_chat_template_renders_chatml(lfm2_chat_path):
    from oxillama import InferenceEngine
    from oxillama.openai.chat import chat_plan
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "<think>greet</think> hello"}, {"role": "user", "content": "again"},
                {"role": "assistant", "content": "<think>again?</think>yo"}, {"role": "user", "content": "bye"}]
    with InferenceEngine.from_gguf(lfm2_chat_path, n_ctx=128, n_threads=1) as e:
        plan = chat_plan(e.tokenizer, messages)
        # an earlier assistant turn loses its thinking; the last one keeps it
        assert plan.prompt == ("<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n"
                               "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                               "<|im_start|>user\nagain<|im_end|>\n"
                               "<|im_start|>assistant\n<think>again?</think>yo<|im_end|>\n"
                               "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")
        ids = e.tokenizer.apply_chat_template(messages, tokenize=True)
        specials = [e.tokenizer.encode(t, add_special=False, parse_special=True)
                    for t in ("<|startoftext|>", "<|im_start|>", "<|im_end|>")]
        assert all(len(s) == 1 for s in specials)
        assert ids[:2] == [specials[0][0], specials[1][0]] and ids.count(specials[2][0]) == 6


def test_lfm2_chat_completion_runs(lfm2_chat_path):
    from oxillama import Llama
    llm = Llama(lfm2_chat_path, n_ctx=128, n_threads=1, verbose=False)
    out = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["prompt_tokens"] == len(llm.tokenize(
        b"<|startoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True))
    llm.close()


# ---- Qwen3-Next ----

@pytest.fixture(scope="module")
def q3n_path(tmp_path_factory):
    return tiny_hybrid.write_tiny_qwen3next(tmp_path_factory.mktemp("qwen3next") / "qwen3next.gguf")


def test_qwen3next_reads_its_layer_kinds(q3n_path):
    rig = Rig(q3n_path)
    c = tiny_hybrid.Q3N
    assert rig.plan.kinds == tiny_hybrid.Q3N_KINDS
    conv_dim = 2 * c["n_k_heads"] * c["d_k"] + c["n_v_heads"] * c["d_v"]
    layout = [(il, name, shape) for il, name, shape, _ in rig.plan.state_layout]
    want = []
    for il, kind in enumerate(tiny_hybrid.Q3N_KINDS):
        if kind == "deltanet":
            want += [(il, "conv", (conv_dim, c["conv_l"] - 1)), (il, "delta", (c["n_v_heads"], c["d_v"], c["d_k"]))]
    assert layout == want


def test_qwen3next_matches_transformers(q3n_path, goldens):
    got = Rig(q3n_path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens["qwen3next/transformers"]
    assert np.abs(got - ref).max() < TOL_F32
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_qwen3next_matches_llama_cpp(q3n_path, goldens):
    if "qwen3next/llama_cpp" not in goldens:
        pytest.skip("the goldens were made without llama-cpp-python")
    got = Rig(q3n_path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    assert np.abs(got - goldens["qwen3next/llama_cpp"]).max() < TOL_F32


def test_qwen3next_the_delta_state_matters(q3n_path, goldens):
    """Forgetting the delta-rule state (not the conv's) between chunks is visibly wrong."""
    toks = goldens["tokens"][:128]
    rig = Rig(q3n_path)
    good = rig.logits(toks, chunk=64)
    rig.logits(toks[:64])
    for il, name, shape, off in rig.plan.state_layout:
        if name == "delta":
            rig.state.data[0, off:off + int(np.prod(shape))] = 0.0
    lost = rig.logits(toks[64:], pos0=64)
    assert np.abs(lost - good[64:]).max() > 100 * TOL_F32


def test_qwen3next_quantized_stays_close(tmp_path, goldens):
    """Q8_0 activations move the router's input: a few rows pick another expert (those differ by up to 45% of the
    logits' scale, ~4 here), the rest stay close. Achieved: median row max 3.2% of the scale, 90th percentile
    8.5%, 83% of argmaxes kept among these small, close logits."""
    path = tiny_hybrid.write_tiny_qwen3next(tmp_path / "q8.gguf", qtype="Q8_0")
    got = Rig(path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens["qwen3next/transformers"]
    scale = np.abs(ref).max()
    rows = np.abs(got - ref).max(-1)
    assert np.median(rows) < TOL_Q8_MEDIAN * scale
    assert np.percentile(rows, 90) < TOL_Q8_P90_MOE * scale
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= Q8_ARGMAX_AGREE_MOE


def test_qwen3next_through_the_engine(q3n_path, goldens, tmp_path):
    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf(q3n_path, n_ctx=256, n_threads=2, kv_type="f32") as e:
        toks = goldens["tokens"]
        expect_engine_matches_transformers(e, toks, goldens["qwen3next/transformers"])
        # a snapshot resumes token for token
        ids = toks[:40].tolist()
        e.reset()
        full = e.generate(ids, max_tokens=12, temperature=0).tokens
        e.reset()
        first = e.generate(ids, max_tokens=5, temperature=0).tokens
        e.save(tmp_path / "s.oxl")
        with InferenceEngine.resume(tmp_path / "s.oxl", q3n_path, n_threads=1) as r:
            assert first + r.generate(None, max_tokens=7, temperature=0).tokens == full
        expect_scheduler_writes_what_generate_writes(e, toks)


Q = "qwen3next."
Q3N_BAD = [
    ({Q + "attention.recurrent_layers": [True, True, True]}, (), {}, Q + "attention.recurrent_layers"),
    ({Q + "attention.recurrent_layers": [True, False, True, False]}, (), {}, Q + "attention.recurrent_layers"),
    ({Q + "attention.recurrent_layers": None, Q + "full_attention_interval": 2}, (), {}, Q + "full_attention_interval"),
    ({Q + "ssm.conv_kernel": 3}, (), {}, Q + "ssm.conv_kernel"),
    ({Q + "ssm.conv_kernel": None}, (), {}, Q + "ssm.conv_kernel"),
    ({Q + "ssm.state_size": 8}, (), {}, Q + "ssm.state_size"),
    ({Q + "ssm.group_count": 3}, (), {}, Q + "ssm.group_count"),
    ({Q + "ssm.time_step_rank": 2}, (), {}, Q + "ssm.time_step_rank"),
    ({Q + "ssm.inner_size": 96}, (), {}, Q + "ssm.inner_size"),
    ({}, (), {"blk.0.ssm_norm.weight": np.ones(8, np.float32)}, Q + "ssm.inner_size"),
    ({}, (), {"blk.1.ssm_in.weight": np.zeros((8, tiny_hybrid.N_EMBD), np.float32)}, "ssm_in"),
]


@pytest.mark.parametrize("overrides, drop, reshape, key", Q3N_BAD)
def test_bad_qwen3next_metadata_is_a_model_error_naming_the_key(tmp_path, overrides, drop, reshape, key):
    expect_model_error_naming(key, tiny_hybrid.write_tiny_qwen3next, tmp_path, overrides, drop, reshape)


def test_qwen3next_does_not_run_its_mtp_block(tmp_path, q3n_path, goldens):
    """A file with a multi-token-prediction block after the trunk (block_count counts it, nextn_predict_layers = 1)
    gives the trunk's logits bit for bit."""
    t = tiny_hybrid.qwen3next_gguf_tensors(tiny_hybrid.qwen3next_hf_tensors())
    mtp = {k.replace("blk.3.", "blk.4."): v for k, v in t.items() if k.startswith("blk.3.")}
    mtp["blk.4.nextn.eh_proj.weight"] = np.zeros((tiny_hybrid.N_EMBD, 2 * tiny_hybrid.N_EMBD), np.float32)
    path = tiny_hybrid.write_tiny_qwen3next(
        tmp_path / "mtp.gguf", reshape=mtp,
        overrides={"qwen3next.block_count": 5, "qwen3next.nextn_predict_layers": 1,
                   "qwen3next.attention.recurrent_layers": [True, True, True, False, False]})
    rig = Rig(path)
    assert rig.plan.n_layer == 4
    toks = goldens["tokens"][:40]
    np.testing.assert_array_equal(rig.logits(toks), Rig(q3n_path).logits(toks))


def test_lfm2_prompt_reuse_gives_the_fresh_text(lfm2, lfm2_path, goldens):
    """Prompts sharing prefixes with the session resume from the conv state's checkpoints and write what a fresh
    engine writes."""
    base = goldens["tokens"][:50].tolist()
    prompts = [base, base + [5, 6, 7], base[:30] + [9], base + [5, 6, 7, 8]]
    want, got, reused = fresh_and_reused(lfm2, lfm2_path, prompts, 10, kv_type="f32")
    assert got == want
    assert reused[1] > 0 and reused[3] > 0


# ---- LFM2-MoE: LFM2's blocks, a dense first block, then sigmoid-routed experts whose choice an expert bias moves ----

@pytest.fixture(scope="module")
def l2m_path(tmp_path_factory):
    return tiny_hybrid.write_tiny_lfm2moe(tmp_path_factory.mktemp("lfm2moe") / "lfm2moe.gguf")


def test_lfm2moe_reads_its_blocks(l2m_path):
    rig = Rig(l2m_path)
    assert rig.plan.kinds == tiny_hybrid.LFM2_KINDS
    arch = rig.model.arch
    assert arch.config.experts.gating == "sigmoid" and arch.config.experts.norm_topk
    ffn = [arch.layer(il) for il in range(len(tiny_hybrid.LFM2_KINDS))]
    assert [d["n_expert"] for d in ffn] == [0] + [tiny_hybrid.L2M["n_expert"]] * (len(ffn) - 1)
    assert ffn[0]["w_up"] is not None and all(d["w_up"] is None and d["sel_bias"] is not None for d in ffn[1:])


def test_lfm2moe_matches_transformers_and_llama_cpp(l2m_path, goldens):
    got = Rig(l2m_path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens["lfm2moe/transformers"]
    assert np.abs(got - ref).max() < TOL_F32
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    if "lfm2moe/llama_cpp" in goldens:   # its first 64 positions
        ref = goldens["lfm2moe/llama_cpp"]
        assert np.abs(got[:len(ref)] - ref).max() < TOL_F32


def test_lfm2moe_the_expert_bias_moves_the_choice(tmp_path, l2m_path, goldens):
    """Without its expert bias (zeros) the same file routes some rows elsewhere: far from the goldens, so the
    parity above needs the bias in the choice (and only there: weighting by it would be off as well)."""
    t = tiny_hybrid.lfm2moe_tensors()
    zero = {k: np.zeros_like(v) for k, v in t.items() if k.endswith("exp_probs_b.bias")}
    path = tiny_hybrid.write_tiny_lfm2moe(tmp_path / "nobias.gguf", reshape=zero)
    got = Rig(path).logits(goldens["tokens"][:64])
    assert np.abs(got - goldens["lfm2moe/transformers"][:64]).max() > 100 * TOL_F32


def test_lfm2moe_through_the_engine(l2m_path, goldens):
    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf(l2m_path, n_ctx=256, n_threads=2, kv_type="f32") as e:
        toks = goldens["tokens"]
        expect_engine_matches_transformers(e, toks, goldens["lfm2moe/transformers"])
        expect_scheduler_writes_what_generate_writes(e, toks)


L2 = "lfm2moe."
L2M_BAD = [
    ({L2 + "leading_dense_block_count": 2}, (), {}, L2 + "leading_dense_block_count"),
    ({L2 + "leading_dense_block_count": 0}, (), {}, L2 + "leading_dense_block_count"),
    ({L2 + "leading_dense_block_count": 6}, (), {}, L2 + "leading_dense_block_count"),
    ({L2 + "expert_count": None}, (), {}, L2 + "expert_count"),
    ({L2 + "expert_count": 6}, (), {}, L2 + "expert_count"),
    ({L2 + "expert_feed_forward_length": 16}, (), {}, L2 + "expert_feed_forward_length"),
    ({L2 + "expert_gating_func": 7}, (), {}, L2 + "expert_gating_func"),
    ({}, ("blk.3.exp_probs_b.bias",), {}, "blk.3.exp_probs_b.bias"),
    ({}, (), {"blk.2.exp_probs_b.bias": np.zeros(5, np.float32)}, "exp_probs_b"),
]


@pytest.mark.parametrize("overrides, drop, reshape, key", L2M_BAD)
def test_bad_lfm2moe_metadata_is_a_model_error_naming_the_key(tmp_path, overrides, drop, reshape, key):
    expect_model_error_naming(key, tiny_hybrid.write_tiny_lfm2moe, tmp_path, overrides, drop, reshape)


# ---- Qwen3.5 (qwen35, qwen35moe): Qwen3-Next's blocks, b and a from ssm_beta / ssm_alpha, value heads tiled ----

def test_qwen35_reads_its_layers(tmp_path):
    from oxillama.models.qwen35 import Qwen35
    path = tiny_hybrid.write_tiny_qwen35(tmp_path / "q35.gguf")
    rig = Rig(path)
    assert rig.plan.kinds == tiny_hybrid.Q3N_KINDS
    arch = rig.model.arch
    assert isinstance(arch, Qwen35) and arch.config.experts is None
    d = arch.layer(0)
    assert d["dn_heads_tiled"] and d["dn_w_ba"][2:] == (2 * tiny_hybrid.Q3N["n_v_heads"], tiny_hybrid.N_EMBD)


@pytest.mark.parametrize("name", ["qwen35", "qwen35moe"])
def test_qwen35_matches_transformers_and_llama_cpp(tmp_path, goldens, name):
    path = tiny_hybrid.write_tiny_qwen35(tmp_path / f"{name}.gguf", moe=name == "qwen35moe")
    got = Rig(path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens[f"{name}/transformers"]
    assert np.abs(got - ref).max() < TOL_F32
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    if f"{name}/llama_cpp" in goldens:   # its first 64 positions
        ref = goldens[f"{name}/llama_cpp"]
        assert np.abs(got[:len(ref)] - ref).max() < TOL_F32


def test_qwen35_the_tiled_value_heads_matter(tmp_path, goldens, monkeypatch):
    """Read as Qwen3-Next reads its heads (value head h on key head h / r, b and a grouped so), the same file is far
    off: the parity above needs the tiled order."""
    from oxillama.models.qwen35 import Qwen35
    path = tiny_hybrid.write_tiny_qwen35(tmp_path / "q35.gguf")
    monkeypatch.setattr(Qwen35, "heads_tiled", False)
    got = Rig(path).logits(goldens["tokens"][:64])
    assert np.abs(got - goldens["qwen35/transformers"][:64]).max() > 100 * TOL_F32


@pytest.mark.parametrize("qtypes", [{"ssm_beta.weight": "Q8_0", "ssm_alpha.weight": "Q8_0"},
                                    {"ssm_beta.weight": "Q8_0"}])
def test_qwen35_quantized_b_and_a(tmp_path, goldens, qtypes):
    """b and a quantized alike (their rows gathered as they are) or differently (both read as float32)."""
    path = tiny_hybrid.write_tiny_qwen35(tmp_path / "q35q.gguf", qtypes=qtypes)
    got = Rig(path).logits(goldens["tokens"], chunk=PREFILL_CHUNK)
    ref = goldens["qwen35/transformers"]
    scale = np.abs(ref).max()
    assert np.median(np.abs(got - ref).max(-1)) < TOL_Q8_MEDIAN * scale
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= Q8_ARGMAX_AGREE


def test_qwen35moe_through_the_engine(tmp_path, goldens):
    from oxillama import InferenceEngine
    path = tiny_hybrid.write_tiny_qwen35(tmp_path / "q35moe.gguf", moe=True)
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2, kv_type="f32") as e:
        toks = goldens["tokens"]
        expect_engine_matches_transformers(e, toks, goldens["qwen35moe/transformers"])
        expect_scheduler_writes_what_generate_writes(e, toks)


Q5 = "qwen35."
Q35_BAD = [
    ({}, ("blk.1.ssm_beta.weight",), {}, "ssm_beta"),
    ({}, (), {"blk.0.ssm_alpha.weight": np.zeros((2, tiny_hybrid.N_EMBD), np.float32)}, Q5 + "ssm.time_step_rank"),
    ({Q5 + "ssm.time_step_rank": 2}, (), {}, Q5 + "ssm.time_step_rank"),
    ({Q5 + "attention.recurrent_layers": [True, True, False, False]}, (), {}, Q5 + "attention.recurrent_layers"),
]


@pytest.mark.parametrize("overrides, drop, reshape, key", Q35_BAD)
def test_bad_qwen35_metadata_is_a_model_error_naming_the_key(tmp_path, overrides, drop, reshape, key):
    expect_model_error_naming(key, tiny_hybrid.write_tiny_qwen35, tmp_path, overrides, drop, reshape)


# ---- quantized files against llama.cpp on the same files ----

Q8_WRITERS = {"lfm2": tiny_hybrid.write_tiny_lfm2, "lfm2moe": tiny_hybrid.write_tiny_lfm2moe,
              "qwen3next": tiny_hybrid.write_tiny_qwen3next, "qwen35moe": tiny_hybrid.write_tiny_qwen35moe}
# relative to the std of llama.cpp's logits: both quantize weights and activations to Q8_0 and differ in the order
# of their float sums only, so most rows agree to ~1e-6; a router whose top choices were near a tie may flip on
# those last bits and move a row. Measured (median row, max row, top-1): lfm2 4.5e-7, 1.1e-2, 100%; lfm2moe 4.7e-7,
# 7.1e-7, 100%; qwen3next 2.4e-7, 0.105, 98.4%; qwen35moe 2.3e-7, 4.6e-7, 100%
Q8_LLAMA_CPP_MEDIAN = 1e-5
Q8_LLAMA_CPP_MAX = 0.25


@pytest.mark.parametrize("name", list(Q8_WRITERS))
def test_q8_0_files_match_llama_cpp(tmp_path, goldens, name):
    """Q8_0 weights on both sides (the norms, convs and routers F32, as llama.cpp's quantize keeps them): ours
    against llama.cpp 0.3.36's logits on the same file, the first 64 positions of the 150-token prompt."""
    import hashlib
    key = f"{name}/q8_0/llama_cpp"
    if key not in goldens:
        pytest.skip("the goldens were made without llama-cpp-python")
    path = Q8_WRITERS[name](tmp_path / f"{name}-q8.gguf", qtype="Q8_0")
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == str(goldens[f"{name}/q8_0/sha256"]), "the file drifted"
    ref = goldens[key]
    got = Rig(path).logits(goldens["tokens"][:len(ref)], chunk=PREFILL_CHUNK)
    rows = np.abs(got - ref).max(-1) / ref.std()
    assert np.median(rows) < Q8_LLAMA_CPP_MEDIAN, f"median row {np.median(rows):.2e}"
    assert rows.max() < Q8_LLAMA_CPP_MAX, f"max row {rows.max():.2e}"
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= Q8_ARGMAX_AGREE
