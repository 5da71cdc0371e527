"""Recurrent architectures against Hugging Face transformers, and their metadata checked against their tensors.

Made by make_ssm_models.py in llama.cpp's GGUF layouts, with transformers' float32 logits for 80 tokens:
mamba2.gguf (3 Mamba-2 layers, 8 heads in 2 groups, d_state 16, conv kernel 4) and granitehybrid.gguf (Granite
4.0-H: Mamba-2, Mamba-2, attention (NoPE, GQA), Mamba-2 blocks, each with 4 experts (2 used) and a shared expert,
every Granite multiplier away from 1), bamba.gguf (BambaForCausalLM as llama.cpp converts it: granitehybrid with
RoPE over half of each head and a dense FFN) and nemotron_h.gguf (Nemotron-H: Mamba-2, MLP, attention blocks, one
mixer each). transformers runs the chunked SSD algorithm (chunks of 32), we run the recurrence token after token:
the sums differ in order only. torch is not needed here."""
import os

import numpy as np
import pytest

from oxillama.errors import ModelError
from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter
from oxillama.runtime import InferenceEngine

DATA = os.path.join(os.path.dirname(__file__), "data")
F32_TOL = 1e-5   # max |ours - transformers| / std(transformers): float32 throughout (measured 3.4e-6, 1.6e-6)
F32_TOL_BY_NAME = {"bamba": 2e-5}   # measured 1.2e-5, flat along the positions (2-5e-6 per row): summation order
F16_KV_TOL = 3e-3   # the default F16 KV cache of granitehybrid's attention block


def golden(name):
    g = np.load(os.path.join(DATA, f"{name}.npz"))
    return g["tokens"], g["logits"]


def rel_err(out, ref):
    return float(np.abs(out - ref).max() / ref.std())


ARCH = {"mamba2": "mamba2", "granitehybrid": "granitehybrid", "bamba": "granitehybrid", "nemotron_h": "nemotron_h"}


@pytest.mark.parametrize("name", ["mamba2", "granitehybrid", "bamba", "nemotron_h"])
def test_prefill_matches_transformers(name):
    tokens, ref = golden(name)
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_ctx=128, n_threads=2, kv_type="f32") as e:
        assert e.config.arch == ARCH[name] and e.plan.state_floats > 0
        out = e.forward(tokens, all_logits=True)
    tol = F32_TOL_BY_NAME.get(name, F32_TOL)
    assert rel_err(out, ref) < tol, f"max diff {np.abs(out - ref).max():.3g}, std {ref.std():.3g}"
    np.testing.assert_array_equal(out.argmax(1), ref.argmax(1))


@pytest.mark.parametrize("name", ["mamba2", "granitehybrid", "nemotron_h"])
def test_logits_match_llama_cpp_on_the_same_file(name):
    """llama.cpp's logits on these very files (data/ssm_llamacpp.npz, made by make_ssm_models.py llamacpp with
    llama-cpp-python 0.3.36 and an F32 KV cache; it is within 3.8e-6 of transformers there): ours as close as
    transformers'. Prefill in chunks of 16, the state carried across them."""
    import hashlib
    tokens, _ = golden(name)
    g = np.load(os.path.join(DATA, "ssm_llamacpp.npz"))
    path = os.path.join(DATA, f"{name}.gguf")
    with open(path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == str(g[f"{name}/sha256"]), "the file drifted from the goldens"
    ref = g[f"{name}/logits"]
    with InferenceEngine.from_gguf(path, n_ctx=128, n_batch=16, n_threads=2, kv_type="f32") as e:
        out = e.forward(tokens, all_logits=True)
    assert rel_err(out, ref) < F32_TOL, f"max diff {np.abs(out - ref).max():.3g}, std {ref.std():.3g}"
    np.testing.assert_array_equal(out.argmax(1), ref.argmax(1))


@pytest.mark.parametrize("name", ["mamba2", "granitehybrid", "bamba", "nemotron_h"])
def test_chunked_prefill_then_decode_matches_transformers(name):
    """Prefill chunks of 16 (the state carried across them), then one token at a time, the default KV cache."""
    tokens, ref = golden(name)
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_ctx=128, n_batch=16, n_threads=2) as e:
        first = e.forward(tokens[:50], all_logits=True)      # chunks of 16, 16, 16, 2
        rest = [e.forward(tokens[i:i + 1]) for i in range(50, len(tokens))]
    out = np.concatenate([first, np.stack(rest)])
    assert rel_err(out, ref) < F16_KV_TOL
    top2 = np.sort(ref, axis=1)[:, -2:]
    ambiguous = top2[:, 1] - top2[:, 0] < F16_KV_TOL * ref.std()
    assert np.all((out.argmax(1) == ref.argmax(1)) | ambiguous)


def test_granitehybrid_layers_follow_the_kind_list():
    with InferenceEngine.from_gguf(os.path.join(DATA, "granitehybrid.gguf"), n_ctx=64) as e:
        assert e.config.extra["kinds"] == ["mamba2", "mamba2", "attention", "mamba2"]
        assert [il for il, name, _, _ in e.plan.state_layout if name == "ssm"] == [0, 1, 3]
        assert (e.plan.n_head_kv, e.plan.head_dim) == (2, 16)


def test_bamba_is_granitehybrid_with_half_of_each_head_rotated():
    """Bamba as llama.cpp converts it: granitehybrid with RoPE (rope.scaling.finetuned), a dense FFN after every
    block, Q and K rows permuted for adjacent-pair RoPE, rope.dimension_count half of head_dim. transformers rotates
    the first half of each head in halves: the attention layer runs NeoX RoPE over the rows put back in
    transformers' order (the parity above). llama.cpp 0.3.36 reads the permuted rows as they are (adjacent pairs
    over the first n_rot rows): 1.3 x the logits' std off transformers on this file, top-1 equal at 68%."""
    with InferenceEngine.from_gguf(os.path.join(DATA, "bamba.gguf"), n_ctx=64) as e:
        arch = e.model.arch
        assert e.config.extra["kinds"] == ["mamba2", "mamba2", "attention", "mamba2"] and e.config.experts is None
        attn = arch.layer(2)
        assert attn["rope"]["mode"] == "neox" and attn["rope"]["n_rot"] == 8 and attn["w_up"] is not None
        q_file = arch.weight("blk.2.attn_q.weight")
        rows = np.frombuffer(attn["wq"][0], np.float32).reshape(64, 64)
        permuted = np.frombuffer(q_file[0], np.float32).reshape(64, 64)
        # head 0's transformers rows 0..7 are the file's rows 0, 2, .., 14; rows 8..15 the odd ones
        np.testing.assert_array_equal(rows[:8], permuted[0:16:2])
        np.testing.assert_array_equal(rows[8:16], permuted[1:16:2])


def test_mamba2_state_is_a_fixed_size():
    """The point of a recurrent model: its per-sequence state does not grow with the context."""
    with GGUFFile(os.path.join(DATA, "mamba2.gguf")) as g:
        md = g.metadata
        n_layer, d_conv = md["mamba2.block_count"], md["mamba2.ssm.conv_kernel"]
        d_inner, d_state = md["mamba2.ssm.inner_size"], md["mamba2.ssm.state_size"]
        n_group = md["mamba2.ssm.group_count"]
    conv_dim = d_inner + 2 * n_group * d_state
    with InferenceEngine.from_gguf(os.path.join(DATA, "mamba2.gguf"), n_ctx=128) as e:
        assert e.plan.state_floats == n_layer * ((d_conv - 1) * conv_dim + d_inner * d_state)
        assert e.recurrent.memory_bytes() == 4 * e.plan.state_floats


def rewrite(src, dst, changes):
    """A copy of `src` with `<arch>.<key>` metadata values replaced (UINT32, or an array of them)."""
    with GGUFFile(src) as f:
        w = GGUFWriter(dst)
        arch = f.architecture
        for key, value in f.metadata.items():
            if key[len(arch) + 1:] in changes:
                continue
            vtype, etype = f.metadata_types[key]
            w.add_metadata(key, value, (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
        for short, value in changes.items():
            if isinstance(value, list):
                w.add_metadata(f"{arch}.{short}", np.array(value, dtype=np.uint32),
                               (GGUFValueType.ARRAY, GGUFValueType.UINT32))
            else:
                w.add_metadata(f"{arch}.{short}", value, GGUFValueType.UINT32)
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()
    return str(dst)


@pytest.mark.parametrize("key,value", [
    ("ssm.state_size", 8),          # conv_dim and ssm_in rows disagree
    ("ssm.group_count", 4),         # ssm_norm has 2 groups
    ("ssm.group_count", 3),         # 8 heads are not a multiple of 3
    ("ssm.conv_kernel", 3),         # ssm_conv1d has 4 taps
    ("ssm.inner_size", 96),         # ssm_out has 128 columns
    ("ssm.time_step_rank", 6),      # 128 is not a multiple of 6
    ("ssm.time_step_rank", 16),     # ssm_a has 8 heads
    ("ssm.state_size", 0),
])
def test_mamba2_metadata_disagreeing_with_the_tensors_is_refused(tmp_path, key, value):
    path = rewrite(os.path.join(DATA, "mamba2.gguf"), tmp_path / "bad.gguf", {key: value})
    with pytest.raises(ModelError, match=key.replace(".", r"\.")):
        InferenceEngine.from_gguf(path, n_ctx=64)


@pytest.mark.parametrize("value", [
    [0, 0, 0, 0],          # block 2 has attention tensors
    [0, 2, 2, 0],          # block 1 has Mamba-2 tensors
    [0, 0, 2],             # one count short
    [0, 0, 2, 0, 0],       # one too many
])
def test_granitehybrid_layer_kinds_disagreeing_with_the_tensors_are_refused(tmp_path, value):
    path = rewrite(os.path.join(DATA, "granitehybrid.gguf"), tmp_path / "bad.gguf", {"attention.head_count_kv": value})
    with pytest.raises(ModelError, match=r"attention\.head_count_kv"):
        InferenceEngine.from_gguf(path, n_ctx=64)


def test_granitehybrid_ssm_metadata_is_checked_against_a_mamba_block(tmp_path):
    path = rewrite(os.path.join(DATA, "granitehybrid.gguf"), tmp_path / "bad.gguf", {"ssm.conv_kernel": 5})
    with pytest.raises(ModelError, match=r"ssm\.conv_kernel"):
        InferenceEngine.from_gguf(path, n_ctx=64)


def test_nemotron_h_blocks_follow_the_two_lists():
    """Mamba-2, MLP, attention, Mamba-2, MLP: one mixer per block, no FFN after Mamba-2 or attention; the MLP
    blocks (relu^2, biases) have no mixer."""
    with InferenceEngine.from_gguf(os.path.join(DATA, "nemotron_h.gguf"), n_ctx=64) as e:
        assert e.plan.kinds == ("mamba2", "ffn", "attention", "mamba2", "ffn")
        assert [il for il, name, _, _ in e.plan.state_layout if name == "ssm"] == [0, 3]
        arch = e.model.arch
        assert arch.layer(1)["act"] == "relu_sqr" and arch.layer(1)["b_up"] is not None
        assert arch.layer(2)["rope"]["mode"] == "none" and arch.layer(2).get("w_up") is None


@pytest.mark.parametrize("changes,key", [
    ({"attention.head_count_kv": [0, 0, 0, 0, 0]}, "attention.head_count_kv"),     # block 2 has attention
    ({"feed_forward_length": [0, 0, 0, 0, 96]}, "feed_forward_length"),             # block 1 is an MLP
    ({"feed_forward_length": [0, 96, 96, 0, 96]}, "feed_forward_length"),           # both for block 2
    ({"feed_forward_length": [0, 96, 0, 0]}, "feed_forward_length"),                # one short
    ({"feed_forward_length": [0, 64, 0, 0, 64]}, "feed_forward_length"),            # ffn_up has 96 rows
    ({"attention.key_length": 8}, "attention"),                                     # attn_q has 64 rows
    ({"ssm.conv_kernel": 3}, "ssm.conv_kernel"),
    ({"expert_count": 4}, "expert_count"),                                           # nemotron_h_moe: refused
])
def test_nemotron_h_metadata_disagreeing_with_the_tensors_is_refused(tmp_path, changes, key):
    path = rewrite(os.path.join(DATA, "nemotron_h.gguf"), tmp_path / "bad.gguf", changes)
    with pytest.raises(ModelError, match=key.replace(".", r"\.")):
        InferenceEngine.from_gguf(path, n_ctx=64)
