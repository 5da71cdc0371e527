"""The float and 32-value block types (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL):
dequantize and reference quantize bit for bit against gguf.quants and independent NumPy code,
vec_dot on every usable tier against the scalar tier and a float reference."""
import numpy as np
import pytest

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

from oxillama import _core  # noqa: E402
from oxillama.errors import QuantError  # noqa: E402
from oxillama.quant import dequantize, quantize, type_info  # noqa: E402

from .helpers import (ACT_TYPE, FLOAT_TYPES, LEGACY_TYPES, act_halfstep, qid, ref_dequantize,  # noqa: E402
                      ref_quantize_iq4_nl, ref_quantize_q8_1, rng_rows, usable_tiers)

ALL_TYPES = LEGACY_TYPES + FLOAT_TYPES
GGUF_QUANTIZE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16")   # gguf.quants has a reference quantizer
GGUF_DEQUANTIZE = GGUF_QUANTIZE + ("IQ4_NL",)

# tier vs scalar: same integer block sums, only the float summation order differs
TIER_VS_SCALAR_RTOL = 2e-6
# scalar vec_dot vs float64 dot of the dequantized operands (float32 accumulation of block terms)
VEC_DOT_VS_DEQUANT_RTOL = 2e-6

# sizes: the smallest row, odd block counts, and rows met in real models (576 = SmolLM2 n_embd,
# 640 = Gemma-3-270m n_embd, 1536 = SmolLM2 n_ff, 2048 = Gemma-3-270m n_ff)
SIZES = (32, 96, 576, 640, 1536, 2048, 4096 + 32)


def _gguf_type(name):
    return GGMLQuantizationType[name]


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng_rows(rng, 1, n).reshape(-1)
    return x


def _edge_blocks():
    """Blocks that stress rounding and sign handling: zeros, ties, single outliers, negatives."""
    rng = np.random.default_rng(7)
    b = [np.zeros(32), np.full(32, 1.0), np.full(32, -2.5), np.linspace(-1, 1, 32),
         np.where(np.arange(32) == 5, -7.0, 0.25), np.where(np.arange(32) == 31, 1e4, 1e-3),
         np.arange(32) - 15.5, (np.arange(32) % 3 - 1) * 127.0, rng.standard_normal(32) * 1e-6,
         rng.standard_normal(32) * 3e3]
    return np.concatenate(b).astype(np.float32)


def _reference_quantize(x, qtype):
    if qtype == "Q8_1":
        return ref_quantize_q8_1(x)
    if qtype == "IQ4_NL":
        return ref_quantize_iq4_nl(x)
    if qtype == "F32":
        return x.view(np.uint8)
    return gguf_quants.quantize(x, _gguf_type(qtype)).view(np.uint8).reshape(-1)


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_c_table_matches_python_table(qtype):
    name, bs, ts, _q, vdt, has_deq, has_q, has_dot = _core.type_table()[qid(qtype)]
    info = type_info(qtype)
    assert (name, bs, ts) == (qtype, info.block_size, info.type_size)
    assert vdt == qid(ACT_TYPE[qtype])
    assert has_deq and has_q and has_dot


@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("n", [32, 640, 4096])
def test_reference_quantize_is_bit_exact(qtype, n):
    x = np.concatenate([_edge_blocks(), _data(n, seed=n)])
    ours = quantize(x, qtype)
    want = _reference_quantize(x, qtype)
    assert ours.dtype == np.uint8 and ours.nbytes == type_info(qtype).row_bytes(x.size)
    np.testing.assert_array_equal(ours, want)


def test_numpy_q8_1_reference_agrees_with_gguf_q8_0():
    """The NumPy Q8_1 reference shares d and qs with Q8_0, which gguf.quants covers."""
    x = _data(1024, seed=3)
    q81 = ref_quantize_q8_1(x).reshape(-1, 36)
    q80 = gguf_quants.quantize(x, _gguf_type("Q8_0")).view(np.uint8).reshape(-1, 34)
    np.testing.assert_array_equal(q81[:, :2], q80[:, :2])
    np.testing.assert_array_equal(q81[:, 4:], q80[:, 2:])


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_dequantize_is_bit_exact(qtype):
    rng = np.random.default_rng(11)
    info = type_info(qtype)
    nb = 37
    if info.block_size == 1:
        raw = rng.standard_normal(nb * 32).astype(np.float32)
        raw = quantize(raw, qtype)
    else:
        # random bytes, with scales forced to finite fp16 so every bit pattern of qs/qh is covered
        raw = rng.integers(0, 256, size=nb * info.type_size, dtype=np.uint8).reshape(nb, -1)
        n_half = 2 if qtype in ("Q4_1", "Q5_1", "Q8_1") else 1
        raw[:, :2 * n_half] = rng.standard_normal((nb, n_half)).astype(np.float16).view(np.uint8)
        raw = raw.reshape(-1)
    n = nb * 32
    ours = dequantize(raw, qtype, n)
    np.testing.assert_array_equal(ours.view(np.uint32), ref_dequantize(raw, qtype).view(np.uint32))
    if qtype in GGUF_DEQUANTIZE:
        want = gguf_quants.dequantize(raw, _gguf_type(qtype)).reshape(-1).astype(np.float32)
        np.testing.assert_array_equal(ours.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_every_tier_dequantizes_the_same(qtype):
    x = _data(640, seed=5)
    q = quantize(x, qtype)
    base = dequantize(q, qtype, x.size, tier="scalar")
    for tier in usable_tiers():
        np.testing.assert_array_equal(dequantize(q, qtype, x.size, tier=tier), base)


@pytest.mark.parametrize("act", ["Q8_0", "Q8_1"])
def test_fast_activation_quantizer_matches_reference_on_every_tier(act):
    x = np.concatenate([_edge_blocks(), _data(4096, seed=9)])
    want = quantize(x, act)
    for tier in usable_tiers():
        np.testing.assert_array_equal(quantize(x, act, tier=tier, reference=False), want, err_msg=tier)


def _act(x, qtype, tier):
    at = ACT_TYPE[qtype]
    return x.view(np.uint8) if at == "F32" else quantize(x, at, tier=tier, reference=False)


def _s_term_rounding(wq, xq, qtype):
    """Q4_1/Q5_1 use the activation block's s = fp16(d * sum(q)): at most 2^-11 |m s| off per block."""
    if qtype not in ("Q4_1", "Q5_1"):
        return 0.0
    m = wq.reshape(-1, type_info(qtype).type_size)[:, 2:4].copy().view(np.float16).astype(np.float64)
    s = xq.reshape(-1, 36)[:, 2:4].copy().view(np.float16).astype(np.float64)
    return float(np.sum(np.abs(m * s))) * 2.0 ** -11


@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("n", SIZES)
def test_vec_dot_every_tier(qtype, n):
    w = _data(n, seed=n + 1)
    x = _data(n, seed=n + 2)
    wq = quantize(w, qtype)
    xq = _act(x, qtype, "scalar")
    wd = dequantize(wq, qtype, n).astype(np.float64)
    xd = x.astype(np.float64) if ACT_TYPE[qtype] == "F32" else dequantize(xq, ACT_TYPE[qtype], n).astype(np.float64)
    scale = np.abs(wd) @ np.abs(xd)
    exact = wd @ xd
    base = _core.vec_dot(qid(qtype), wq, xq, n, "scalar")
    assert abs(base - exact) <= VEC_DOT_VS_DEQUANT_RTOL * scale + _s_term_rounding(wq, xq, qtype)
    # against the unquantized activations: the error is bounded by the activation quantization step
    bound = (np.abs(wd) @ act_halfstep(x.astype(np.float64), ACT_TYPE[qtype]) + VEC_DOT_VS_DEQUANT_RTOL * scale
             + _s_term_rounding(wq, xq, qtype))
    assert abs(base - wd @ x.astype(np.float64)) <= bound
    for tier in usable_tiers():
        got = _core.vec_dot(qid(qtype), wq, xq, n, tier)
        assert abs(got - base) <= TIER_VS_SCALAR_RTOL * scale, (tier, got, base)


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "IQ4_NL", "Q5_0"])
def test_vec_dot_extreme_int8_weights(qtype):
    """Q8_0 weights of -128 (legal in a file, never produced by quantize) and saturating patterns."""
    n = 256
    rng = np.random.default_rng(1)
    info = type_info(qtype)
    raw = rng.integers(0, 256, size=(n // 32, info.type_size), dtype=np.uint8)
    raw[:, :2] = np.full((n // 32, 1), 0.5, np.float16).view(np.uint8)
    if qtype == "Q8_0":
        raw[:, 2:] = np.uint8(0x80)   # every weight -128
    raw = raw.reshape(-1)
    x = np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(np.float32) * 3
    xq = quantize(x, "Q8_0")
    exact = dequantize(raw, qtype, n).astype(np.float64) @ dequantize(xq, "Q8_0", n).astype(np.float64)
    for tier in usable_tiers():
        assert _core.vec_dot(qid(qtype), raw, xq, n, tier) == pytest.approx(exact, rel=1e-6, abs=1e-3), tier


def test_bad_inputs_raise_quant_error():
    x = np.zeros(64, np.float32)
    q = quantize(x, "Q4_0")
    with pytest.raises(QuantError, match="bytes"):
        dequantize(q[:-1], "Q4_0", 64)
    with pytest.raises(QuantError, match="multiple of the block size"):
        dequantize(q, "Q4_0", 48)
    with pytest.raises(QuantError, match="multiple of the block size"):
        quantize(np.zeros(48, np.float32), "Q5_1")
    with pytest.raises(QuantError, match="unknown quant type"):
        quantize(x, "Q4_7")
    with pytest.raises(QuantError, match="unknown quant type"):
        dequantize(q, 99, 64)
    with pytest.raises(QuantError, match="not supported"):
        dequantize(q, "F64", 8)
    with pytest.raises(QuantError, match="float32"):
        quantize(x.astype(np.float64), "Q8_0")
    with pytest.raises(QuantError, match="contiguous"):
        quantize(np.zeros(128, np.float32)[::2], "Q8_0")
    with pytest.raises(QuantError, match="uint8"):
        dequantize(q.view(np.int8), "Q4_0", 64)
    with pytest.raises(QuantError, match="contiguous"):
        dequantize(np.zeros(72, np.uint8)[::2], "Q4_0", 32 * 2 // 2)
    with pytest.raises(QuantError, match="byte lengths"):
        _core.vec_dot(qid("Q4_0"), q, quantize(x, "Q8_0")[:-1], 64)
    with pytest.raises(ValueError, match="tier"):
        dequantize(q, "Q4_0", 64, tier="no-such-tier")


def test_active_kernels_are_simd_where_available():
    """With AVX2 active every type here has an AVX2 vec_dot (not the scalar fallback)."""
    if _core.active_tier() != "avx2":
        pytest.skip("AVX2 is not the active tier")
    kernels = _core.kernel_tiers()
    for qtype in ALL_TYPES:
        assert kernels[qtype] == "avx2", qtype
