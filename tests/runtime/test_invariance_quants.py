"""The invariant (test_invariance.py) for a model of each family of the low-bit quant types: Q1_0 and the
ternary TQ1_0 (1-bit/ternary), MXFP4 and NVFP4 (FP4), IQ2_XXS, IQ3_S and IQ1_M (i-quants), Q4_K, Q6_K and
IQ4_XS (the types of Q4_K_M and IQ4_XS files), IQ4_NL. The tiny test
models are too narrow for 128/256-value blocks, so each case writes a llama model of n_embd 256 with every
matrix of that type: quantized from random weights, or for the i-quants (no quantizer) random blocks,
as a model file from llama-quantize holds them. Exact comparisons only."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from test_invariance import assert_same, check_batched, check_call_shapes, chunked_logits, prefill_logits, tokens_for

from oxillama import InferenceEngine
from oxillama.gguf import GGUFFile, GGUFWriter

# tests/quant/helpers.py (random i-quant blocks) by path: tests/ is not a package
_spec = importlib.util.spec_from_file_location("quant_helpers", Path(__file__).parent.parent / "quant" / "helpers.py")
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
weights_bytes = _helpers.weights_bytes

DATA = Path(__file__).parent.parent / "models" / "data"
# + Q4_K and Q6_K (Q5_K shares Q4_K's kernel), IQ4_XS and IQ4_NL, which the AVX-512 VNNI tier runs sixteen rows
# at a time in every call shape, from the repacked copy or from file rows (csrc/x86/avx512vnni/quants_kx16_vnni.c,
# quants_iqx16_vnni.c)
TYPES = ["Q1_0", "TQ1_0", "MXFP4", "NVFP4", "IQ2_XXS", "IQ3_S", "IQ1_M", "Q4_K", "Q6_K", "IQ4_XS", "IQ4_NL"]
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 256, 512, 2, 4, 2
N_TOKENS = 80


def write_model(path, qtype, seed=0):
    rng = np.random.default_rng(seed)
    head_dim = N_EMBD // N_HEAD
    with GGUFFile(DATA / "llama.gguf") as src:
        n_vocab = src.metadata["llama.vocab_size"]
        w = GGUFWriter(path)
        w.add_metadata_from(src, exclude=[k for k in src.metadata
                                          if k.startswith("llama.") and k != "llama.rope.freq_base"])
    for key, value in (("vocab_size", n_vocab), ("context_length", 256), ("embedding_length", N_EMBD),
                       ("block_count", N_LAYER), ("feed_forward_length", N_FF), ("attention.head_count", N_HEAD),
                       ("attention.head_count_kv", N_HEAD_KV), ("attention.key_length", head_dim),
                       ("attention.value_length", head_dim), ("rope.dimension_count", head_dim)):
        w.add_metadata(f"llama.{key}", value, type="UINT32")
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5, type="FLOAT32")

    def matrix(name, rows, cols):
        W = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        w.add_tensor(name, weights_bytes(W, qtype, rng), qtype=qtype, shape=(rows, cols))

    matrix("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        for name, rows, cols in (("attn_q", N_EMBD, N_EMBD), ("attn_k", N_HEAD_KV * head_dim, N_EMBD),
                                 ("attn_v", N_HEAD_KV * head_dim, N_EMBD), ("attn_output", N_EMBD, N_EMBD),
                                 ("ffn_gate", N_FF, N_EMBD), ("ffn_up", N_FF, N_EMBD), ("ffn_down", N_EMBD, N_FF)):
            matrix(f"blk.{i}.{name}.weight", rows, cols)
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ones(N_EMBD, np.float32))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    matrix("output.weight", n_vocab, N_EMBD)
    w.write()


@pytest.fixture(scope="module", params=TYPES)
def quant_model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("quants") / f"llama-{request.param}.gguf"
    write_model(path, request.param)
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2) as e:
        yield e


def test_logits_are_finite_and_do_not_depend_on_the_call_shape(quant_model):
    toks, ref = check_call_shapes(quant_model, N_TOKENS)
    assert np.isfinite(ref).all() and ref.std() > 0
    check_batched(quant_model, toks, ref)


def test_logits_do_not_depend_on_the_thread_count(quant_model):
    toks = tokens_for(quant_model, N_TOKENS)
    ref = prefill_logits(quant_model, toks)
    with InferenceEngine.from_gguf(quant_model.gguf.path, n_ctx=256, n_threads=1) as one:
        assert_same(prefill_logits(one, toks), ref, "1 thread against 2 (prefill)")
        assert_same(chunked_logits(one, toks, 1), ref, "1 thread against 2 (decode)")
