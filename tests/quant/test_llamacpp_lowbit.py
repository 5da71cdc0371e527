"""Second opinion from llama.cpp itself (skipped without llama-cpp-python): a small F16 llama model quantized by
llama_model_quantize to Q1_0, TQ1_0 and TQ2_0 holds, for every matrix of that type, exactly the bytes
oxillama's quantize gives for the same F16 values. (llama-cpp-python 0.3.36 refuses to write NVFP4 files:
that type is checked against gguf.quants' decoder and a NumPy copy of ggml's quantizer in test_lowbit_fp4.py.)"""
from pathlib import Path

import numpy as np
import pytest

from oxillama.gguf import GGUFFile, GGUFWriter
from oxillama.quant import quantize

llama_cpp = pytest.importorskip("llama_cpp")

DATA = Path(__file__).parent.parent / "models" / "data"
N_EMBD, N_FF = 256, 512


def _write_f16_model(path):
    rng = np.random.default_rng(0)
    with GGUFFile(DATA / "llama.gguf") as src:
        n_vocab = src.metadata["llama.vocab_size"]
        w = GGUFWriter(path)
        w.add_metadata_from(src, exclude=[k for k in src.metadata if k.startswith("llama.") and k != "llama.rope.freq_base"])
    for key, value in (("vocab_size", n_vocab), ("context_length", 256), ("embedding_length", N_EMBD),
                       ("block_count", 1), ("feed_forward_length", N_FF), ("attention.head_count", 4),
                       ("attention.head_count_kv", 4), ("rope.dimension_count", 64)):
        w.add_metadata(f"llama.{key}", value, type="UINT32")
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5, type="FLOAT32")

    def f16(name, rows, cols):
        W = rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-4, 1, size=(rows, 1)))
        w.add_tensor(name, W.astype(np.float16))

    f16("token_embd.weight", n_vocab, N_EMBD)
    for name, rows, cols in (("attn_q", N_EMBD, N_EMBD), ("attn_k", N_EMBD, N_EMBD), ("attn_v", N_EMBD, N_EMBD),
                             ("attn_output", N_EMBD, N_EMBD), ("ffn_gate", N_FF, N_EMBD), ("ffn_up", N_FF, N_EMBD),
                             ("ffn_down", N_EMBD, N_FF)):
        f16(f"blk.0.{name}.weight", rows, cols)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(N_EMBD, np.float32))
    f16("output.weight", n_vocab, N_EMBD)
    w.write()


@pytest.mark.parametrize("qtype", ["Q1_0", "TQ1_0", "TQ2_0"])
def test_llama_cpp_quantizer_writes_our_bytes(qtype, tmp_path):
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}", None)
    if ftype is None:
        pytest.skip(f"this llama-cpp-python has no {qtype}")
    src, dst = tmp_path / "f16.gguf", tmp_path / f"{qtype}.gguf"
    _write_f16_model(src)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) == 0
    checked = 0
    with GGUFFile(src) as f, GGUFFile(dst) as q:
        for name, t in q.tensors.items():
            if t.qtype != qtype:
                continue
            x = f.tensors[name].data.view(np.float16).astype(np.float32)
            assert np.array_equal(quantize(x, qtype), t.data), name
            checked += 1
    assert checked >= 7
