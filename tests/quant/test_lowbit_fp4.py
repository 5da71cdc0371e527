"""MXFP4, NVFP4, Q1_0, TQ1_0 and TQ2_0: sizes, dequantize and reference quantize bit for bit with
llama.cpp, vec_dot on every tier.

Oracles: the gguf package's gguf.quants (NumPy copies of ggml's code) for MXFP4/TQ1_0/TQ2_0 quantize
and MXFP4/NVFP4/TQ1_0/TQ2_0 dequantize. It has no Q1_0 code and no NVFP4 quantizer: those references
are written here in NumPy from ggml-quants.c (quantize_row_q1_0_ref, dequantize_row_q1_0,
quantize_row_nvfp4_ref; llama.cpp master, 2026-11), the NVFP4 one on gguf's own fp32_to_ue4m3.
"""
from __future__ import annotations

import numpy as np
import pytest

from oxillama import _core
from oxillama.errors import QuantError
from oxillama.quant import QMatrix, dequantize, quantize, type_info

from .helpers import act_halfstep, qid, usable_tiers

gguf = pytest.importorskip("gguf")
from gguf import quants as gguf_quants  # noqa: E402

TYPES = ("MXFP4", "NVFP4", "Q1_0", "TQ1_0", "TQ2_0")
SIZES_BYTES = {"MXFP4": (32, 17), "NVFP4": (64, 36), "Q1_0": (128, 18), "TQ1_0": (256, 54), "TQ2_0": (256, 66)}
ACT = {"MXFP4": "Q8_0", "NVFP4": "Q8_0", "Q1_0": "Q8_0", "TQ1_0": "Q8_K", "TQ2_0": "Q8_K"}
GGUF_QUANTIZE = ("MXFP4", "TQ1_0", "TQ2_0")
GGUF_DEQUANTIZE = ("MXFP4", "NVFP4", "TQ1_0", "TQ2_0")
# vec_dot is exact integer block sums plus a few float multiply-adds per block: against the float64
# dot of the dequantized rows, and a SIMD tier against the scalar one, relative to sum |w_i a_i|
VEC_DOT_VS_DEQUANT_RTOL = 1e-5
TIER_VS_SCALAR_RTOL = 1e-5
KVALUES_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


def _gguf_type(name):
    return gguf.GGMLQuantizationType[name]


def _data(n, seed, scale_range=(-3.0, 2.0)):
    """Weights-like rows with per-block magnitudes over a wide range, a zero block and exact zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x *= np.exp(rng.uniform(*scale_range, size=n // 32)).repeat(32).astype(np.float32)
    x[:256] = 0.0                 # an all-zero block of every block size
    x[300:310] = -0.0
    if n >= 1024:
        x[512:544] = np.linspace(-6, 6, 32, dtype=np.float32)  # codebook points and ties between them
    return x


def _random_blocks(qtype, nb, rng):
    """Random bytes for nb blocks, scales finite (fp16 fields set from normal values)."""
    size = type_info(qtype).type_size
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    half = rng.standard_normal(nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if qtype == "Q1_0":
        raw[:, 0:2] = half
    elif qtype in ("TQ1_0", "TQ2_0"):
        raw[:, -2:] = half
    return raw.reshape(-1)


# ---- NumPy references written from ggml-quants.c ------------------------------------------------

def ref_dequantize_q1_0(raw):
    b = raw.reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    bits = np.unpackbits(b[:, 2:], axis=1, bitorder="little").astype(bool)
    return np.where(bits, d, -d).reshape(-1)


def ref_quantize_q1_0(x):
    xb = x.reshape(-1, 128)
    sum_abs = np.zeros(xb.shape[0], np.float32)
    for j in range(128):             # summed in order, in float32
        sum_abs = (sum_abs + np.abs(xb[:, j])).astype(np.float32)
    d = (sum_abs / np.float32(128)).astype(np.float16)
    bits = np.packbits(xb >= 0, axis=1, bitorder="little")
    return np.concatenate([d.reshape(-1, 1).view(np.uint8), bits], axis=1).reshape(-1)


def ref_quantize_nvfp4(x):
    xb = x.reshape(-1, 4, 16)
    amax = np.abs(xb).max(axis=-1)
    ue = gguf_quants.NVFP4.fp32_to_ue4m3((amax / np.float32(6)).astype(np.float32))
    d = gguf_quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    # nearest codebook point, the first on ties (ggml's best_index_mxfp4)
    err = np.abs(KVALUES_FP4.astype(np.float32) * d[..., None, None] - xb[..., :, None])
    idx = np.argmin(err, axis=-1).astype(np.uint8)             # (nb, 4, 16)
    qs = idx[..., :8] | (idx[..., 8:] << 4)
    return np.concatenate([ue.astype(np.uint8), qs.reshape(-1, 32)], axis=1).reshape(-1)


# ---- sizes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", TYPES)
def test_sizes_match_ggml(qtype):
    info = type_info(qtype)
    assert (info.block_size, info.type_size) == SIZES_BYTES[qtype]
    assert gguf.GGML_QUANT_SIZES[_gguf_type(qtype)] == SIZES_BYTES[qtype]
    assert int(info.qtype) == int(_gguf_type(qtype))
    name, blck, tsize, *_ = _core.type_table()[int(info.qtype)]
    assert (name, blck, tsize) == (qtype, *SIZES_BYTES[qtype])


# ---- dequantize -------------------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_is_bit_exact_on_every_tier(qtype):
    rng = np.random.default_rng(1)
    nb = 61
    raw = _random_blocks(qtype, nb, rng)
    if qtype == "MXFP4":   # every E8M0 scale, subnormal ones included
        raw.reshape(nb, -1)[:, 0] = np.arange(nb) * 4 % 256
    n = nb * type_info(qtype).block_size
    if qtype in GGUF_DEQUANTIZE:
        with np.errstate(over="ignore"):
            want = gguf_quants.dequantize(raw.reshape(nb, -1), _gguf_type(qtype)).reshape(-1).astype(np.float32)
    else:
        want = ref_dequantize_q1_0(raw)
    for tier in usable_tiers():
        got = dequantize(raw, qtype, n, tier=tier)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=tier)


def test_nvfp4_every_scale_byte():
    """All 256 UE4M3 bytes (bit 7 ignored, 0x7F and 0 read as zero) against gguf's decoder."""
    raw = np.zeros((64, 36), np.uint8)
    raw[:, :4] = np.arange(256, dtype=np.uint8).reshape(64, 4)
    raw[:, 4:] = 0x77   # code 7 (value 12) in every nibble
    want = gguf_quants.dequantize(raw, _gguf_type("NVFP4")).reshape(-1).astype(np.float32)
    got = dequantize(raw.reshape(-1), "NVFP4", 64 * 64)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ---- quantize ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_quantize_is_bit_exact(qtype, seed):
    x = _data(4096, seed, scale_range=(-30.0, 8.0) if seed else (-3.0, 2.0))
    ours = quantize(x, qtype)
    if qtype in GGUF_QUANTIZE:
        want = gguf_quants.quantize(x.reshape(1, -1), _gguf_type(qtype)).view(np.uint8).reshape(-1)
    elif qtype == "Q1_0":
        want = ref_quantize_q1_0(x)
    else:
        want = ref_quantize_nvfp4(x)
    np.testing.assert_array_equal(ours, want)


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_roundtrip_error_is_bounded(qtype):
    """What users see of a quantizer: the dequantized values are near the inputs, to the type's step."""
    x = _data(8192, seed=4)[1024:]
    y = dequantize(quantize(x, qtype), qtype, x.size)
    xb = x.reshape(-1, 16 if qtype == "NVFP4" else type_info(qtype).block_size)
    yb = y.reshape(xb.shape)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    if qtype == "Q1_0":   # signs kept, magnitude the block's mean |x|
        assert np.all((xb >= 0) == (yb > 0) | (yb == 0))
        np.testing.assert_allclose(np.abs(yb[:, 0]), np.abs(xb).mean(axis=1), rtol=1e-3)
    else:                 # FP4 codebook steps are at most 1/3 of the block's largest value, ternary 1/2
        bound = amax * (0.5 if qtype.startswith("TQ") else 1 / 3) + 1e-30
        assert np.all(np.abs(yb - xb) <= bound * 1.01)


# ---- vec_dot ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("blocks", [1, 3, 16])
def test_vec_dot_every_tier(qtype, blocks):
    n = blocks * 256
    w, x = _data(n + 256, seed=blocks)[256:], _data(n + 256, seed=blocks + 50)[256:]
    wq = quantize(w, qtype)
    xq = quantize(x, ACT[qtype])
    wd = dequantize(wq, qtype, n).astype(np.float64)
    xd = dequantize(xq, ACT[qtype], n).astype(np.float64)
    scale = np.abs(wd) @ np.abs(xd)
    base = _core.vec_dot(qid(qtype), wq, xq, n, "scalar")
    assert abs(base - wd @ xd) <= VEC_DOT_VS_DEQUANT_RTOL * scale
    # against the unquantized activations: off by at most the activation quantization step
    bound = np.abs(wd) @ act_halfstep(x.astype(np.float64), ACT[qtype]) + VEC_DOT_VS_DEQUANT_RTOL * scale
    assert abs(base - wd @ x.astype(np.float64)) <= bound
    for tier in usable_tiers():
        xt = quantize(x, ACT[qtype], tier=tier, reference=False)
        assert np.array_equal(xt, xq)
        got = _core.vec_dot(qid(qtype), wq, xq, n, tier)
        assert abs(got - base) <= TIER_VS_SCALAR_RTOL * scale, (tier, got, base)


@pytest.mark.parametrize("qtype", TYPES)
def test_qmatrix_matvec_matches_dequantized_product(qtype):
    rows, cols = 13, 512
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
    m = QMatrix(quantize(w, qtype), qtype, rows, cols, n_threads=2)
    x = rng.standard_normal(cols).astype(np.float32)
    wd = dequantize(m.data, qtype, rows * cols).reshape(rows, cols).astype(np.float64)
    xd = dequantize(quantize(x, ACT[qtype]), ACT[qtype], cols).astype(np.float64)
    np.testing.assert_allclose(m.matvec(x), wd @ xd, rtol=0, atol=1e-5 * float((np.abs(wd) @ np.abs(xd)).max()))


@pytest.mark.parametrize("qtype", TYPES)
def test_bad_lengths_raise_quant_error(qtype):
    info = type_info(qtype)
    with pytest.raises(QuantError):
        quantize(np.zeros(info.block_size + 32, np.float32) if info.block_size > 32 else np.zeros(48, np.float32),
                 qtype)
    with pytest.raises(QuantError):
        QMatrix(np.zeros(info.type_size * 2 - 1, np.uint8), qtype, 2, info.block_size)
