"""Every supported architecture against Hugging Face transformers.

The tiny random models in data/ (made by make_tiny_models.py: converted to GGUF by oxillama.convert,
goldens from transformers' float32 eager attention) carry each family's distinguishing features:
GQA, sliding windows shorter than the 32-token sequence, gemma2/gemma3 local/global layers,
soft-capping, Q/K norms, biases, partial and scaled RoPE (linear, YaRN, Llama 3 frequency factors),
tied embeddings; ALiBi (bloom, 6 heads), learned positions (gpt2), parallel residuals with one or two
norms (falcon, gptneox, stablelm-par), post-norms without pre-norms (olmo2), granite's multipliers,
NoPE layers (smollm3), fused QKV layouts (bloom, gptneox, falcon, internlm2). torch is not needed here. Tolerances are relative to the spread (std) of the golden logits.
"""
import os

import numpy as np
import pytest

from oxillama.errors import InvalidArgumentError, UnsupportedArchitectureError
from oxillama.gguf import GGUFFile, GGUFWriter
from oxillama.models import ARCHITECTURES
from oxillama.runtime import InferenceEngine

DATA = os.path.join(os.path.dirname(__file__), "data")
ARCHS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "starcoder2", "command-r",
         "stablelm", "gptneox", "bloom", "falcon", "gpt2", "olmo2", "granite", "smollm3", "exaone", "internlm2"]
# test model -> the GGUF architecture it is converted to (llama.cpp converts Mistral as llama)
MODELS = {**{a: a for a in ARCHS}, "mistral": "llama", "llama3": "llama",   # llama3: RoPE via rope_freqs
          "stablelm-par": "stablelm",    # StableLM-2 12B's parallel block and per-head Q/K LayerNorms
          "falcon40b": "falcon",         # Falcon-40B's KV groups and two norms
          "phi3-longrope": "phi3"}       # Phi-3.5 / Phi-4-mini LongRoPE: at n_ctx 64 past its 16, the long factors

# max |ours - transformers| / std(transformers logits)
F32_TOL = 1e-5        # F32 weights, F32 KV cache: float activations throughout (measured 1.2-3.6e-6;
                      # an RMS-norm epsilon 10x off scores ~3.5e-5)
F16_KV_TOL = 3e-3     # F32 weights, the default F16 KV cache: K/V rounded to 11 bits (measured 1.2e-4-1.3e-3)
F16_WEIGHTS_TOL = 6e-3   # F16 weights (measured 2.7e-3)
Q8_0_TOL = 0.1        # Q8_0 weights with activations quantized to 8 bits (measured 0.075)


def golden(name: str):
    g = np.load(os.path.join(DATA, f"{name}.npz"))
    return g["tokens"], g["logits"]


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(out - ref).max() / ref.std())


@pytest.mark.parametrize("name", MODELS)
def test_prefill_logits_match_transformers(name):
    tokens, ref = golden(name)
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_ctx=64, n_threads=2, kv_type="f32") as e:
        assert e.config.arch == MODELS[name]
        out = e.forward(tokens, all_logits=True)
    assert out.shape == ref.shape
    assert rel_err(out, ref) < F32_TOL, f"{name}: max diff {np.abs(out - ref).max():.3g}, std {ref.std():.3g}"
    np.testing.assert_array_equal(out.argmax(1), ref.argmax(1))


@pytest.mark.parametrize("name", MODELS)
def test_chunked_prefill_then_decode_matches_transformers(name):
    """Small prefill chunks then one token at a time through the default F16 cache: the decode path,
    and sliding windows that slide over cached positions, give the same logits."""
    tokens, ref = golden(name)
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_ctx=64, n_batch=5, n_threads=2) as e:
        first = e.forward(tokens[:12], all_logits=True)      # chunks of 5, 5, 2
        rest = [e.forward(tokens[i:i + 1]) for i in range(12, len(tokens))]
        assert e.n_past == len(tokens)
    out = np.concatenate([first, np.stack(rest)])
    assert rel_err(out, ref) < F16_KV_TOL, f"{name}: max diff {np.abs(out - ref).max():.3g}, std {ref.std():.3g}"
    # top-1 may only differ where transformers' two best logits are closer than the tolerance
    top2 = np.sort(ref, axis=1)[:, -2:]
    ambiguous = top2[:, 1] - top2[:, 0] < F16_KV_TOL * ref.std()
    assert np.all((out.argmax(1) == ref.argmax(1)) | ambiguous)


@pytest.mark.parametrize("name,variant,tol,min_top1", [
    ("qwen3", "f16", F16_WEIGHTS_TOL, 1.0),
    ("llama", "q8_0", Q8_0_TOL, 0.9),
])
def test_quantized_weights_stay_close(name, variant, tol, min_top1):
    tokens, ref = golden(name)
    path = os.path.join(DATA, f"{name}.{variant}.gguf")
    with GGUFFile(path) as g:   # the weights really are in that type
        assert g.tensors["blk.0.attn_q.weight"].qtype == variant.upper()
    with InferenceEngine.from_gguf(path, n_ctx=64, n_threads=2, kv_type="f32") as e:
        out = e.forward(tokens, all_logits=True)
    assert rel_err(out, ref) < tol
    assert np.mean(out.argmax(1) == ref.argmax(1)) >= min_top1


def test_longrope_runs_the_short_factors_within_the_original_context():
    """Phi-3.5's LongRoPE: a context within the trained original one (16 here) runs rope_factors_short, a longer
    one rope_factors_long (as llama.cpp picks them by n_ctx; transformers by the sequence's length), both with the
    attention factor on Q and K."""
    g = np.load(os.path.join(DATA, "phi3-longrope.npz"))
    tokens, short, long_ = g["tokens"], g["logits_short"], g["logits"]
    path = os.path.join(DATA, "phi3-longrope.gguf")
    with InferenceEngine.from_gguf(path, n_ctx=16, n_threads=2, kv_type="f32") as e:
        assert e.model.long_rope is False
        out = e.forward(tokens[:16], all_logits=True)
    assert rel_err(out, short) < F32_TOL
    assert rel_err(long_[:16], short) > 0.1    # the two factor sets really differ on these positions
    with InferenceEngine.from_gguf(path, n_ctx=64, n_threads=2, kv_type="f32") as e:
        assert e.model.long_rope is True
        with pytest.raises(InvalidArgumentError, match="LongRoPE"):   # its Model cannot serve a short context
            InferenceEngine(e.model, n_ctx=16)


# the recurrent and hybrid families (test_ssm.py, test_hybrid.py check them against transformers and llama.cpp)
RECURRENT_ARCHS = ["mamba2", "granitehybrid", "lfm2", "lfm2moe", "qwen3next", "qwen35", "qwen35moe", "nemotron_h"]


def test_every_listed_architecture_is_supported():
    assert set(ARCHS) <= set(ARCHITECTURES)
    assert set(RECURRENT_ARCHS) <= set(ARCHITECTURES)


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    src = os.path.join(DATA, "llama.gguf")
    path = tmp_path / "mamba.gguf"
    with GGUFFile(src) as g:
        w = GGUFWriter(path)
        w.add_metadata("general.architecture", "mamba")
        w.add_metadata_from(g, exclude=["general.architecture"])
        for t in g.tensors.values():
            w.add_tensor_from(t)
        w.write()
    with pytest.raises(UnsupportedArchitectureError) as exc:
        InferenceEngine.from_gguf(path)
    msg = str(exc.value)
    assert "'mamba'" in msg
    for arch in ARCHS + RECURRENT_ARCHS:
        assert arch in msg


# Decode attention against the prefill path over the same cache: equal bit for bit by design (the logits
# at a position depend only on the tokens before it, whatever the call shape).


@pytest.mark.parametrize("name", ["llama", "gemma3", "bloom"])
@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_decode_after_a_long_prompt_matches_the_prefill_path(name, kv_type):
    """1,000 cached positions: more cache chunks than threads, GQA groups, for gemma3 sliding windows
    that have left the first chunks behind, for bloom ALiBi's distance penalty across every chunk."""
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_ctx=1024, n_threads=2,
                                   kv_type=kv_type) as e:
        tokens = [(7 + 31 * i) % e.n_vocab for i in range(1000)]
        whole = e.forward(tokens, all_logits=True)[-4:]
        e.reset()
        e.forward(tokens[:-4])
        stepped = np.stack([e.forward(tokens[i:i + 1]) for i in range(len(tokens) - 4, len(tokens))])
    assert np.array_equal(stepped, whole), f"max |decode - prefill| / std {rel_err(stepped, whole):.3g}"


def test_a_tensor_the_forward_does_not_run_is_reported(tmp_path, caplog):
    """A file carrying a tensor its architecture never reads (llama.cpp refuses such a file) loads with a warning
    naming it, and Model.unused_tensors lists it: a forward that ignores weights must not be silent."""
    src = os.path.join(DATA, "llama.gguf")
    path = tmp_path / "extra.gguf"
    with GGUFFile(src) as g:
        w = GGUFWriter(path)
        w.add_metadata_from(g)
        for t in g.tensors.values():
            w.add_tensor_from(t)
        w.add_tensor("blk.1.attn_mystery.weight", np.ones((4, 64), np.float32))
        w.write()
    with caplog.at_level("WARNING", logger="oxillama"):
        with InferenceEngine.from_gguf(path, n_ctx=64) as e:
            assert e.model.unused_tensors == ["blk.1.attn_mystery.weight"]
    assert "blk.1.attn_mystery.weight" in caplog.text and "not used" in caplog.text
    with InferenceEngine.from_gguf(src, n_ctx=64) as e:
        assert e.model.unused_tensors == []
