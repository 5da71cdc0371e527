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
        "phimoe": "phimoe"}

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
    assert len(np.unique(want_experts)) == spec["layers"][0]["n_expert"]
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
