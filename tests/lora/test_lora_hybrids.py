"""LoRA on the hybrids (LFM2's short-conv layers, Qwen3-Next's gated DeltaNet layers, beside attention): an adapter
on their attention and FFN projections gives the logits of a file with W + B A merged in; an adapter on a recurrent
layer's projections (which the forward does not adapt) is refused with a LoraError naming the tensor instead of
being silently ignored."""
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import LoraError
from oxillama.gguf import GGUFWriter
from oxillama.lora import LoraAdapter

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
import tiny_hybrid  # noqa: E402

TOKENS = [int(t) for t in np.random.default_rng(1).integers(3, tiny_hybrid.N_VOCAB, 40)]
RANK, ALPHA = 4, 4.0          # scale alpha / rank = 1: merged weights are W + B A


def base_tensors(family):
    if family == "lfm2":
        return tiny_hybrid.lfm2_tensors(11)
    return tiny_hybrid.qwen3next_gguf_tensors(tiny_hybrid.qwen3next_hf_tensors(13))


WRITE = {"lfm2": tiny_hybrid.write_tiny_lfm2, "qwen3next": tiny_hybrid.write_tiny_qwen3next}


def adapter(family, names, path, seed=5):
    base = base_tensors(family)
    rng = np.random.default_rng(seed)
    pairs = {}
    for n in names:
        rows, cols = base[n].shape
        pairs[n] = (rng.standard_normal((RANK, cols)).astype(np.float32) * 0.3 / np.sqrt(cols),
                    rng.standard_normal((rows, RANK)).astype(np.float32) * 0.3)
    w = GGUFWriter(path)
    for k, v in {"general.architecture": family, "general.type": "adapter", "adapter.type": "lora",
                 "adapter.lora.alpha": ALPHA}.items():
        w.add_metadata(k, v)
    for n, (a, b) in pairs.items():
        w.add_tensor(n + ".lora_a", a)
        w.add_tensor(n + ".lora_b", b)
    w.write()
    merged = {n: (base[n].astype(np.float64) + b.astype(np.float64) @ a.astype(np.float64)).astype(np.float32)
              for n, (a, b) in pairs.items()}
    return path, merged


def logits(path, lora=None):
    with InferenceEngine.from_gguf(path, n_ctx=128, kv_type="f32") as e:
        if lora is not None:
            e.add_lora(LoraAdapter.from_gguf(lora), 1.0)
        return e.forward(TOKENS, all_logits=True).copy()


@pytest.mark.parametrize("family,names", [
    # layers 2 and 4 of the tiny LFM2 are attention, 0 and 3 short convolutions (their FFNs are adapted too)
    ("lfm2", ["blk.2.attn_q.weight", "blk.4.attn_output.weight", "blk.0.ffn_up.weight", "blk.3.ffn_down.weight"]),
    # layer 3 of the tiny Qwen3-Next is gated full attention (its Q rows carry the gate as well)
    ("qwen3next", ["blk.3.attn_q.weight", "blk.3.attn_k.weight", "blk.3.attn_v.weight",
                   "blk.3.attn_output.weight"]),
])
def test_an_adapter_equals_its_merged_weights(family, names, tmp_path):
    lora, merged = adapter(family, names, tmp_path / "a.gguf")
    base = WRITE[family](tmp_path / "base.gguf")
    want = logits(WRITE[family](tmp_path / "merged.gguf", reshape=merged))
    got = logits(base, lora)
    spread = want.std()
    assert np.abs(got - want).max() < 1e-4 * spread
    assert np.abs(logits(base) - want).max() > 0.05 * spread     # the adapter mattered


@pytest.mark.parametrize("family,name", [
    ("lfm2", "blk.0.shortconv.in_proj.weight"),
    ("lfm2", "blk.0.shortconv.out_proj.weight"),
    ("qwen3next", "blk.0.attn_qkv.weight"),       # the DeltaNet layer's fused input projection
    ("qwen3next", "blk.0.ssm_out.weight"),
    ("qwen3next", "blk.0.ffn_up_shexp.weight"),   # the shared expert
])
def test_an_adapter_on_a_projection_the_forward_does_not_adapt_is_refused(family, name, tmp_path):
    lora, _ = adapter(family, [name], tmp_path / "a.gguf")
    with InferenceEngine.from_gguf(WRITE[family](tmp_path / "base.gguf"), n_ctx=64) as e:
        with pytest.raises(LoraError, match=r"layer 0|blk\.0\."):
            e.add_lora(LoraAdapter.from_gguf(lora), 1.0)


def test_bamba_q_and_k_adapters_follow_the_reordered_rows(tmp_path):
    """Bamba's attention Q and K rows run in transformers' order (oxillama/models/granite.py): an adapter made for
    the file's rows still equals its merged weights (its B reordered as the rows are)."""
    from oxillama.gguf import GGUFFile
    src = Path(__file__).parent.parent / "models" / "data" / "bamba.gguf"
    names = ["blk.2.attn_q.weight", "blk.2.attn_k.weight"]
    rng = np.random.default_rng(9)
    with GGUFFile(src) as g:
        base = {n: g.tensors[n].numpy().copy() for n in names}
        pairs = {n: (rng.standard_normal((RANK, base[n].shape[1])).astype(np.float32) * 0.3 / np.sqrt(base[n].shape[1]),
                     rng.standard_normal((base[n].shape[0], RANK)).astype(np.float32) * 0.3) for n in names}
        merged_path = tmp_path / "merged.gguf"
        w = GGUFWriter(merged_path)
        w.add_metadata_from(g)
        for t in g.tensors.values():
            if t.name in pairs:
                a, b = pairs[t.name]
                w.add_tensor(t.name, (base[t.name].astype(np.float64) + b.astype(np.float64) @ a).astype(np.float32))
            else:
                w.add_tensor_from(t)
        w.write()
    lora = tmp_path / "a.gguf"
    w = GGUFWriter(lora)
    for k, v in {"general.architecture": "granitehybrid", "general.type": "adapter", "adapter.type": "lora",
                 "adapter.lora.alpha": ALPHA}.items():
        w.add_metadata(k, v)
    for n, (a, b) in pairs.items():
        w.add_tensor(n + ".lora_a", a)
        w.add_tensor(n + ".lora_b", b)
    w.write()
    tokens = [int(t) % 288 for t in TOKENS]
    with InferenceEngine.from_gguf(merged_path, n_ctx=128, kv_type="f32") as e:
        want = e.forward(tokens, all_logits=True).copy()
    with InferenceEngine.from_gguf(src, n_ctx=128, kv_type="f32") as e:
        plain = e.forward(tokens, all_logits=True).copy()
        e.reset()
        e.add_lora(LoraAdapter.from_gguf(lora), 1.0)
        got = e.forward(tokens, all_logits=True).copy()
    assert np.abs(got - want).max() < 1e-4 * want.std()
    assert np.abs(plain - want).max() > 0.05 * want.std()
