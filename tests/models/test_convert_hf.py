"""Hugging Face checkpoints (a state dict and its config.json, committed in data/hf/ by make_hf_weights.py)
converted inside the test with oxillama's converter: the GGUF is the committed one bit for bit (metadata and
tensors), and its logits match transformers' float32 goldens. No torch needed."""
import json
import os

import numpy as np
import pytest

from oxillama.convert import convert_state_dict
from oxillama.gguf import GGUFFile
from oxillama.runtime import InferenceEngine

DATA = os.path.join(os.path.dirname(__file__), "data")
HF = os.path.join(DATA, "hf")
NAMES = sorted(f[:-len(".config.json")] for f in os.listdir(HF) if f.endswith(".config.json"))
F32_TOL = 1e-5        # max |ours - transformers| / std, as test_architectures.py (measured 1.2-3.6e-6)


def test_the_families_converted_today_have_checkpoints():
    assert {"llama", "qwen3", "gemma3", "phi3", "starcoder2", "command-r", "gpt2", "gptneox", "falcon40b", "stablelm-par",
            "internlm2"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_hf_checkpoint_converts_to_the_reference_gguf(name, tmp_path):
    with open(os.path.join(HF, f"{name}.config.json"), encoding="utf-8") as f:
        config = json.load(f)
    state = dict(np.load(os.path.join(HF, f"{name}.npz")))
    out = convert_state_dict(state, config, tmp_path / f"{name}.gguf", outtype="f32", name=f"tiny-{name}")
    with GGUFFile(out) as got, GGUFFile(os.path.join(DATA, f"{name}.gguf")) as want:
        assert got.metadata.keys() == want.metadata.keys()
        for key, value in want.metadata.items():
            if isinstance(value, (list, tuple, np.ndarray)):
                assert np.array_equal(np.asarray(got.metadata[key]), np.asarray(value)), key
            else:
                assert got.metadata[key] == value, (key, got.metadata[key], value)
        assert list(got.tensors) == list(want.tensors)
        for tname, t in want.tensors.items():
            assert got.tensors[tname].qtype == t.qtype and got.tensors[tname].shape == t.shape, tname
            assert np.array_equal(got.tensors[tname].numpy(), t.numpy()), tname
    golden = np.load(os.path.join(DATA, f"{name}.npz"))
    tokens, ref = golden["tokens"], golden["logits"]
    with InferenceEngine.from_gguf(out, n_ctx=64, n_threads=2, kv_type="f32") as e:
        logits = e.forward(tokens, all_logits=True)
    assert np.abs(logits - ref).max() / ref.std() < F32_TOL
