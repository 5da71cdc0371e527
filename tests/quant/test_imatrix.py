"""Importance matrices: the NumPy forward that collects activations agrees with the C forward on every
tiny architecture, `oxillama imatrix` writes llama.cpp's imatrix GGUF with llama-imatrix's counts, and
`oxillama quantize --imatrix` takes it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama.errors import ModelError
from oxillama.gguf import GGUFFile
from oxillama.quant.imatrix import ImportanceMatrix, load_imatrix
from oxillama.quant.imatrix_collect import _forward, _Recorder
from oxillama.runtime.engine import InferenceEngine

DATA = Path(__file__).parents[1] / "models" / "data"
MODELS = sorted(p for p in DATA.glob("*.gguf") if p.stem.count(".") == 0)
TOKENS = np.array([1, 20, 30, 40, 50, 60, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21])
LOGIT_TOLERANCE = 1e-3   # relative to the largest logit: float32 NumPy against the C kernels' rounding


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_collecting_forward_matches_the_engine(path):
    with InferenceEngine.from_gguf(str(path), n_ctx=64, n_threads=1) as e:
        imx = ImportanceMatrix()
        spec = e.arch.build()
        if any(L.get("kind", "attention") != "attention" or L.get("n_expert") for L in spec["layers"]):
            with pytest.raises(ModelError, match="expert or recurrent layers"):   # mamba2, granitehybrid
                _forward(spec, TOKENS, _Recorder(e.gguf, imx, False))
            return
        got = _forward(spec, TOKENS, _Recorder(e.gguf, imx, False))
        want = e.forward(TOKENS, all_logits=True)
        # (stablelm's per-head Q/K norm weights are 2-D too, but norms: nothing multiplies them)
        names = {t for t in e.gguf.tensors if t.startswith("blk.") and t.endswith(".weight")
                 and e.gguf.tensors[t].ggml_shape[1:2] not in ((), (1,)) and not t.endswith("_norm.weight")}
    assert np.abs(got - want).max() < LOGIT_TOLERANCE * np.abs(want).max()
    assert set(imx.sums) == names   # every 2-D layer matrix, nothing else
    assert all(int(c[0]) == len(TOKENS) for c in imx.counts.values())


def test_imatrix_cli_and_quantize_with_it(tmp_path):
    text = tmp_path / "calib.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. Pack my box with five dozen jugs. " * 20)
    out = tmp_path / "imatrix.gguf"
    tiny = str(DATA / "llama.gguf")
    r = subprocess.run([sys.executable, "-m", "oxillama", "imatrix", "-m", tiny, "-f", str(text), "-c", "32",
                        "--chunks", "3", "-o", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    imx = load_imatrix(out)
    assert imx.chunk_count == 3 and imx.chunk_size == 32 and imx.datasets == [str(text)]
    assert all(c.tolist() == [96] for c in imx.counts.values())
    # the three projections of a layer read the same normalized input
    assert np.array_equal(imx.sums["blk.0.attn_q.weight"], imx.sums["blk.0.attn_k.weight"])
    assert np.array_equal(imx.sums["blk.1.ffn_gate.weight"], imx.sums["blk.1.ffn_up.weight"])
    assert not np.array_equal(imx.sums["blk.0.attn_q.weight"], imx.sums["blk.1.attn_q.weight"])
    with GGUFFile(str(out)) as f:
        assert f.metadata["general.type"] == "imatrix"
        assert f.tensors["blk.0.ffn_down.weight.in_sum2"].ggml_shape == (96, 1)
        assert f.tensors["blk.0.ffn_down.weight.counts"].ggml_shape == (1, 1)
    q = tmp_path / "q4_0.gguf"
    r = subprocess.run([sys.executable, "-m", "oxillama", "quantize", tiny, str(q), "Q4_0", "--imatrix", str(out),
                        "-q"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plain = tmp_path / "plain.gguf"
    r = subprocess.run([sys.executable, "-m", "oxillama", "quantize", tiny, str(plain), "Q4_0", "-q"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    with GGUFFile(str(q)) as a, GGUFFile(str(plain)) as b:
        assert a.metadata["quantize.imatrix.chunks_count"] == 3
        assert a.tensors["blk.1.attn_q.weight"].qtype == b.tensors["blk.1.attn_q.weight"].qtype == "Q4_0"
        assert not np.array_equal(a.tensors["blk.1.attn_q.weight"].data, b.tensors["blk.1.attn_q.weight"].data)


def test_save_load_round_trip(tmp_path):
    imx = ImportanceMatrix(datasets=["a.txt"], chunk_count=2, chunk_size=512)
    rng = np.random.default_rng(0)
    imx.add("blk.0.ffn_up.weight", rng.standard_normal((40, 8)).astype(np.float32))
    imx.add("blk.0.ffn_up.weight", rng.standard_normal((24, 8)).astype(np.float32))
    imx.add("blk.3.ffn_down_exps.weight", rng.standard_normal((5, 4)).astype(np.float32), mat=1, n_mat=3)
    imx.save(tmp_path / "m.gguf")
    back = load_imatrix(tmp_path / "m.gguf")
    assert back.counts["blk.0.ffn_up.weight"].tolist() == [64]
    assert back.counts["blk.3.ffn_down_exps.weight"].tolist() == [0, 5, 0]
    v = back.values()
    assert np.allclose(v["blk.0.ffn_up.weight"], imx.sums["blk.0.ffn_up.weight"][0] / 64, rtol=1e-6)
    assert v["blk.3.ffn_down_exps.weight"][:4].tolist() == [1, 1, 1, 1]     # never seen: weight 1
