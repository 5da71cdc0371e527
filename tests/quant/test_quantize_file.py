"""`oxillama quantize` against llama.cpp: the same tensor types (recipes), the same blocks (with and
without an importance matrix), the same file; and its refusals of bad input.

Goldens (tests/quant/goldens/quantize.json) come from llama.cpp's quantizers via
make_goldens_quantize.py; where llama-cpp-python is installed the tests also ask it directly.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import tempfile
import sys

import numpy as np
import pytest

from . import llama_cpp_ref, model_files
from .make_goldens_quantize import BLOCK_TYPES, CASES, GOLDENS, block_data, case_kwargs, file_summary

from oxillama import _core
from oxillama.errors import OxillamaError, QuantError
from oxillama.gguf import GGUFFile
from oxillama.quant import GGMLType, recipes
from oxillama.quant.imatrix import ImportanceMatrix, load_imatrix
from oxillama.quant.quantize_file import quantize_file

HAVE_LLAMA_CPP = llama_cpp_ref.available()
# a quick subset in every run; the whole matrix with -m slow (or everything by default)
MIN_LOGIT_CORRELATION = 0.99   # 5-bit weights of a random 64-wide model against its F32 original
QUICK = {"Q8_0", "Q4_K_M", "IQ4_XS", "Q3_K_M", "Q4_K_M:imx", "IQ4_XS:imx", "Q2_K_S:imx", "Q4_K_M:types"}


@pytest.fixture(scope="module")
def goldens() -> dict:
    with open(GOLDENS) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("quantize")
    return model_files.make_f16_llama(str(d / "f16.gguf")), model_files.make_imatrix(str(d / "imatrix.gguf"))


def _sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


@pytest.mark.parametrize("name", BLOCK_TYPES)
def test_blocks_equal_ggml(goldens, name):
    qtype = int(GGMLType[name])
    for cols in (256, 512):
        x, w = block_data(cols)
        plain = _core.quantize_rows(x.reshape(-1), qtype, 16, cols, None)
        weighted = _core.quantize_rows(x.reshape(-1), qtype, 16, cols, w)
        assert _sha(plain) == goldens["blocks"][f"{name}/{cols}"], f"{name}, rows of {cols}"
        assert _sha(weighted) == goldens["blocks"][f"{name}/{cols}/imatrix"], f"{name}, rows of {cols}, imatrix"
        if HAVE_LLAMA_CPP:
            assert bytes(plain) == llama_cpp_ref.ggml_quantize(qtype, x)
            assert bytes(weighted) == llama_cpp_ref.ggml_quantize(qtype, x, w)


def _case_params():
    return [pytest.param(c, marks=() if c in QUICK else pytest.mark.slow) for c in CASES]


@pytest.mark.parametrize("case", _case_params())
def test_file_equals_llama_quantize(goldens, model, tmp_path, case):
    """Tensor order, tensor types and every tensor's bytes equal llama-quantize's output."""
    src, imx = model
    ft, kw = case_kwargs(case, imx)
    out = str(tmp_path / "ours.gguf")
    report = quantize_file(src, out, ft, **kw)
    ours = file_summary(out)
    want = goldens["files"][case]
    assert ours["names"] == goldens["names"]
    names = goldens["names"].split(",")
    types = dict(zip(names, ours["types"].split(",")))
    assert ours["types"] == want["types"], {n: (a, b) for n, a, b in zip(names, ours["types"].split(","),
                                                                        want["types"].split(",")) if a != b}
    assert ours["sha256"] == want["sha256"], [n for n, a, b in zip(names, ours["sha256"].split(","),
                                                                   want["sha256"].split(",")) if a != b]
    assert report.type_table() == types
    with GGUFFile(out) as f:
        assert f.metadata["general.file_type"] == recipes.file_type(ft).ftype
        assert f.metadata["general.quantization_version"] == 2
    if HAVE_LLAMA_CPP:
        ref = str(tmp_path / "ref.gguf")
        values = load_imatrix(imx).values() if "imatrix" in kw else None
        llama_cpp_ref.llama_quantize(
            src, ref, recipes.file_type(ft).ftype, imatrix=values, pure=kw.get("pure", False),
            output_tensor_type=int(GGMLType[kw["output_tensor_type"]]) if "output_tensor_type" in kw else None,
            token_embedding_type=int(GGMLType[kw["token_embedding_type"]]) if "token_embedding_type" in kw else None)
        if "imatrix" not in kw:   # llama-quantize's tool adds quantize.imatrix.* keys; the library does not
            with open(out, "rb") as a, open(ref, "rb") as b:
                assert a.read() == b.read(), "the whole file differs from llama_model_quantize's"
        assert file_summary(ref) == ours


def test_recipe_rules_by_layer():
    """The Q4_K_M mix on a 32-layer model: attn_v and ffn_down get Q6_K in llama.cpp's use_more_bits layers
    (first and last eighth, and every third in between), the output matrix Q6_K."""
    n_layer = 32
    tensors = [("token_embd.weight", (4096, 32000), 1), ("output.weight", (4096, 32000), 1)]
    for i in range(n_layer):
        for name, shape in (("attn_q", (4096, 4096)), ("attn_k", (4096, 1024)), ("attn_v", (4096, 1024)),
                            ("attn_output", (4096, 4096)), ("ffn_gate", (4096, 11008)),
                            ("ffn_up", (4096, 11008)), ("ffn_down", (11008, 4096))):
            tensors.append((f"blk.{i}.{name}.weight", shape, 1))
        tensors.append((f"blk.{i}.attn_norm.weight", (4096,), 0))
    facts = recipes.ModelFacts("llama", n_layer, 4, 0, False)
    plan = {p.name: p.dst_type.name for p in recipes.plan_types(tensors, recipes.file_type("Q4_K_M"), facts,
                                                                  recipes.Options())}
    more = [i for i in range(n_layer) if i < 4 or i >= 28 or (i - 4) % 3 == 2]
    assert [i for i in range(n_layer) if plan[f"blk.{i}.ffn_down.weight"] == "Q6_K"] == more
    assert [i for i in range(n_layer) if plan[f"blk.{i}.attn_v.weight"] == "Q6_K"] == more
    assert plan["output.weight"] == "Q6_K" and plan["token_embd.weight"] == "Q4_K"
    assert plan["blk.0.attn_norm.weight"] == "F32" and plan["blk.5.attn_q.weight"] == "Q4_K"
    # the order llama.cpp writes: by layer number, then by name
    order = [p.name for p in recipes.plan_types(tensors, recipes.file_type("Q8_0"), facts, recipes.Options())]
    assert order[:3] == ["output.weight", "token_embd.weight", "blk.0.attn_k.weight"]
    assert order.index("blk.2.attn_k.weight") < order.index("blk.10.attn_k.weight")


def test_tiny_rows_fall_back_like_llama_cpp(tmp_path):
    """Rows of 64 values cannot hold 256-value K-quant blocks: llama.cpp's fallbacks (Q4_K -> Q5_0,
    Q6_K -> Q8_0), and the quantized model still runs close to the F32 one."""
    from oxillama import Llama
    src = os.path.join(os.path.dirname(model_files.HERE), "models", "data", "llama.gguf")
    out = str(tmp_path / "q4km.gguf")
    report = quantize_file(src, out, "Q4_K_M")
    types = set(report.type_table().values())
    assert "Q4_K" not in types and "Q5_0" in types and "Q8_0" in types
    toks = [1, 20, 30, 40, 50, 60]
    with Llama(src, n_ctx=64, verbose=False) as a, Llama(out, n_ctx=64, verbose=False) as b:
        la = a.engine.forward(toks, all_logits=True)
        lb = b.engine.forward(toks, all_logits=True)
    assert np.argmax(la, axis=1).tolist() == np.argmax(lb, axis=1).tolist()
    assert np.corrcoef(la.reshape(-1), lb.reshape(-1))[0, 1] > MIN_LOGIT_CORRELATION


# ---- bad input: a one-line error, exit 1, no output left behind

def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oxillama", "quantize", *args], capture_output=True, text=True,
                          cwd=cwd or tempfile.gettempdir(), timeout=600)   # not the repo root (no build there)


def _one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("oxillama: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_cli_refuses_bad_input(model, tmp_path):
    src, imx = model
    out = tmp_path / "out.gguf"
    _one_line_error(_cli(src, str(out), "Q4_K_Z"), "unknown quantization type", "Q4_K_Z")
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("hello\n" * 100)
    _one_line_error(_cli(str(not_gguf), str(out), "Q4_K_M"), "not a GGUF file")
    _one_line_error(_cli(str(tmp_path / "missing.gguf"), str(out), "Q4_K_M"), "missing.gguf")
    # an importance matrix of another model: rows of other lengths
    other = ImportanceMatrix(datasets=["x"], chunk_count=1, chunk_size=512)
    other.sums["blk.0.attn_q.weight"] = np.ones((1, 128))
    other.counts["blk.0.attn_q.weight"] = np.array([10])
    other.save(tmp_path / "other.imatrix.gguf")
    _one_line_error(_cli(src, str(out), "Q4_K_M", "--imatrix", str(tmp_path / "other.imatrix.gguf")),
                    "another model")
    _one_line_error(_cli(src, str(out), "Q4_K_M", "--imatrix", src), "not an importance matrix")
    # a type whose blocks the rows cannot hold, asked for explicitly
    tiny = os.path.join(os.path.dirname(model_files.HERE), "models", "data", "llama.gguf")
    _one_line_error(_cli(tiny, str(out), "Q8_0", "--token-embedding-type", "Q4_K"), "token_embd.weight", "Q4_K")
    # very low-bit mixes need an importance matrix
    _one_line_error(_cli(src, str(out), "Q2_K_S"), "importance matrix")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "other.imatrix.gguf"]   # no output, no temporary
    # an existing output is kept unless --force
    out.write_bytes(b"keep me")
    _one_line_error(_cli(src, str(out), "Q8_0"), "exists", "--force")
    assert out.read_bytes() == b"keep me"
    r = _cli(src, str(out), "Q8_0", "--force", "-q")
    assert r.returncode == 0, r.stderr
    with GGUFFile(str(out)) as f:
        assert f.tensors["blk.0.attn_q.weight"].qtype == "Q8_0"


def test_low_bit_iquants_need_an_imatrix_or_say_they_cannot(model, tmp_path):
    """IQ2_XXS / IQ2_XS / IQ1_S / IQ1_M mixes without an importance matrix are refused as llama.cpp refuses
    them, naming the first tensor; the i-quants oxillama has no quantizer for say so; nothing is written."""
    src, _ = model
    out = tmp_path / "out.gguf"
    for ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
        with pytest.raises(QuantError, match=r"blk\.0\.\w+\.weight: IQ\w+ in a %s file needs an importance matrix" % ft):
            quantize_file(src, str(out), ft)
    for ft, qtype in (("IQ3_S", "IQ3_S"), ("IQ2_XXS:imx", "IQ2_XXS")):
        name, _, opt = ft.partition(":")
        with pytest.raises(QuantError, match=f"cannot quantize to {qtype}"):
            quantize_file(src, str(out), name, imatrix=model[1] if opt else None)
    assert os.listdir(tmp_path) == []


def test_requantize_needs_the_flag(model, tmp_path):
    src, _ = model
    q8 = str(tmp_path / "q8.gguf")
    quantize_file(src, q8, "Q8_0")
    with pytest.raises(QuantError, match="allow-requantize"):
        quantize_file(q8, str(tmp_path / "q4.gguf"), "Q4_K_M")
    report = quantize_file(q8, str(tmp_path / "q4.gguf"), "Q4_K_M", allow_requantize=True)
    assert report.type_table()["blk.0.attn_q.weight"] == "Q4_K"


def test_full_disk_leaves_nothing(model, tmp_path, monkeypatch):
    """An OSError while writing (ENOSPC) is one error naming the file; neither the output nor the
    temporary file is left behind."""
    from oxillama.quant import quantize_file as qf
    src, _ = model
    real = qf._tensor_bytes
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        yield from real(*args, **kwargs)
    monkeypatch.setattr(qf, "_tensor_bytes", failing)
    out = tmp_path / "out.gguf"
    with pytest.raises(OxillamaError, match="No space left on device"):
        quantize_file(src, str(out), "Q4_K_M")
    assert os.listdir(tmp_path) == []


def test_progress_and_threads_do_not_change_bytes(model, tmp_path):
    src, _ = model
    lines = []
    a = quantize_file(src, str(tmp_path / "a.gguf"), "Q4_K_M", n_threads=1, progress=lines.append)
    b = quantize_file(src, str(tmp_path / "b.gguf"), "Q4_K_M", n_threads=2)
    assert len(lines) == len(a.tensors) and "converting to q6_k" in " ".join(lines)
    with open(tmp_path / "a.gguf", "rb") as fa, open(tmp_path / "b.gguf", "rb") as fb:
        assert fa.read() == fb.read()
    assert a.dst_bytes == b.dst_bytes < a.src_bytes
