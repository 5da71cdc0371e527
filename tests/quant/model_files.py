"""A small F16 llama-shaped GGUF and an importance matrix for it, made from a fixed seed.

Rows of 256 and 512 values (so every K-quant applies), 8 layers (so llama.cpp's "first eighth"
and "use more bits" layer rules pick some layers and not others), grouped KV heads (n_gqa 4,
which moves attn_v in the IQ4 and Q2_K mixes), an untied output matrix, and the byte-level
tokenizer of the tiny test models. Weights have per-row scales over three decades and a few
outliers, as trained weights do. make_goldens_quantize.py and test_quantize_file.py share it.
"""
from __future__ import annotations

import os

import numpy as np

from oxillama.gguf import GGUFFile, GGUFWriter
from oxillama.quant.imatrix import ImportanceMatrix

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_SOURCE = os.path.join(os.path.dirname(HERE), "models", "data", "llama.gguf")
SEED = 32
N_LAYER, N_EMBD, N_FF, N_HEAD, N_HEAD_KV = 8, 256, 512, 8, 2


def _rows(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= np.exp(rng.uniform(-4, 2, size=(rows, 1))).astype(np.float32) * np.float32(0.05)
    x[rng.random((rows, cols)) < 0.01] *= 8
    x[rng.random((rows, cols)) < 0.002] = 0   # exact zeros (and so sometimes all-zero groups)
    return x


def make_f16_llama(path: str, *, n_layer: int = N_LAYER, n_embd: int = N_EMBD, n_ff: int = N_FF,
                   n_head: int = N_HEAD, n_head_kv: int = N_HEAD_KV) -> str:
    """Write the model to path (if it is not there yet) and return path. The defaults make the
    test model; the benchmark asks for a ~1 GB one."""
    if os.path.exists(path):
        return path
    N_LAYER, N_EMBD, N_FF, N_HEAD, N_HEAD_KV = n_layer, n_embd, n_ff, n_head, n_head_kv  # noqa: N806
    rng = np.random.default_rng(SEED)
    head_dim = N_EMBD // N_HEAD
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("general.name", "oxillama-quantize-test")
    w.add_metadata("general.file_type", 1)
    w.add_metadata("llama.context_length", 256)
    w.add_metadata("llama.embedding_length", N_EMBD)
    w.add_metadata("llama.block_count", N_LAYER)
    w.add_metadata("llama.feed_forward_length", N_FF)
    w.add_metadata("llama.attention.head_count", N_HEAD)
    w.add_metadata("llama.attention.head_count_kv", N_HEAD_KV)
    w.add_metadata("llama.rope.dimension_count", head_dim)
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5)
    with GGUFFile(TOKENIZER_SOURCE) as src:
        n_vocab = len(src.metadata["tokenizer.ggml.tokens"])
        w.add_metadata_from(src, exclude=[k for k in src.metadata if not k.startswith("tokenizer.")])
    w.add_metadata("llama.vocab_size", n_vocab)
    f16 = np.float16
    w.add_tensor("token_embd.weight", _rows(rng, n_vocab, N_EMBD).astype(f16))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", _rows(rng, N_EMBD, N_EMBD).astype(f16))
        w.add_tensor(p + "attn_k.weight", _rows(rng, N_HEAD_KV * head_dim, N_EMBD).astype(f16))
        w.add_tensor(p + "attn_v.weight", _rows(rng, N_HEAD_KV * head_dim, N_EMBD).astype(f16))
        w.add_tensor(p + "attn_output.weight", _rows(rng, N_EMBD, N_EMBD).astype(f16))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
        w.add_tensor(p + "ffn_gate.weight", _rows(rng, N_FF, N_EMBD).astype(f16))
        w.add_tensor(p + "ffn_up.weight", _rows(rng, N_FF, N_EMBD).astype(f16))
        w.add_tensor(p + "ffn_down.weight", _rows(rng, N_EMBD, N_FF).astype(f16))
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
    w.add_tensor("output.weight", _rows(rng, n_vocab, N_EMBD).astype(f16))
    w.write()
    return path


def make_imatrix(path: str) -> str:
    """An importance matrix for make_f16_llama's model: positive sums of x^2 with uneven columns."""
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(SEED + 1)
    imx = ImportanceMatrix(datasets=["synthetic"], chunk_count=4, chunk_size=512)
    for i in range(N_LAYER):
        for name, cols in (("attn_q", N_EMBD), ("attn_k", N_EMBD), ("attn_v", N_EMBD), ("attn_output", N_EMBD),
                           ("ffn_gate", N_EMBD), ("ffn_up", N_EMBD), ("ffn_down", N_FF)):
            imx.sums[f"blk.{i}.{name}.weight"] = (np.exp(rng.normal(0, 1.5, size=(1, cols))) * 2048).astype(np.float32)
            imx.counts[f"blk.{i}.{name}.weight"] = np.array([2048], dtype=np.int64)
    imx.sums["output.weight"] = (np.exp(rng.normal(0, 1, size=(1, N_EMBD))) * 2048).astype(np.float32)
    imx.counts["output.weight"] = np.array([2048], dtype=np.int64)
    imx.save(path)
    return path
