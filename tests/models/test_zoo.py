"""The dense families added with issue 31 (stablelm ... internlm2) beyond their transformers parity
(test_architectures.py): LoRA on their fused and separate projections, snapshots, the Scheduler, and the bad
files and settings they must refuse with a clear error."""
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine, Scheduler
from oxillama.errors import ContextOverflowError, ModelError
from oxillama.gguf import GGUFFile, GGUFWriter
from oxillama.lora import LoraAdapter

DATA = Path(__file__).parent / "data"

# one file per new mechanism: ALiBi, learned positions, parallel residual with two norms, per-head Q/K
# LayerNorms, post-norms only, granite's multipliers, NoPE layers, KV groups in a fused QKV
ZOO = ["bloom", "gpt2", "gptneox", "stablelm-par", "olmo2", "granite", "smollm3", "falcon40b"]
TOKENS = [5, 17, 42, 99, 5, 230, 77, 8, 150, 33, 12, 201, 64, 3]
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# the adapter applied beside W against W + s B A merged into an F32 file: only the sums' order differs
LORA_TOL = 1e-5


def path(name):
    return DATA / f"{name}.gguf"


def logits(engine, tokens=TOKENS):
    engine.reset()
    return engine.forward(tokens, all_logits=True)


def random_lora(gguf, rank, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in gguf.tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in PROJECTIONS and parts[3] == "weight":
            rows, cols = t.shape
            out[name] = (rng.standard_normal((rank, cols)).astype(np.float32) * 0.3 / np.sqrt(cols),
                         rng.standard_normal((rows, rank)).astype(np.float32) * 0.3)
    return out


def rewrite(src, dst, *, drop=(), replace=None, metadata=None):
    """A copy of a GGUF file without the `drop` tensors, with `replace` {name: array} and `metadata` {key: value}."""
    replace, metadata = replace or {}, metadata or {}
    with GGUFFile(src) as g:
        w = GGUFWriter(dst)
        w.add_metadata("general.architecture", g.architecture)
        w.add_metadata_from(g, exclude=["general.architecture", *metadata])
        for k, v in metadata.items():
            w.add_metadata(k, v)
        for name, t in g.tensors.items():
            if name in drop:
                continue
            if name in replace:
                w.add_tensor(name, replace[name], "F32")
            else:
                w.add_tensor_from(t)
        w.write()
    return dst


@pytest.mark.parametrize("name", ZOO)
def test_lora_equals_the_merged_weights(name, tmp_path):
    """An adapter on every projection (the fused QKV where the family has one) gives the logits of a file whose
    weights are W + scale * B A."""
    scale = 0.75 * 8 / 4
    with GGUFFile(path(name)) as g:
        tensors = random_lora(g, 4, seed=sum(map(ord, name)))
        merged = {k: (g.tensors[k].numpy().astype(np.float64) + scale * (b.astype(np.float64) @ a)).astype(np.float32)
                  for k, (a, b) in tensors.items()}
    assert any(".attn_qkv." in k for k in tensors) == (name in ("bloom", "gpt2", "gptneox", "falcon40b"))
    with InferenceEngine.from_gguf(path(name), n_ctx=64, kv_type="f32") as e:
        base = logits(e)
        e.add_lora(LoraAdapter(tensors, alpha=8, arch=e.config.arch), 0.75)
        got = logits(e)
    with InferenceEngine.from_gguf(rewrite(path(name), tmp_path / "merged.gguf", replace=merged), n_ctx=64,
                                   kv_type="f32") as e:
        want = logits(e)
    spread = want.max() - want.min()
    assert np.abs(got - want).max() <= LORA_TOL * spread
    assert np.abs(base - want).max() > 100 * LORA_TOL * spread   # the adapter mattered


@pytest.mark.parametrize("name", ZOO)
def test_snapshot_resumes_bit_for_bit(name):
    with InferenceEngine.from_gguf(path(name), n_ctx=64) as e:
        e.forward(TOKENS[:9])
        blob = e.snapshot()
        rest = [e.forward(TOKENS[i:i + 1]) for i in range(9, len(TOKENS))]
        e.reset()
        e.load_snapshot(blob)
        again = [e.forward(TOKENS[i:i + 1]) for i in range(9, len(TOKENS))]
    np.testing.assert_array_equal(np.stack(again), np.stack(rest))


@pytest.mark.parametrize("name", ["bloom", "gpt2", "falcon40b", "olmo2"])
def test_scheduler_batches_give_each_request_its_solo_tokens(name):
    prompts = [[5, 17, 42, 99], [230, 77, 8, 150, 33, 12], [64]]
    with InferenceEngine.from_gguf(path(name), n_ctx=64) as e:
        solo = [e.generate(p, max_tokens=6, temperature=0).tokens for p in prompts]
        with Scheduler(e, max_batch_tokens=64) as sched:
            handles = [sched.submit(p, max_tokens=6, temperature=0) for p in prompts]
            batched = [h.result(timeout=60).tokens for h in handles]
    assert batched == solo


def test_gpt2_context_stops_at_its_learned_positions(caplog):
    """n_ctx above the position table is cut to it (with a warning); the last position has an embedding and a
    token past it is a clear error."""
    with GGUFFile(path("gpt2")) as g:
        n_pos = g.tensors["position_embd.weight"].shape[0]
    with caplog.at_level("WARNING", logger="oxillama"):
        e = InferenceEngine.from_gguf(path("gpt2"), n_ctx=n_pos + 64)
    with e:
        assert e.n_ctx == n_pos and f"{n_pos} positions" in caplog.text
        toks = [7 + i % 200 for i in range(n_pos)]
        out = e.forward(toks, all_logits=True)
        assert np.isfinite(out).all()
        with pytest.raises(ContextOverflowError):
            e.forward([7])
        e.reset()   # the same logits from a prefill that stops one short, then the last position alone
        e.forward(toks[:-1])
        np.testing.assert_array_equal(e.forward(toks[-1:]), out[-1])


@pytest.mark.parametrize("name,drop", [("gpt2", "position_embd.weight"), ("bloom", "token_embd_norm.weight")])
def test_a_missing_family_tensor_is_named(name, drop, tmp_path):
    with pytest.raises(ModelError, match=drop.replace(".", r"\.")):
        InferenceEngine.from_gguf(rewrite(path(name), tmp_path / "bad.gguf", drop=[drop]))


def test_a_fused_qkv_bias_of_the_wrong_length_is_named(tmp_path):
    with GGUFFile(path("gptneox")) as g:
        n = g.tensors["blk.1.attn_qkv.bias"].shape[0]
    bad = rewrite(path("gptneox"), tmp_path / "bad.gguf", replace={"blk.1.attn_qkv.bias": np.zeros(n - 4, np.float32)})
    with pytest.raises(ModelError, match=r"blk\.1\.attn_qkv\.bias"):
        InferenceEngine.from_gguf(bad)


def test_a_non_bool_parallel_residual_flag_is_refused(tmp_path):
    bad = rewrite(path("gptneox"), tmp_path / "bad.gguf", metadata={"gptneox.use_parallel_residual": "yes"})
    with pytest.raises(ModelError, match="use_parallel_residual"):
        InferenceEngine.from_gguf(bad)


def test_bloom_alibi_slopes_are_ggml_s_for_any_head_count():
    """8 heads: 2^-1 .. 2^-8; 6 heads: the 4 of a power of two, then the odd powers of the next one's base."""
    from oxillama.models.bloom import alibi_slopes
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9), rtol=1e-7)
    np.testing.assert_allclose(alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3], rtol=1e-7)


ALL_ZOO = ["stablelm", "stablelm-par", "gptneox", "bloom", "falcon", "falcon40b", "gpt2", "olmo2", "granite",
           "smollm3", "exaone", "internlm2"]
REF_TOL = 1e-5   # max |C forward - float64 reference| / std, F32 weights and cache (the C sums in float32)


@pytest.mark.parametrize("name", ALL_ZOO)
def test_forward_matches_the_float64_reference(name):
    """A second oracle beside transformers: tests/runtime/reference.py, which reads the same plan spec."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
    from reference import reference_forward
    with InferenceEngine.from_gguf(path(name), n_ctx=64, kv_type="f32") as e:
        got = logits(e)
        ref = reference_forward(e.arch.build(), TOKENS)
    assert np.abs(got - ref).max() / ref.std() < REF_TOL
