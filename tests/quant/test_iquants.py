"""The 1- to 3-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): sizes, dequantize bit
for bit with llama.cpp on every tier, vec_dot against the dequantized product on every tier, and a clear
error for quantize (oxillama reads these types; llama-quantize writes them).

Oracle: the gguf package's gguf.quants dequantizers (NumPy copies of ggml's dequantize_row_iq*, with
its own copy of the grids; csrc/iq_grids.h is generated from them by make_iq_grids.py, and
test_grid_header_is_current checks it still matches).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from oxillama import _core
from oxillama.errors import QuantError
from oxillama.quant import QMatrix, dequantize, quantize, type_info

from .helpers import NO_QUANTIZER_TYPES, qid, random_iq_blocks, usable_tiers

gguf = pytest.importorskip("gguf")
from gguf import quants as gguf_quants  # noqa: E402

TYPES = NO_QUANTIZER_TYPES
SIZES = {"IQ2_XXS": 66, "IQ2_XS": 74, "IQ2_S": 82, "IQ3_XXS": 98, "IQ3_S": 110, "IQ1_S": 50, "IQ1_M": 56}
# one exact integer per super-block and two float products: against the float64 dot of the dequantized
# rows relative to sum |w_i a_i|; every tier gives the scalar float exactly (csrc/iq_decode.h)
VEC_DOT_VS_DEQUANT_RTOL = 1e-5
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("qtype", TYPES)
def test_sizes_match_ggml(qtype):
    info = type_info(qtype)
    assert (info.block_size, info.type_size) == (256, SIZES[qtype])
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]] == (256, SIZES[qtype])
    name, blck, tsize, *_ = _core.type_table()[int(info.qtype)]
    assert (name, blck, tsize) == (qtype, 256, SIZES[qtype])


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_is_bit_exact_on_every_tier(qtype):
    nb = 97
    raw = random_iq_blocks(qtype, nb, np.random.default_rng(3), d_scale=1.0)
    want = gguf_quants.dequantize(raw.reshape(nb, -1), gguf.GGMLQuantizationType[qtype]).reshape(-1)
    want = want.astype(np.float32)
    for tier in usable_tiers():
        got = dequantize(raw, qtype, nb * 256, tier=tier)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=tier)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("nb", [1, 3, 8])
def test_vec_dot_every_tier_gives_the_scalar_float(qtype, nb):
    rng = np.random.default_rng(nb)
    n = nb * 256
    w = random_iq_blocks(qtype, nb, rng)
    x = rng.standard_normal(n).astype(np.float32) * np.float32(3)
    xq = quantize(x, "Q8_K")
    wd = dequantize(w, qtype, n).astype(np.float64)
    xd = dequantize(xq, "Q8_K", n).astype(np.float64)
    base = _core.vec_dot(qid(qtype), w, xq, n, "scalar")
    assert abs(base - wd @ xd) <= VEC_DOT_VS_DEQUANT_RTOL * (np.abs(wd) @ np.abs(xd))
    for tier in usable_tiers():
        assert np.float32(_core.vec_dot(qid(qtype), w, xq, n, tier)) == np.float32(base), tier


@pytest.mark.parametrize("qtype", TYPES)
def test_qmatrix_products(qtype):
    rows, cols = 11, 512
    rng = np.random.default_rng(5)
    m = QMatrix(random_iq_blocks(qtype, rows * cols // 256, rng), qtype, rows, cols, n_threads=2)
    X = rng.standard_normal((6, cols)).astype(np.float32)
    wd = dequantize(m.data, qtype, rows * cols).reshape(rows, cols).astype(np.float64)
    xd = dequantize(quantize(X, "Q8_K"), "Q8_K", X.size).reshape(X.shape).astype(np.float64)
    Y = m.matmul(X)
    np.testing.assert_allclose(Y, xd @ wd.T, rtol=0, atol=1e-5 * float((np.abs(xd) @ np.abs(wd).T).max()))
    np.testing.assert_array_equal(m.matvec(X[3]), Y[3])


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_says_it_is_not_available(qtype):
    with pytest.raises(QuantError, match=qtype):
        quantize(np.zeros(256, np.float32), qtype)


def test_grid_header_is_current():
    """csrc/iq_grids.h is what make_iq_grids.py writes from the installed gguf package's grids."""
    import contextlib
    import io

    from . import make_iq_grids
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        make_iq_grids.main()
    with open(os.path.join(ROOT, "csrc", "iq_grids.h")) as f:
        assert f.read() == buf.getvalue()
