"""LoRA adapters applied in the C forward: against a float64 reference of W + scale * B A, stacked, removed,
per sequence in one batch, per call, and malformed adapter files."""
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import InvalidArgumentError, LoraError
from oxillama.gguf import GGUFWriter
from oxillama.lora import LoraAdapter
from oxillama.runtime.batch import SequencePool

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from reference import reference_forward  # noqa: E402  tests/runtime/reference.py

DATA = Path(__file__).parent.parent / "models" / "data"
TOKENS = [1, 17, 42, 99, 5, 230, 77, 8, 150, 33, 12, 201]
# the C forward (f32 accumulation) is ~2e-4 of the logits' spread from the float64 reference on these tiny
# models without any adapter; with one it must stay as close
REL_TOL = 5e-4
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def random_lora(engine, rank, seed, names=None, magnitude=0.3):
    """base tensor -> (A (rank, n_in), B (n_out, rank)) for every projection the model has"""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in engine.gguf.tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and \
                (parts[2] in PROJECTIONS or parts[2] == "attn_qkv") and (names is None or parts[2] in names):
            rows, cols = t.shape
            out[name] = (rng.standard_normal((rank, cols)).astype(np.float32) * magnitude / np.sqrt(cols),
                         rng.standard_normal((rows, rank)).astype(np.float32) * magnitude)
    return out


def write_adapter(path, tensors, *, alpha=None, arch="llama", qtype=None, general_type="adapter"):
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", arch)
    w.add_metadata("general.type", general_type)
    w.add_metadata("adapter.type", "lora")
    if alpha is not None:
        w.add_metadata("adapter.lora.alpha", float(alpha))
    for base, (a, b) in tensors.items():
        w.add_tensor(base + ".lora_a", a, qtype)
        w.add_tensor(base + ".lora_b", b, qtype)
    w.write()
    return path


@pytest.fixture(params=["llama.gguf", "phi3.gguf", "gemma3.gguf"])
def tiny(request):
    with InferenceEngine.from_gguf(DATA / request.param, n_ctx=64) as e:
        yield e


def logits(engine, tokens=TOKENS, **kw):
    engine.reset()
    return engine.forward(tokens, all_logits=True)


def test_adapter_matches_a_float64_reference_of_the_merged_weights(tiny, tmp_path):
    tensors = random_lora(tiny, 4, seed=1)
    adapter = LoraAdapter.from_gguf(write_adapter(tmp_path / "a.gguf", tensors, alpha=8, arch=tiny.config.arch))
    base_dev = np.abs(logits(tiny) - reference_forward(tiny.arch.build(), TOKENS)).max()
    tiny.add_lora(adapter, 0.75)
    got = logits(tiny)
    spec = tiny.arch.build()
    s = 0.75 * 8 / 4
    keys = {"attn_q": "wq", "attn_qkv": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
            "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down"}
    for base, (a, b) in tensors.items():
        _, il, proj, _ = base.split(".")
        layer = spec["layers"][int(il)]
        data, qtype, rows, cols = layer[keys[proj]]
        w = tiny.gguf.tensors[base].numpy().astype(np.float64) + s * (b.astype(np.float64) @ a.astype(np.float64))
        layer[keys[proj]] = (w.astype(np.float32).view(np.uint8).reshape(-1), 0, rows, cols)
    ref = reference_forward(spec, TOKENS)
    spread = ref.max() - ref.min()
    allowed = max(2 * base_dev, REL_TOL * spread)
    assert np.abs(got - ref).max() <= allowed
    tiny.clear_loras()
    assert np.abs(logits(tiny) - ref).max() > 10 * allowed   # the adapter mattered


def test_stacking_equals_one_adapter_of_the_concatenated_ranks(tmp_path):
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64) as e:
        t1, t2 = random_lora(e, 4, seed=2), random_lora(e, 4, seed=3)
        a1 = LoraAdapter(t1, alpha=4, arch="llama")
        a2 = LoraAdapter(t2, alpha=4, arch="llama")
        both = LoraAdapter({k: (np.concatenate([t1[k][0], t2[k][0]]), np.concatenate([t1[k][1], t2[k][1]], axis=1))
                            for k in t1}, alpha=8, arch="llama")
        e.add_lora(a1)
        e.add_lora(a2)
        stacked = logits(e)
        e.clear_loras()
        e.add_lora(both)
        np.testing.assert_allclose(logits(e), stacked, rtol=0, atol=1e-5 * (stacked.max() - stacked.min()))


def test_removing_every_adapter_or_scale_zero_is_bit_identical_to_the_base():
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64) as e:
        base = logits(e)
        a = LoraAdapter(random_lora(e, 4, seed=4), arch="llama")
        e.add_lora(a)
        assert not np.array_equal(logits(e), base)
        e.remove_lora(a)
        assert e.loras == []
        np.testing.assert_array_equal(logits(e), base)
        e.add_lora(a, 0.0)
        np.testing.assert_array_equal(logits(e), base)
        with pytest.raises(InvalidArgumentError, match="not one of the session's adapters"):
            e.remove_lora(LoraAdapter(random_lora(e, 2, seed=5), arch="llama"))


def test_sequences_with_different_adapters_share_one_step_each_equal_to_its_solo_run():
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64) as e:
        a = LoraAdapter(random_lora(e, 4, seed=6), arch="llama")
        b = LoraAdapter(random_lora(e, 8, seed=7, names=("attn_q", "ffn_down")), arch="llama")
        settings = [[], [(a, 1.0)], [(b, 0.5)], [(a, 0.3), (b, 1.2)]]
        prompts = [TOKENS, TOKENS[:7], TOKENS[2:], TOKENS[::-1]]
        solo = []
        for loras, p in zip(settings, prompts):
            pool = SequencePool(e, 1)
            s = pool.add()
            pool.set_loras(s, loras)
            solo.append(pool.step([(s, p, True)])[0].copy())
        pool = SequencePool(e, 4)
        seqs = [pool.add() for _ in settings]
        for s, loras in zip(seqs, settings):
            pool.set_loras(s, loras)
        out = pool.step([(s, p, True) for s, p in zip(seqs, prompts)])
        for got, want in zip(out, solo):
            np.testing.assert_array_equal(got, want)
        assert not np.array_equal(solo[0][-1], solo[1][-1])


def test_per_call_adapters_and_prefix_reuse(tmp_path):
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, seed=1) as e:
        a = LoraAdapter(random_lora(e, 4, seed=8, magnitude=2.0), arch="llama")
        plain = e.generate(TOKENS, max_tokens=8, temperature=0)
        adapted = e.generate(TOKENS, max_tokens=8, temperature=0, lora=[(a, 1.0)])
        assert e.loras == []                       # the call's adapters did not stay
        assert e.generate(TOKENS, max_tokens=8, temperature=0) == plain   # no K/V reused across adapters
        e.add_lora(a)
        again = e.generate(TOKENS, max_tokens=8, temperature=0)
        assert again == adapted and adapted.tokens != plain.tokens
        streamed = "".join(e.generate(TOKENS, max_tokens=8, temperature=0, stream=True, lora=[]))
        assert streamed == plain and e.loras == [(a, 1.0)]


def test_lora_path_keyword_loads_an_adapter(tmp_path):
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64) as e:
        tensors = random_lora(e, 2, seed=9)
    path = write_adapter(tmp_path / "a.gguf", tensors, alpha=2, qtype="F16")
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, lora_path=path, lora_scale=0.5) as e:
        (adapter, scale), = e.loras
        assert scale == 0.5 and adapter.rank == 2 and adapter.alpha == 2


@pytest.mark.parametrize("case", ["not_adapter", "wrong_arch", "rank_mismatch", "unknown_tensor", "missing_pair",
                                  "wrong_shape", "truncated", "empty", "not_gguf", "nan"])
def test_malformed_adapters_raise_lora_error(case, tmp_path):
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64) as e:
        tensors = random_lora(e, 4, seed=10)
        base = next(iter(tensors))
        kw = {"arch": "llama"}
        if case == "not_adapter":
            kw["general_type"] = "model"
        elif case == "wrong_arch":
            kw["arch"] = "gemma3"
        elif case == "rank_mismatch":
            a, b = tensors[base]
            tensors[base] = (a, b[:, :3])
        elif case == "unknown_tensor":
            tensors["blk.99.attn_q.weight"] = tensors[base]
        elif case == "wrong_shape":
            a, b = tensors[base]
            tensors[base] = (a[:, :-1], b)
        elif case == "nan":
            tensors[base][0][0, 0] = np.nan
        elif case == "empty":
            tensors = {}
        path = tmp_path / "bad.gguf"
        if case == "not_gguf":
            path.write_bytes(b"not a gguf file at all")
        else:
            write_adapter(path, tensors, **kw)
        if case == "missing_pair":
            w = GGUFWriter(path)
            w.add_metadata("general.architecture", "llama")
            w.add_metadata("general.type", "adapter")
            w.add_metadata("adapter.type", "lora")
            w.add_tensor(base + ".lora_a", tensors[base][0])
            w.write()
        if case == "truncated":
            data = path.read_bytes()
            path.write_bytes(data[:len(data) // 2])
        with pytest.raises(LoraError):
            e.add_lora(LoraAdapter.from_gguf(path))


def test_snapshots_record_the_adapters_and_resume_refuses_others(tmp_path):
    from oxillama.errors import SnapshotError
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, seed=3) as e:
        tensors = random_lora(e, 4, seed=11, magnitude=2.0)
    path = write_adapter(tmp_path / "a.gguf", tensors, alpha=4)
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, seed=3, lora_path=path, lora_scale=0.8) as e:
        whole = e.generate(TOKENS, max_tokens=12, temperature=0)
        e.reset()
        first = e.generate(TOKENS, max_tokens=6, temperature=0)
        e.save(tmp_path / "s.oxs")
    with pytest.raises(SnapshotError, match="LoRA adapters"):
        InferenceEngine.resume(tmp_path / "s.oxs", DATA / "llama.gguf")
    with pytest.raises(SnapshotError, match="LoRA adapters"):
        InferenceEngine.resume(tmp_path / "s.oxs", DATA / "llama.gguf", lora_path=path, lora_scale=0.5)
    with InferenceEngine.resume(tmp_path / "s.oxs", DATA / "llama.gguf", lora_path=path, lora_scale=0.8) as e:
        rest = e.generate(None, max_tokens=6, temperature=0)
        assert first.tokens + rest.tokens == whole.tokens


def test_scheduler_requests_with_different_adapters_equal_their_solo_generate():
    from oxillama import Scheduler
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, seed=5) as e:
        a = LoraAdapter(random_lora(e, 4, seed=12, magnitude=2.0), arch="llama")
        b = LoraAdapter(random_lora(e, 8, seed=13, magnitude=2.0), arch="llama")
        settings = [None, [(a, 1.0)], [(b, 0.7)], [(a, 0.5), (b, 1.0)]]
        solo = [e.generate(TOKENS, max_tokens=10, temperature=0, **({"lora": s} if s else {})) for s in settings]
        assert len({tuple(c.tokens) for c in solo}) > 1
        with Scheduler(e, n_seq_max=4) as sched:
            handles = [sched.submit(TOKENS, max_tokens=10, temperature=0, **({"lora": s} if s else {}))
                       for s in settings]
            got = [h.result(timeout=60) for h in handles]
        assert [c.tokens for c in got] == [c.tokens for c in solo]


def test_adapted_logits_do_not_depend_on_the_thread_count():
    """Each thread takes a share of an adapter's outputs: the floats must not depend on the split."""
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, n_threads=2) as two, \
            InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, n_threads=1) as one:
        a = LoraAdapter(random_lora(two, 8, seed=14), arch="llama")
        two.add_lora(a)
        one.add_lora(a)
        np.testing.assert_array_equal(logits(two), logits(one))
        two.reset()
        stepped = np.stack([two.forward([t]) for t in TOKENS])
        np.testing.assert_array_equal(stepped, logits(one))
