"""The mixture-of-experts families against Hugging Face transformers: tiny random checkpoints (data/hf_moe/, made
by make_moe_hf_goldens.py with transformers 5) converted inside the test by oxillama's converter, then

- the engine's logits against transformers' float32 logits, at the dense families' tolerance;
- the router's choices: for every token and MoE layer, the experts transformers picked (and their weights) are
  the ones the converted model's router picks, in the plain reference forward that reads the same plan spec
  as the C engine (whose logits test_moe.py holds to that reference at 1e-4: a different choice moves them by
  far more, see test_a_different_router_choice_would_show).

No torch needed."""
import json
import os
import sys

import numpy as np
import pytest

from oxillama.convert import convert_state_dict
from oxillama.gguf import GGUFFile
from oxillama.models import architecture_for
from oxillama.runtime import InferenceEngine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "runtime"))
from reference import reference_forward  # noqa: E402  tests/runtime/reference.py

HF_MOE = os.path.join(os.path.dirname(__file__), "data", "hf_moe")
NAMES = sorted(f[:-len(".config.json")] for f in os.listdir(HF_MOE) if f.endswith(".config.json"))
ARCH = {"qwen3moe": "qwen3moe", "qwen2moe": "qwen2moe", "olmoe": "olmoe", "mixtral": "llama", "gpt-oss": "gpt-oss",
        "phimoe": "phimoe", "deepseek_v2": "deepseek2", "deepseek_v2_groups": "deepseek2", "deepseek_v3": "deepseek2"}

F32_TOL = 1e-5        # max |ours - transformers| / std, as test_architectures.py's dense families
F16_KV_TOL = 3e-3     # through the default F16 KV cache, as test_architectures.py
ROUTER_WEIGHT_TOL = 1e-5   # transformers' float32 router weights against the float64 reference
TIE_GAP = 1e-6        # a k-th / (k+1)-th probability gap float32 rounding could flip; the goldens' are 2.5e-5 up


def load(name):
    with open(os.path.join(HF_MOE, f"{name}.config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return config, dict(np.load(os.path.join(HF_MOE, f"{name}.npz"))), np.load(os.path.join(HF_MOE, f"{name}.golden.npz"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_moe")
    out = {}
    for name in NAMES:
        config, state, _ = load(name)
        out[name] = convert_state_dict(state, config, d / f"{name}.gguf", outtype="f32", name=f"tiny-{name}")
    return out


def rel_err(out, ref):
    return float(np.abs(out - ref).max() / ref.std())


def test_every_moe_family_has_a_checkpoint():
    assert set(ARCH) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers(converted, name):
    _, _, g = load(name)
    with InferenceEngine.from_gguf(converted[name], n_ctx=64, n_threads=2, kv_type="f32") as e:
        assert e.config.arch == ARCH[name] and e.config.experts is not None
        out = e.forward(g["tokens"], all_logits=True)
    assert rel_err(out, g["logits"]) < F32_TOL, f"{name}: {rel_err(out, g['logits']):.3g}"
    np.testing.assert_array_equal(out.argmax(1), g["logits"].argmax(1))


@pytest.mark.parametrize("name", NAMES)
def test_chunked_prefill_then_decode_matches_transformers(converted, name):
    """Prefill chunks of 5 then one token at a time through the F16 cache: the expert phase with 1 to 5 rows."""
    _, _, g = load(name)
    toks, ref = g["tokens"], g["logits"]
    with InferenceEngine.from_gguf(converted[name], n_ctx=64, n_batch=5, n_threads=2) as e:
        first = e.forward(toks[:12], all_logits=True)
        rest = [e.forward(toks[i:i + 1]) for i in range(12, len(toks))]
    assert rel_err(np.concatenate([first, np.stack(rest)]), ref) < F16_KV_TOL


@pytest.mark.parametrize("name", NAMES)
def test_router_choices_match_transformers(converted, name):
    _, _, g = load(name)
    with GGUFFile(converted[name]) as f:
        spec = architecture_for(f).build()
        trace = []
        reference_forward(spec, g["tokens"], router_trace=trace)
    want_experts, want_weights = g["router_experts"], g["router_weights"]      # (n_layer, n_tokens, k)
    assert len(trace) == want_experts.shape[0]
    for il, (sel, w) in enumerate(trace):
        # the same experts in the same order (best first; transformers' topk sorts) with the same weights
        np.testing.assert_array_equal(sel, want_experts[il], err_msg=f"{name} layer {il}")
        np.testing.assert_allclose(w, want_weights[il], atol=ROUTER_WEIGHT_TOL, err_msg=f"{name} layer {il}")
    # the goldens route: many experts in use, and no choice is closer to a tie than the tolerance could blur
    assert len(np.unique(want_experts)) == spec["layers"][-1]["n_expert"]   # (deepseek: block 0 is dense)
    assert float(g["min_router_gap"]) > TIE_GAP


def test_hub_layout_with_one_matrix_per_expert_converts_the_same(converted, tmp_path):
    """Checkpoints on the hub hold one matrix per expert (qwen: mlp.experts.E.gate_proj; Mixtral:
    block_sparse_moe.experts.E.w1/w3/w2); converted, they give the same tensors as transformers 5's stacked ones."""
    for name, names in (("qwen2moe", ("mlp", "gate_proj", "up_proj", "down_proj")),
                        ("mixtral", ("block_sparse_moe", "w1", "w3", "w2"))):
        config, state, _ = load(name)
        hub = {}
        for k, v in state.items():
            if ".mlp.experts.gate_up_proj" in k:
                stem = k.replace(".mlp.experts.gate_up_proj", f".{names[0]}.experts")
                gate, up = np.split(v, 2, axis=1)
                for e in range(v.shape[0]):
                    hub[f"{stem}.{e}.{names[1]}.weight"], hub[f"{stem}.{e}.{names[2]}.weight"] = gate[e], up[e]
            elif ".mlp.experts.down_proj" in k:
                stem = k.replace(".mlp.experts.down_proj", f".{names[0]}.experts")
                for e in range(v.shape[0]):
                    hub[f"{stem}.{e}.{names[3]}.weight"] = v[e]
            else:
                hub[k.replace(".mlp.gate.", f".{names[0]}.gate.")] = v
        out = convert_state_dict(hub, config, tmp_path / f"{name}.gguf", outtype="f32")
        with GGUFFile(out) as got, GGUFFile(converted[name]) as want:
            assert set(got.tensors) == set(want.tensors)
            for t in want.tensors:
                assert np.array_equal(got.tensors[t].numpy(), want.tensors[t].numpy()), t


# gpt-oss as released keeps its experts in MXFP4: transformers' layout (value 2i in the low nibble of byte i, 2i + 1
# in the high one; an E8M0 scale byte per 32 values) repacked to ggml's by the converter
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def hf_mxfp4_dequantize(blocks, scales):
    """transformers' convert_moe_packed_tensors, in NumPy: (..., n_blocks, 16), (..., n_blocks) -> (..., cols)."""
    values = np.stack([FP4_VALUES[blocks & 0x0F], FP4_VALUES[blocks >> 4]], axis=-1).reshape(*blocks.shape[:-1], 32)
    return (values * np.exp2(scales.astype(np.float64) - 127)[..., None]).reshape(*blocks.shape[:-2], -1)


def test_mxfp4_experts_repack_to_the_values_transformers_reads():
    from oxillama.convert.hf import mxfp4_from_hf
    from oxillama.quant import dequantize
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, size=(3, 5, 4, 16), dtype=np.uint8)
    scales = rng.integers(110, 135, size=(3, 5, 4), dtype=np.uint8)
    raw = mxfp4_from_hf(blocks, scales)
    got = dequantize(raw.reshape(-1), "MXFP4", blocks.size * 2).reshape(3, 5, 128)
    np.testing.assert_array_equal(got, hf_mxfp4_dequantize(blocks, scales).astype(np.float32))


def test_gpt_oss_mxfp4_checkpoint_converts(converted, tmp_path):
    """The tiny gpt-oss with its experts as MXFP4 blocks and scales (made from its float experts): the converted
    file keeps them in MXFP4, gate and up split from gate_up's interleaved rows, byte for byte what quantizing
    the float file's experts gives, and runs exactly as that file does."""
    from oxillama.gguf import GGUFWriter
    from oxillama.quant import quantize
    config, state, g = load("gpt-oss")
    for k in [k for k in state if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        w = np.ascontiguousarray(state.pop(k).swapaxes(1, 2))           # (n_expert, rows, cols) as MXFP4 holds it
        q = quantize(w.reshape(-1), "MXFP4").reshape(*w.shape[:2], -1, 17)   # ggml's blocks ...
        values = np.stack([q[..., 1:] & 0x0F, q[..., 1:] >> 4], axis=-2).reshape(*q.shape[:-1], 32)
        state[k + "_blocks"] = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)   # ... as HF's
        state[k + "_scales"] = np.ascontiguousarray(q[..., 0])
    out = convert_state_dict(state, config, tmp_path / "gpt-oss-mxfp4.gguf", outtype="f32")
    requantized = tmp_path / "gpt-oss-requantized.gguf"
    with GGUFFile(converted["gpt-oss"]) as ref:
        w = GGUFWriter(requantized)
        w.add_metadata_from(ref)
        for t in ref.tensors.values():
            if "_exps.weight" in t.name:
                w.add_tensor(t.name, np.ascontiguousarray(t.numpy()), qtype="MXFP4")
            else:
                w.add_tensor_from(t)
        w.write()
    with GGUFFile(out) as f, GGUFFile(requantized) as want:
        for t in want.tensors:
            assert f.tensors[t].qtype == want.tensors[t].qtype and f.tensors[t].shape == want.tensors[t].shape, t
            np.testing.assert_array_equal(f.tensors[t].data, want.tensors[t].data, err_msg=t)
    logits = []
    for path in (out, requantized):
        with InferenceEngine.from_gguf(path, n_ctx=64, n_threads=2, kv_type="f32") as e:
            logits.append(e.forward(g["tokens"], all_logits=True))
    np.testing.assert_array_equal(logits[0], logits[1])
