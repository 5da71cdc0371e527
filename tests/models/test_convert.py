"""The Hugging Face -> GGUF converter on numpy state dicts (no torch needed)."""
import os

import numpy as np
import pytest

from oxillama.convert import convert_state_dict, permute_rope_rows
from oxillama.errors import InvalidArgumentError, ModelError, UnsupportedArchitectureError
from oxillama.gguf import GGUFFile
from oxillama.runtime import InferenceEngine

N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB = 32, 4, 2, 8, 64, 300


def rope_halves(x, pos, base=10000.0):
    """transformers' rotate-half RoPE of one head (head_dim,)."""
    d = x.shape[0]
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = pos * inv
    x1, x2 = x[:d // 2], x[d // 2:]
    return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)])


def rope_pairs(x, pos, base=10000.0):
    """ggml's normal-mode RoPE of one head: adjacent pairs (2i, 2i+1) rotate together."""
    d = x.shape[0]
    ang = pos * base ** (-np.arange(0, d, 2) / d)
    out = x.copy()
    out[0::2] = x[0::2] * np.cos(ang) - x[1::2] * np.sin(ang)
    out[1::2] = x[0::2] * np.sin(ang) + x[1::2] * np.cos(ang)
    return out


def test_permuted_rows_make_pair_rope_equal_half_rope():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N_HEAD * HEAD_DIM, N_EMBD))
    x = rng.standard_normal(N_EMBD)
    wp = permute_rope_rows(w, N_HEAD)
    for pos in (0, 1, 7, 100):
        q = (w @ x).reshape(N_HEAD, HEAD_DIM)
        qp = (wp @ x).reshape(N_HEAD, HEAD_DIM)
        for h in range(N_HEAD):
            a, b = rope_halves(q[h], pos), rope_pairs(qp[h], pos)
            np.testing.assert_allclose(permute_rope_rows(a[:, None], 1)[:, 0], b, atol=1e-12)
            # attention scores are invariant: the same permutation on Q and K
            np.testing.assert_allclose(a @ rope_halves(q[(h + 1) % N_HEAD], pos + 3),
                                       b @ rope_pairs(qp[(h + 1) % N_HEAD], pos + 3), atol=1e-10)


def llama_state(rng, n_layer=2, *, tied=False, gemma2=False, qkv_bias=False):
    def m(r, c):
        return (rng.standard_normal((r, c)) / np.sqrt(c)).astype(np.float32)
    sd = {"model.embed_tokens.weight": rng.standard_normal((N_VOCAB, N_EMBD)).astype(np.float32),
          "model.norm.weight": rng.standard_normal(N_EMBD).astype(np.float32)}
    for il in range(n_layer):
        p = f"model.layers.{il}."
        sd.update({
            p + "input_layernorm.weight": rng.standard_normal(N_EMBD).astype(np.float32),
            p + "self_attn.q_proj.weight": m(N_HEAD * HEAD_DIM, N_EMBD),
            p + "self_attn.k_proj.weight": m(N_HEAD_KV * HEAD_DIM, N_EMBD),
            p + "self_attn.v_proj.weight": m(N_HEAD_KV * HEAD_DIM, N_EMBD),
            p + "self_attn.o_proj.weight": m(N_EMBD, N_HEAD * HEAD_DIM),
            p + "post_attention_layernorm.weight": rng.standard_normal(N_EMBD).astype(np.float32),
            p + "mlp.gate_proj.weight": m(N_FF, N_EMBD), p + "mlp.up_proj.weight": m(N_FF, N_EMBD),
            p + "mlp.down_proj.weight": m(N_EMBD, N_FF),
        })
        if qkv_bias:
            for k, n in (("q", N_HEAD), ("k", N_HEAD_KV), ("v", N_HEAD_KV)):
                sd[p + f"self_attn.{k}_proj.bias"] = rng.standard_normal(n * HEAD_DIM).astype(np.float32)
        if gemma2:
            sd[p + "pre_feedforward_layernorm.weight"] = rng.standard_normal(N_EMBD).astype(np.float32)
            sd[p + "post_feedforward_layernorm.weight"] = rng.standard_normal(N_EMBD).astype(np.float32)
    if not tied:
        sd["lm_head.weight"] = m(N_VOCAB, N_EMBD)
    return sd


def config(model_type, **kw):
    return {"model_type": model_type, "vocab_size": N_VOCAB, "hidden_size": N_EMBD, "intermediate_size": N_FF,
            "num_hidden_layers": 2, "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV,
            "head_dim": HEAD_DIM, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, **kw}


def test_llama_conversion_permutes_qk_and_writes_hparams(tmp_path):
    sd = llama_state(np.random.default_rng(1), qkv_bias=True)
    cfg = config("llama", rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                        "beta_fast": 16.0}, rope_theta=5e5)
    path = convert_state_dict(sd, cfg, tmp_path / "m.gguf")
    with GGUFFile(path) as g:
        md, t = g.metadata, g.tensors
        assert md["general.architecture"] == "llama"
        assert md["llama.block_count"] == 2 and md["llama.attention.head_count_kv"] == N_HEAD_KV
        assert md["llama.rope.freq_base"] == 5e5
        assert md["llama.rope.scaling.type"] == "yarn" and md["llama.rope.scaling.factor"] == 4.0
        assert md["llama.rope.scaling.original_context_length"] == 32
        assert md["llama.rope.scaling.yarn_beta_fast"] == 16.0
        q = sd["model.layers.1.self_attn.q_proj.weight"]
        np.testing.assert_array_equal(t["blk.1.attn_q.weight"].numpy(), permute_rope_rows(q, N_HEAD))
        k = sd["model.layers.1.self_attn.k_proj.bias"]
        np.testing.assert_array_equal(t["blk.1.attn_k.bias"].numpy(), permute_rope_rows(k, N_HEAD_KV))
        v = sd["model.layers.1.self_attn.v_proj.weight"]   # V is not rotated: unchanged
        np.testing.assert_array_equal(t["blk.1.attn_v.weight"].numpy(), v)
        assert t["output.weight"].qtype == "F32"


def test_gemma2_norms_tied_output_and_local_global_keys(tmp_path):
    sd = llama_state(np.random.default_rng(2), n_layer=4, tied=True, gemma2=True)
    cfg = config("gemma2", num_hidden_layers=4, sliding_window=16, query_pre_attn_scalar=32,
                 attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True,
                 layer_types=["sliding_attention", "full_attention"] * 2)
    path = convert_state_dict(sd, cfg, tmp_path / "g.gguf")
    with GGUFFile(path) as g:
        md, t = g.metadata, g.tensors
        assert "output.weight" not in t
        for hf, gg in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "post_attention_norm"),
                       ("pre_feedforward_layernorm", "ffn_norm"), ("post_feedforward_layernorm", "post_ffw_norm")):
            np.testing.assert_allclose(t[f"blk.3.{gg}.weight"].numpy(), sd[f"model.layers.3.{hf}.weight"] + 1)
        np.testing.assert_allclose(t["output_norm.weight"].numpy(), sd["model.norm.weight"] + 1)
        q = sd["model.layers.0.self_attn.q_proj.weight"]     # NeoX RoPE: no permutation
        np.testing.assert_array_equal(t["blk.0.attn_q.weight"].numpy(), q)
        assert md["gemma2.attention.sliding_window"] == 16
        assert md["gemma2.attention.sliding_window_pattern"] == 2
        assert md["gemma2.attn_logit_softcapping"] == 50.0 and md["gemma2.final_logit_softcapping"] == 30.0
        assert md["gemma2.attention.scale"] == pytest.approx(32 ** -0.5)


def test_q8_0_output_keeps_vectors_f32_and_loads(tmp_path):
    sd = llama_state(np.random.default_rng(3))
    path = convert_state_dict(sd, config("qwen2"), tmp_path / "q.gguf", outtype="q8_0")
    with GGUFFile(path) as g:
        assert g.metadata["general.file_type"] == 7
        assert g.tensors["blk.0.ffn_up.weight"].qtype == "Q8_0"
        assert g.tensors["blk.0.attn_norm.weight"].qtype == "F32"
    with InferenceEngine.from_gguf(path, n_ctx=16, n_threads=1) as e:
        logits = e.forward([1, 2, 3])
        assert logits.shape == (N_VOCAB,) and np.all(np.isfinite(logits))
        # the minimal tokenizer makes the file self-describing
        ids = e.tokenize("the test", add_special=False)
        assert e.detokenize(ids) == "the test"


def test_unsupported_model_type_lists_supported(tmp_path):
    with pytest.raises(UnsupportedArchitectureError, match="gemma2.*starcoder2|starcoder2"):
        convert_state_dict({}, config("mamba"), tmp_path / "x.gguf")


@pytest.mark.parametrize("bad,match", [
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "longrope"),
    ({"model_type": "cohere", "use_qk_norm": True, "layer_norm_eps": 1e-5}, "use_qk_norm"),
])
def test_unsupported_features_are_refused(tmp_path, bad, match):
    cfg = {**config("llama"), **bad}
    with pytest.raises(ModelError, match=match):
        convert_state_dict(llama_state(np.random.default_rng(4)), cfg, tmp_path / "x.gguf")


def test_unknown_tensor_and_bad_outtype(tmp_path):
    sd = llama_state(np.random.default_rng(5))
    sd["model.layers.0.self_attn.mystery.weight"] = np.zeros((4, 4), np.float32)
    with pytest.raises(ModelError, match="mystery"):
        convert_state_dict(sd, config("llama"), tmp_path / "x.gguf")
    with pytest.raises(InvalidArgumentError, match="outtype"):
        convert_state_dict(sd, config("llama"), tmp_path / "x.gguf", outtype="q4_7")


def test_cli_reports_a_folder_without_config(tmp_path, capsys):
    from oxillama.convert.__main__ import main
    assert main([str(tmp_path), str(tmp_path / "out.gguf")]) == 1
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "out.gguf").exists()


def test_llama3_rope_scaling_becomes_rope_freqs(tmp_path):
    rope = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    path = convert_state_dict(llama_state(np.random.default_rng(6)), config("llama", rope_parameters=rope),
                              tmp_path / "l3.gguf")
    with GGUFFile(path) as g:
        assert "llama.rope.scaling.type" not in g.metadata
        ff = g.tensors["rope_freqs.weight"].numpy()
    # head_dim 8: wavelengths 2 pi * 10000^(i/4) = 6.3, 62.8, 628, 6283 -> kept, blended, divided, divided
    assert ff.shape == (HEAD_DIM // 2,)
    assert ff[0] == 1.0 and ff[2] == ff[3] == 8.0
    s = (64 / (2 * np.pi * 10.0) - 1.0) / 3.0
    assert ff[1] == pytest.approx(1 / ((1 - s) / 8.0 + s), rel=1e-6)


@pytest.mark.parametrize("name", ["llama3", "gemma3", "phi3"])
def test_committed_files_read_back_with_the_gguf_package(name):
    """The reference reader (PyPI gguf) sees llama.cpp's types: UINT32 hyper-parameters, F32 tensors."""
    gguf = pytest.importorskip("gguf")
    path = os.path.join(os.path.dirname(__file__), "data", f"{name}.gguf")
    r = gguf.GGUFReader(path)
    arch = "llama" if name == "llama3" else name
    for key in ("block_count", "attention.head_count_kv", "context_length"):
        assert r.fields[f"{arch}.{key}"].types == [gguf.GGUFValueType.UINT32]
    assert r.fields[f"{arch}.rope.freq_base"].types == [gguf.GGUFValueType.FLOAT32]
    with GGUFFile(path) as ours:
        assert {t.name for t in r.tensors} == set(ours.tensors)
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in r.tensors)
