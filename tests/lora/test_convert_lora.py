"""`oxillama convert-lora`: a PEFT folder (written here as PEFT writes it) to a GGUF adapter."""
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.cli import main
from oxillama.errors import LoraError
from oxillama.lora import LoraAdapter
from oxillama.lora.convert import convert_peft, read_safetensors

TINY = Path(__file__).parent.parent / "models" / "data" / "llama.gguf"
TOKENS = [1, 17, 42, 99, 5, 230, 77, 8]


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if dtype == "BF16":   # round-to-nearest-even of the top 16 bits, as torch stores bf16
            u = a.astype(np.float32).view(np.uint32)
            raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            raw = a.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def peft_dir(tmp_path, engine, *, r=4, alpha=8, rslora=False, dtype="F32", seed=0):
    """A PEFT folder adapting q, k, v, o and down of every layer; returns (folder, HF-order tensors)."""
    rng = np.random.default_rng(seed)
    d = tmp_path / "peft"
    d.mkdir()
    hf = {}
    mods = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "mlp.down_proj": "ffn_down"}
    for il in range(engine.config.n_layer):
        for mod, g in mods.items():
            rows, cols = engine.gguf.tensors[f"blk.{il}.{g}.weight"].shape
            a = rng.standard_normal((r, cols)).astype(np.float32) * 0.3 / np.sqrt(cols)
            b = rng.standard_normal((rows, r)).astype(np.float32) * 0.3
            hf[(il, g)] = (a, b)
            pre = f"base_model.model.model.layers.{il}.{mod}"
            hf[f"{pre}.lora_A.weight"], hf[f"{pre}.lora_B.weight"] = a, b
    write_safetensors(d / "adapter_model.safetensors", {k: v for k, v in hf.items() if isinstance(k, str)}, dtype)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": alpha,
                                                       "use_rslora": rslora, "target_modules": list(mods)}))
    return d, {k: v for k, v in hf.items() if isinstance(k, tuple)}


def rope_rows(b, n_head):
    """the converter's Q/K layout, written out index by index: row 2i <- i, row 2i+1 <- i + d/2, per head"""
    d = b.shape[0] // n_head
    out = np.empty_like(b)
    for h in range(n_head):
        for i in range(d // 2):
            out[h * d + 2 * i] = b[h * d + i]
            out[h * d + 2 * i + 1] = b[h * d + i + d // 2]
    return out


@pytest.mark.parametrize("rslora", [False, True])
def test_converted_peft_adapter_equals_the_equivalent_gguf_adapter(tmp_path, rslora):
    with InferenceEngine.from_gguf(TINY, n_ctx=32) as e:
        d, hf = peft_dir(tmp_path, e, rslora=rslora)
        out = tmp_path / "a.gguf"
        assert main(["convert-lora", str(d), "--base", str(TINY), "-o", str(out)]) == 0
        converted = LoraAdapter.from_gguf(out)
        c = e.config
        by_hand = {}
        for (il, g), (a, b) in hf.items():
            if g == "attn_q":
                b = rope_rows(b, c.n_head)
            elif g == "attn_k":
                b = rope_rows(b, c.n_head_kv)
            by_hand[f"blk.{il}.{g}.weight"] = (a, b)
        scale = 8 / np.sqrt(4) if rslora else 8 / 4       # alpha / sqrt(r) with rsLoRA, alpha / r without
        expected = LoraAdapter(by_hand, alpha=scale * 4, arch="llama")
        assert converted.scale_for(1.0) == pytest.approx(scale)
        e.add_lora(converted)
        got = e.forward(TOKENS, all_logits=True)
        e.reset()
        e.clear_loras()
        e.add_lora(expected)
        np.testing.assert_array_equal(got, e.forward(TOKENS, all_logits=True))


def test_bf16_and_f16_safetensors_read_as_float32(tmp_path):
    x = np.array([[1.5, -2.25, 3.0e-3], [65504.0, 0.0, -1.0]], dtype=np.float32)
    for dtype in ("F16", "BF16"):
        write_safetensors(tmp_path / "t.safetensors", {"x": x}, dtype)
        got = read_safetensors(tmp_path / "t.safetensors")["x"]
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, x, rtol=1e-2 if dtype == "BF16" else 1e-3)


@pytest.mark.parametrize("case", ["no_config", "bad_header", "rank", "unknown_module", "fan_in_fan_out"])
def test_bad_peft_folders_raise_lora_error(tmp_path, case):
    with InferenceEngine.from_gguf(TINY, n_ctx=32) as e:
        d, _ = peft_dir(tmp_path, e)
    cfg = json.loads((d / "adapter_config.json").read_text())
    if case == "no_config":
        (d / "adapter_config.json").unlink()
    elif case == "bad_header":
        (d / "adapter_model.safetensors").write_bytes(struct.pack("<Q", 10 ** 9) + b"{}")
    elif case == "rank":
        cfg["r"] = 3
    elif case == "unknown_module":
        write_safetensors(d / "adapter_model.safetensors",
                          {"base_model.model.model.layers.0.mlp.weird_proj.lora_A.weight": np.zeros((4, 4), np.float32)})
    elif case == "fan_in_fan_out":
        cfg["fan_in_fan_out"] = True
    (d / "adapter_config.json").write_text(json.dumps(cfg)) if case != "no_config" else None
    with pytest.raises(LoraError):
        convert_peft(d, TINY, tmp_path / "out.gguf")
