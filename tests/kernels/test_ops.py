"""Row ops: every usable tier against the scalar tier and against NumPy definitions."""
import math

import numpy as np
import pytest

from oxillama import _core

TIERS = _core.usable_tiers()
# float32 with an 8-lane sum or a polynomial exp differs from the double/libm scalar path by a few ulps
REL_TOL = 2e-6
EXP_REL_TOL = 2e-6
SIZES = [1, 7, 8, 31, 64, 256, 576, 640, 2048 + 3]


def _rand(n, seed, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n", SIZES)
def test_rms_norm(tier, n):
    x, w = _rand(n, 1), _rand(n, 2, 1.0)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean() + 1e-6) * w
    got = _core.op_rms_norm(x, w, 1e-6, tier)
    np.testing.assert_allclose(got, want, rtol=REL_TOL * 10, atol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n", SIZES)
def test_layer_norm(tier, n):
    x, w, b = _rand(n, 1), _rand(n, 2, 1.0), _rand(n, 3, 1.0)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-5) * w + b
    np.testing.assert_allclose(_core.op_layer_norm(x, w, b, 1e-5, tier), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n", SIZES)
def test_softmax(tier, n):
    x = _rand(n, 4, 10.0)
    e = np.exp(x.astype(np.float64) - x.max())
    got = _core.op_softmax(x, tier)
    np.testing.assert_allclose(got, e / e.sum(), rtol=1e-5, atol=1e-9)
    assert abs(got.sum() - 1.0) < 1e-5


@pytest.mark.parametrize("tier", TIERS)
def test_softmax_extreme_values(tier):
    x = np.array([-1e30, 0.0, 88.0, -88.0, 100.0] * 3, dtype=np.float32)
    got = _core.op_softmax(x, tier)
    assert np.isfinite(got).all()
    assert got.argmax() in (4, 9, 14) and abs(got.sum() - 1) < 1e-5


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh", "gelu_erf"])
@pytest.mark.parametrize("n", SIZES)
def test_gated_activations(tier, act, n):
    g, u = _rand(n, 5), _rand(n, 6)
    g64 = g.astype(np.float64)
    if act == "silu":
        a = g64 / (1 + np.exp(-g64))
    elif act == "gelu_tanh":
        a = 0.5 * g64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (g64 + 0.044715 * g64 ** 3)))
    else:
        a = 0.5 * g64 * (1 + np.vectorize(math.erf)(g64 / math.sqrt(2)))
    np.testing.assert_allclose(_core.op_gated_act(act, g, u, tier), a * u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n", SIZES)
def test_f16_dot_and_axpy(tier, n):
    x = _rand(n, 7)
    h = _rand(n, 8).astype(np.float16)
    want = float(x.astype(np.float64) @ h.astype(np.float64))
    assert _core.op_dot_f16(x, h.view(np.uint16), tier) == pytest.approx(want, rel=1e-5, abs=1e-4)
    y = _rand(n, 9)
    expect = y.astype(np.float64) + 0.5 * h.astype(np.float64)
    _core.op_axpy_f16(y, 0.5, h.view(np.uint16), tier)
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_fp32_to_fp16_rounds_like_numpy(tier):
    x = np.concatenate([_rand(1000, 10, 100.0), np.array([65504, 65520, 1e-8, -0.0, np.inf, -np.inf], np.float32)])
    np.testing.assert_array_equal(_core.op_fp32_to_fp16(x, tier).view(np.uint16), x.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n,hd", [(1, 64), (3, 64), (7, 256), (130, 64), (5, 72), (9, 20)])
def test_attention_over_f16_cache(tier, n, hd):
    rng = np.random.default_rng(n * hd)
    q = rng.standard_normal(hd).astype(np.float32)
    K = rng.standard_normal((n, hd)).astype(np.float16)
    V = rng.standard_normal((n, hd)).astype(np.float16)
    scores, out = _core.op_attn_f16(q, K.view(np.uint16), V.view(np.uint16), 0.125, tier)
    want = 0.125 * (K.astype(np.float64) @ q)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out, scores.astype(np.float64) @ V.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("G,n,hd,stride", [(1, 5, 64, 64), (2, 33, 64, 192), (3, 32, 64, 192), (4, 7, 256, 256),
                                           (5, 3, 64, 320), (7, 40, 24, 168), (3, 9, 20, 60), (8, 2, 128, 128),
                                           (3, 35, 64, 64), (2, 6, 96, 96), (3, 7, 48, 48), (6, 13, 64, 64)])
def test_attention_of_a_gqa_group_over_shared_rows(tier, G, n, hd, stride):
    """The heads of a group share each K/V row (converted once): the same as one head at a time, for
    groups smaller and larger than a kernel pass, odd row counts and head sizes not a multiple of 16."""
    rng = np.random.default_rng(G * n * hd)
    q = rng.standard_normal((G, hd)).astype(np.float32)
    K = rng.standard_normal((n, stride)).astype(np.float16)
    V = rng.standard_normal((n, stride)).astype(np.float16)
    scores, out = _core.op_attn_f16_group(q, K.view(np.uint16), V.view(np.uint16), 0.125, stride, tier)
    want = 0.125 * (q.astype(np.float64) @ K[:, :hd].astype(np.float64).T)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out, scores.astype(np.float64) @ V[:, :hd].astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("d_state,n", [(1, 1), (16, 16), (128, 64), (7, 45), (3, 8)])
def test_ssm_scan_states(tier, d_state, n):
    """Mamba-2's scan over the states of one head (h[s] = h[s] dA + B[s] xdt; y += h[s] C[s], s in order)
    against NumPy in float64, and every tier against the scalar tier."""
    rng = np.random.default_rng(d_state * 100 + n)
    h0 = rng.standard_normal((d_state, n)).astype(np.float32)
    B, C, xdt, y0 = (rng.standard_normal(k).astype(np.float32) for k in (d_state, d_state, n, n))
    dA = 0.83
    want_h = h0.astype(np.float64) * dA + B[:, None].astype(np.float64) * xdt
    want_y = y0 + (want_h * C[:, None]).sum(0)
    got = {}
    for t in (tier, "scalar"):
        h, y = h0.copy(), y0.copy()
        _core.op_ssm_scan_states(h, B, C, xdt, dA, y, t)
        got[t] = (h, y)
    h, y = got[tier]
    h2, y2 = h0.copy(), y0.copy()   # without the prefetch of a streamed state: a hint, the same floats
    _core.op_ssm_scan_states(h2, B, C, xdt, dA, y2, tier, stream=False)
    np.testing.assert_array_equal(h2, h)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-4 * d_state ** 0.5)
    np.testing.assert_allclose(y, got["scalar"][1], rtol=1e-5, atol=1e-4 * d_state ** 0.5)


def _conv_ref(x, state, w, b, silu):
    """NumPy float64 causal conv: the rows of x after state's L - 1 rows, each output the L-tap window"""
    L = w.shape[1]
    full = np.concatenate([state, x]).astype(np.float64)
    y = np.stack([(full[t:t + L].T * w).sum(1) for t in range(x.shape[0])])
    if b is not None:
        y = y + b
    return y / (1 + np.exp(-y)) if silu else y


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("n_ch,L,bias,silu", [(3328, 4, True, True), (45, 3, False, False), (7, 4, False, True),
                                              (33, 2, True, False), (20, 1, True, True)])
def test_causal_conv(tier, n_ch, L, bias, silu):
    """The one causal conv of the recurrent layers (kernels.h) against NumPy and the scalar tier; the state it
    leaves is the last L - 1 inputs; a prompt whole, in chunks or token by token, and any channel split, gives
    the same floats (the invariant)."""
    rng = np.random.default_rng(n_ch * 10 + L)
    n = 11
    x = rng.standard_normal((n, n_ch)).astype(np.float32)
    w = (rng.standard_normal((n_ch, L)) * 0.5).astype(np.float32)
    b = rng.standard_normal(n_ch).astype(np.float32) if bias else None
    s0 = rng.standard_normal((L - 1, n_ch)).astype(np.float32)
    st = s0.copy()
    y = _core.op_causal_conv(x, st, w, b, silu, tier=tier)
    np.testing.assert_allclose(y, _conv_ref(x, s0, w, b, silu), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(st, np.concatenate([s0, x])[n:])
    ref_st = s0.copy()
    np.testing.assert_allclose(y, _core.op_causal_conv(x, ref_st, w, b, silu, tier="scalar"), rtol=1e-5, atol=1e-5)
    for cuts in ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [0, 5, 11], [0, 2, 9, 11]):
        st2 = s0.copy()
        parts = [_core.op_causal_conv(np.ascontiguousarray(x[a:e]), st2, w, b, silu, tier=tier)
                 for a, e in zip(cuts, cuts[1:])]
        np.testing.assert_array_equal(np.concatenate(parts), y)
        np.testing.assert_array_equal(st2, st)
    st3 = s0.copy()
    split = [0, 5, 21, n_ch] if n_ch > 21 else [0, n_ch // 2, n_ch]
    y3 = sum(_core.op_causal_conv(x, st3, w, b, silu, c0=a, c1=e, tier=tier) for a, e in zip(split, split[1:]))
    np.testing.assert_array_equal(y3, y)
    np.testing.assert_array_equal(st3, st)


@pytest.mark.skipif(not {"avx2", "avx512"} <= set(TIERS), reason="needs the AVX2 and AVX-512 tiers")
def test_recurrent_ops_same_floats_in_avx2_and_avx512():
    """The AVX-512 scan and conv do every lane's arithmetic as the AVX2 tier does (same fused operations, the
    same polynomial exp), so a model's logits do not change between those two machines' tiers."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((9, 3329)) * 3).astype(np.float32)
    w, b = rng.standard_normal((3329, 4)).astype(np.float32), rng.standard_normal(3329).astype(np.float32)
    convs = [_core.op_causal_conv(x, np.zeros((3, 3329), np.float32), w, b, True, tier=t) for t in ("avx2", "avx512")]
    np.testing.assert_array_equal(convs[0], convs[1])
    h0 = rng.standard_normal((128, 67)).astype(np.float32)
    B, C, xdt = (rng.standard_normal(k).astype(np.float32) for k in (128, 128, 67))
    out = []
    for t in ("avx2", "avx512"):
        h, y = h0.copy(), np.zeros(67, np.float32)
        _core.op_ssm_scan_states(h, B, C, xdt, 0.8, y, t)
        out.append((h, y))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
