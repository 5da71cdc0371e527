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


def test_falcon_checkpoints_from_before_transformers_convert_too(tmp_path):
    """Falcon-40B as first published (model_type RefinedWeb, n_head / n_head_kv, no new_decoder_architecture):
    the same file as from transformers' falcon config."""
    with open(os.path.join(HF, "falcon40b.config.json"), encoding="utf-8") as f:
        config = json.load(f)
    state = dict(np.load(os.path.join(HF, "falcon40b.npz")))
    old = {k: v for k, v in config.items() if k not in ("num_attention_heads", "num_kv_heads", "num_hidden_layers",
                                                        "new_decoder_architecture", "model_type")}
    old.update(model_type="RefinedWeb", n_head=config["num_attention_heads"], n_head_kv=config["num_kv_heads"],
               n_layer=config["num_hidden_layers"])
    a = convert_state_dict(state, config, tmp_path / "new.gguf", outtype="f32", name="f")
    b = convert_state_dict(state, old, tmp_path / "old.gguf", outtype="f32", name="f")
    with GGUFFile(a) as ga, GGUFFile(b) as gb:
        assert ga.metadata["falcon.attention.head_count_kv"] == gb.metadata["falcon.attention.head_count_kv"] == 2
        assert list(ga.tensors) == list(gb.tensors)
        for name, t in ga.tensors.items():
            assert np.array_equal(t.numpy(), gb.tensors[name].numpy()), name
