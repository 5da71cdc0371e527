"""K-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) and Q8_K activations.

Oracles:
* dequantize: the PyPI `gguf` package (gguf.quants) and the independent NumPy dequantizers below,
  both compared bit for bit;
* reference quantize: NumPy re-implementations of ggml's quantize_row_*_ref below, which replay the
  same float32 operations in the same order, so the bytes must match exactly (gguf.quants does not
  implement K-quant quantization);
* vec_dot / QMatrix: every usable SIMD tier against the scalar tier and against a float64 dot of
  the dequantized weights and dequantized Q8_K activations.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oxillama import _core
from oxillama.errors import QuantError
from oxillama.quant import QMatrix, dequantize, quantize, row_bytes, type_info

gguf = pytest.importorskip("gguf")
import gguf.quants as gq  # noqa: E402

F = np.float32
QK_K = 256
K_TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
ALL_TYPES = K_TYPES + ["Q8_K"]
TIERS = _core.usable_tiers()
SIMD_TIERS = [t for t in TIERS if t != "scalar"]
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)

# vec_dot results may differ between tiers and from the float64 reference only by float32 rounding
# of the per-block scale products and of the sum over blocks: bound the error relative to sum|w*a|.
DOT_TOL_VS_SCALAR = 1e-5
DOT_TOL_VS_FLOAT = 2e-5
# round-trip RMS error / RMS of the input for Gaussian data, per type (ggml's own quantizers reach
# about 0.9x these on the same data).
ROUNDTRIP_REL_RMSE = {"Q2_K": 0.40, "Q3_K": 0.20, "Q4_K": 0.09, "Q5_K": 0.045, "Q6_K": 0.025,
                      "IQ4_XS": 0.09, "Q8_K": 0.01}
# vec_dot sizes: one block, an odd number of blocks, Gemma 3 270M's feed-forward width, a large row
DOT_SIZES = [256, 7 * 256, 2048, 64 * 256]
GEMMA3_FILE = Path.home() / ".cache" / "oxillama" / "models" / "gemma-3-270m-q4_k_m.gguf"


def tid(qtype: str) -> int:
    return int(type_info(qtype).qtype)


def fp16_to_f32(h: np.ndarray) -> np.ndarray:
    """fp16 bits (uint16 array, or uint8 array whose last axis is one 2-byte field) -> float32"""
    h = np.ascontiguousarray(h)
    if h.dtype == np.uint8:
        h = h.view(np.uint16)[..., 0]
    return h.view(np.float16).astype(F)


def f32_to_fp16_bits(x) -> np.ndarray:
    return np.asarray(x, F).astype(np.float16).view(np.uint16)


def blocks(data: np.ndarray, qtype: str) -> np.ndarray:
    return np.asarray(data, np.uint8).reshape(-1, type_info(qtype).type_size)


# ------------------------------------------------------------------ independent NumPy dequantizers
# Each follows the layout description in ggml-common.h; float32 products in ggml's order.

def unpack_scale_min_k4(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nb, 12) packed bytes -> (nb, 8) scales, (nb, 8) mins, 6 bits each."""
    sc = sc.astype(np.int32)
    scales = np.empty((sc.shape[0], 8), np.int32)
    mins = np.empty_like(scales)
    scales[:, :4] = sc[:, 0:4] & 63
    mins[:, :4] = sc[:, 4:8] & 63
    scales[:, 4:] = (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)
    mins[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return scales, mins


def unpack_2bit(qs: np.ndarray) -> np.ndarray:
    """(nb, 64) bytes -> (nb, 256) 2-bit values: value 128h + 32k + l is bits 2k of byte 32h + l."""
    q = qs.reshape(-1, 2, 1, 32).astype(np.int32) >> (2 * np.arange(4).reshape(1, 1, 4, 1))
    return (q & 3).reshape(-1, QK_K)


def unpack_q3k_scales(sc: np.ndarray) -> np.ndarray:
    sc = sc.astype(np.int32)
    j = np.arange(16)
    lo = np.where(j < 8, sc[:, j % 8] & 0xF, sc[:, j % 8] >> 4)
    hi = (sc[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return (lo | (hi << 4)) - 32


def np_dequantize(data: np.ndarray, qtype: str) -> np.ndarray:
    b = blocks(data, qtype)
    nb = b.shape[0]
    if qtype == "Q2_K":
        scales, qs = b[:, :16], b[:, 16:80]
        d, dmin = fp16_to_f32(b[:, 80:82]), fp16_to_f32(b[:, 82:84])
        dl = d[:, None] * (scales & 0xF).astype(F)
        ml = dmin[:, None] * (scales >> 4).astype(F)
        q = unpack_2bit(qs).reshape(nb, 16, 16).astype(F)
        return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1)
    if qtype == "Q3_K":
        hmask, qs, sc, d = b[:, :32], b[:, 32:96], b[:, 96:108], fp16_to_f32(b[:, 108:110])
        v = np.arange(QK_K)
        hbit = (hmask[:, v % 32].astype(np.int32) >> (v // 32)) & 1
        q = unpack_2bit(qs) - np.where(hbit == 1, 0, 4)
        dl = d[:, None] * unpack_q3k_scales(sc).astype(F)
        return (dl[:, :, None] * q.reshape(nb, 16, 16).astype(F)).reshape(-1)
    if qtype in ("Q4_K", "Q5_K"):
        d, dmin = fp16_to_f32(b[:, 0:2]), fp16_to_f32(b[:, 2:4])
        scales, mins = unpack_scale_min_k4(b[:, 4:16])
        if qtype == "Q4_K":
            qs = b[:, 16:144].reshape(nb, 4, 32).astype(np.int32)
            hi = np.zeros((nb, 8, 32), np.int32)
        else:
            qh = b[:, 16:48].astype(np.int32)
            qs = b[:, 48:176].reshape(nb, 4, 32).astype(np.int32)
            hi = ((qh[:, None, :] >> np.arange(8).reshape(1, 8, 1)) & 1) << 4
        q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(nb, 8, 32) + hi
        d1 = d[:, None] * scales.astype(F)
        m1 = dmin[:, None] * mins.astype(F)
        return (d1[:, :, None] * q.astype(F) - m1[:, :, None]).reshape(-1)
    if qtype == "Q6_K":
        ql, qh = b[:, :128].astype(np.int32), b[:, 128:192].astype(np.int32)
        sc = b[:, 192:208].view(np.int8).astype(F)
        d = fp16_to_f32(b[:, 208:210])
        q = np.empty((nb, 2, 4, 32), np.int32)
        for h in range(2):
            for k in range(4):
                lo = (ql[:, 64 * h + 32 * (k % 2): 64 * h + 32 * (k % 2) + 32] >> (4 * (k // 2))) & 0xF
                q[:, h, k] = lo | (((qh[:, 32 * h: 32 * h + 32] >> (2 * k)) & 3) << 4)
        q = (q.reshape(nb, 16, 16) - 32).astype(F)
        return ((d[:, None] * sc)[:, :, None] * q).reshape(-1)
    if qtype == "IQ4_XS":
        d = fp16_to_f32(b[:, 0:2])
        sh = b[:, 2:4].copy().view(np.uint16).astype(np.int32)  # (nb, 1)
        sl = b[:, 4:8].astype(np.int32)
        qs = b[:, 8:136].reshape(nb, 8, 16).astype(np.int32)
        ib = np.arange(8)
        ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)
        dl = d[:, None] * (ls - 32).astype(F)
        idx = np.concatenate([qs & 0xF, qs >> 4], axis=2)
        return (dl[:, :, None] * KVALUES_IQ4NL[idx].astype(F)).reshape(-1)
    if qtype == "Q8_K":
        d = b[:, 0:4].copy().view(F)
        qs = b[:, 4:260].view(np.int8).astype(F)
        return (d * qs).reshape(-1)
    raise ValueError(qtype)


# ------------------------------------------------------------------ NumPy replay of ggml's reference quantizers
# Vectorised over blocks; every sum that ggml accumulates in a loop is accumulated sequentially here,
# in float32, so the rounding is the same.

GROUP_MAX_EPS = F(1e-15)


def nearest_int(f) -> np.ndarray:
    v = (np.asarray(f, F) + F(12582912.0)).astype(F)
    return (v.view(np.int32) & 0x7FFFFF) - 0x400000


def seq_sum(terms: np.ndarray) -> np.ndarray:
    """sum over the last axis, left to right, in float32"""
    acc = np.zeros(terms.shape[:-1], F)
    for i in range(terms.shape[-1]):
        acc = acc + terms[..., i]
    return acc


def signed_absmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max |x|, the first x of that magnitude) over the last axis; 0 for all-zero rows"""
    i = np.argmax(np.abs(x), axis=-1)
    mx = np.take_along_axis(x, i[..., None], -1)[..., 0]
    return np.abs(mx), mx


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml make_qx_quants(n, nmax, x, L, rmse_type=1, NULL) for each row of x."""
    amax, mx = signed_absmax(x)
    w = x * x
    safe = np.where(amax < GROUP_MAX_EPS, F(1), mx)

    def levels(iscale):
        return np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)

    def sums(lv):
        lf = lv.astype(F)
        return seq_sum(w * x * lf), seq_sum(w * lf * lf)

    l = levels(F(-nmax) / safe)
    L = l + nmax
    sumlx, suml2 = sums(l)
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F(1)), F(0))
    best = scale * sumlx
    for is_ in range(-9, 10):
        if is_ == 0:
            continue
        l = levels(-(F(nmax) + F(0.1) * F(is_)) / safe)
        sumlx, suml2 = sums(l)
        with np.errstate(divide="ignore", invalid="ignore"):
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            new_scale = sumlx / suml2
        L = np.where(better[:, None], l + nmax, L)
        scale = np.where(better, new_scale, scale)
        best = np.where(better, scale * sumlx, best)
    zero = amax < GROUP_MAX_EPS
    return np.where(zero, F(0), scale), np.where(zero[:, None], 0, L)


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml make_q3_quants(n, nmax, x, L, do_rmse=true) for each row of x."""
    amax, mx = signed_absmax(x)
    safe = np.where(amax < GROUP_MAX_EPS, F(1), mx)
    L = np.clip(nearest_int((F(-nmax) / safe)[:, None] * x), -nmax, nmax - 1)
    w = x * x
    lf = L.astype(F)
    sumlx, suml2 = seq_sum(w * x * lf), seq_sum(w * lf * lf)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(5):
            for i in range(x.shape[1]):
                xi, wi, li = x[:, i], w[:, i], L[:, i].astype(F)
                slx = sumlx - wi * xi * li
                sl2 = suml2 - wi * li * li
                new_l = np.clip(nearest_int(np.where(slx > 0, xi * sl2 / slx, F(0))), -nmax, nmax - 1)
                nf = new_l.astype(F)
                slx2 = slx + wi * xi * nf
                sl22 = sl2 + wi * nf * nf
                take = (slx > 0) & (new_l != L[:, i]) & (sl22 > 0) & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22)
                L[:, i] = np.where(take, new_l, L[:, i])
                sumlx = np.where(take, slx2, sumlx)
                suml2 = np.where(take, sl22, suml2)
        scale = np.where(suml2 > 0, sumlx / suml2, F(0))
    zero = amax < GROUP_MAX_EPS
    return np.where(zero, F(0), scale), np.where(zero[:, None], 0, L + nmax)


def make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep, use_mad):
    """ggml make_qkx2_quants for each row of x: returns (scale, the_min, L)."""
    n = x.shape[1]
    mn = np.minimum(np.min(x, axis=1), F(0))
    mx = np.max(x, axis=1)
    sum_w = seq_sum(weights)
    sum_x = seq_sum(weights * x)
    flat = mx == mn
    rng = np.where(flat, F(1), mx - mn)

    def err(scale, mn_, lv):
        diff = scale[:, None] * lv.astype(F) + mn_[:, None] - x
        diff = np.abs(diff) if use_mad else diff * diff
        return seq_sum(weights * diff)

    iscale = F(nmax) / rng
    scale = F(1) / iscale
    L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    best_error = err(scale, mn, L)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for is_ in range(nstep + 1):
            # ggml keeps refitting from the best min so far
            iscale = (F(rmin) + F(rdelta) * F(is_) + F(nmax)) / np.where(flat, F(1), mx - mn)
            laux = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
            lf = laux.astype(F)
            sum_l = seq_sum(weights * lf)
            sum_l2 = seq_sum(weights * lf * lf)
            sum_xl = seq_sum(weights * lf * x)
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min = np.where(pos, F(0), this_min)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
            cur = err(this_scale, this_min, laux)
            better = (D > 0) & (cur < best_error)
            L = np.where(better[:, None], laux, L)
            best_error = np.where(better, cur, best_error)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    return np.where(flat, F(0), scale), -mn, np.where(flat[:, None], 0, L)


def pack_2bit(L: np.ndarray) -> np.ndarray:
    q = L.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def np_quantize_q8_K(x: np.ndarray) -> np.ndarray:
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    amax, mx = signed_absmax(xb)
    zero = amax == 0
    iscale = F(-127.0) / np.where(zero, F(1), mx)
    q = np.minimum(127, nearest_int(iscale[:, None] * xb))
    q[zero] = 0
    d = np.where(zero, F(0), F(1) / iscale)
    out = np.zeros((nb, 292), np.uint8)
    out[:, 0:4] = d.astype(F).reshape(-1, 1).view(np.uint8)
    out[:, 4:260] = q.astype(np.int8).view(np.uint8)
    out[:, 260:292] = q.reshape(nb, 16, 16).sum(axis=2).astype(np.int16).view(np.uint8)
    return out.reshape(-1)


def np_quantize_q6_K(x: np.ndarray) -> np.ndarray:
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    sub = xb.reshape(-1, 16)
    scales, L = make_qx_quants(sub, 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    amax, max_scale = signed_absmax(scales)
    zero = amax < GROUP_MAX_EPS
    iscale = F(-128.0) / np.where(zero, F(1), max_scale)
    d16 = f32_to_fp16_bits(F(1) / iscale)
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)
    dl = fp16_to_f32(d16)[:, None] * sc.astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.clip(nearest_int(xb.reshape(nb, 16, 16) / np.where(dl == 0, F(1), dl)[:, :, None]), -32, 31) + 32
    L = np.where((dl != 0)[:, :, None], lq, L).reshape(nb, 2, 4, 32)
    ql = np.stack([(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4), (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)],
                  axis=2).reshape(nb, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6))
    out = np.zeros((nb, 210), np.uint8)
    out[:, :128] = ql
    out[:, 128:192] = qh.reshape(nb, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d16.reshape(-1, 1).view(np.uint8)
    out[zero] = 0
    return out.reshape(-1)


def np_quantize_k4(x: np.ndarray, qtype: str) -> np.ndarray:
    """Q4_K / Q5_K (quantize_row_q{4,5}_K_ref)."""
    nmax, rmin, nstep = (15, -1.0, 20) if qtype == "Q4_K" else (31, -0.5, 15)
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    sub = xb.reshape(-1, 32)
    av_x = np.sqrt(seq_sum(sub * sub) / F(32))
    weights = av_x[:, None] + np.abs(sub)
    scales, mins, L = make_qkx2_quants(sub, weights, nmax, rmin, 0.1, nstep, False)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    inv_scale = np.where(max_scale > 0, F(63) / np.where(max_scale > 0, max_scale, F(1)), F(0))
    inv_min = np.where(max_min > 0, F(63) / np.where(max_min > 0, max_min, F(1)), F(0))
    ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF)
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF)
    sc = np.zeros((nb, 12), np.int64)
    sc[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    sc[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    sc[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    d16, dmin16 = f32_to_fp16_bits(max_scale / F(63)), f32_to_fp16_bits(max_min / F(63))
    s_unp, m_unp = unpack_scale_min_k4(sc.astype(np.uint8))
    dl = fp16_to_f32(d16)[:, None] * s_unp.astype(F)
    dm = fp16_to_f32(dmin16)[:, None] * m_unp.astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.clip(nearest_int((xb.reshape(nb, 8, 32) + dm[:, :, None]) / np.where(dl == 0, F(1), dl)[:, :, None]),
                     0, nmax)
    L = np.where((dl != 0)[:, :, None], lq, L).reshape(nb, 4, 2, 32)
    head = np.zeros((nb, 16), np.uint8)
    head[:, 0:2] = d16.reshape(-1, 1).view(np.uint8)
    head[:, 2:4] = dmin16.reshape(-1, 1).view(np.uint8)
    head[:, 4:16] = sc
    qs = ((L[:, :, 0] & 0xF) | ((L[:, :, 1] & 0xF) << 4)).reshape(nb, 128).astype(np.uint8)
    if qtype == "Q4_K":
        return np.concatenate([head, qs], axis=1).reshape(-1)
    hb = (L >> 4).reshape(nb, 8, 32)
    qh = np.zeros((nb, 32), np.int64)
    for j in range(8):
        qh |= hb[:, j] << j
    return np.concatenate([head, qh.astype(np.uint8), qs], axis=1).reshape(-1)


def np_quantize_q2_K(x: np.ndarray) -> np.ndarray:
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    sub = xb.reshape(-1, 16)
    scales, mins, L = make_qkx2_quants(sub, np.abs(sub), 3, -0.5, 0.1, 15, True)
    scales, mins, L = scales.reshape(nb, 16), mins.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    has_s, has_m = max_scale > 0, max_min > 0
    sc = np.where(has_s[:, None], nearest_int((F(15) / np.where(has_s, max_scale, F(1)))[:, None] * scales), 0)
    lm = nearest_int((F(15) / np.where(has_m, max_min, F(1)))[:, None] * mins)
    sc = np.where(has_m[:, None], sc | (lm << 4), sc) & 0xFF
    d16 = np.where(has_s, f32_to_fp16_bits(max_scale / F(15)), f32_to_fp16_bits(F(0)))
    dmin16 = np.where(has_m, f32_to_fp16_bits(max_min / F(15)), f32_to_fp16_bits(F(0)))
    dl = fp16_to_f32(d16.astype(np.uint16))[:, None] * (sc & 0xF).astype(F)
    dm = fp16_to_f32(dmin16.astype(np.uint16))[:, None] * (sc >> 4).astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.clip(nearest_int((xb.reshape(nb, 16, 16) + dm[:, :, None]) / np.where(dl == 0, F(1), dl)[:, :, None]),
                     0, 3)
    L = np.where((dl != 0)[:, :, None], lq, L).reshape(nb, QK_K)
    out = np.zeros((nb, 84), np.uint8)
    out[:, :16] = sc
    out[:, 16:80] = pack_2bit(L)
    out[:, 80:82] = d16.astype(np.uint16).reshape(-1, 1).view(np.uint8)
    out[:, 82:84] = dmin16.astype(np.uint16).reshape(-1, 1).view(np.uint8)
    return out.reshape(-1)


def np_quantize_q3_K(x: np.ndarray) -> np.ndarray:
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    scales, L = make_q3_quants(xb.reshape(-1, 16), 4)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    amax, max_scale = signed_absmax(scales)
    has = max_scale != 0
    iscale = F(-32) / np.where(has, max_scale, F(1))
    l = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8).astype(np.int64), -32, 31) + 32
    l = np.where(has[:, None], l, 32)
    sc = np.zeros((nb, 12), np.int64)
    sc[:, :8] = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    for j in range(16):
        sc[:, 8 + j % 4] |= (l[:, j] >> 4) << (2 * (j // 4))
    sc = np.where(has[:, None], sc, 0).astype(np.uint8)
    d16 = np.where(has, f32_to_fp16_bits(F(1) / iscale), f32_to_fp16_bits(F(0))).astype(np.uint16)
    dl = fp16_to_f32(d16)[:, None] * unpack_q3k_scales(sc).astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.clip(nearest_int(xb.reshape(nb, 16, 16) / np.where(dl == 0, F(1), dl)[:, :, None]), -4, 3) + 4
    L = np.where((dl != 0)[:, :, None], lq, L).reshape(nb, QK_K)
    hmask = np.zeros((nb, 32), np.int64)
    for j in range(8):
        hmask |= (L[:, 32 * j: 32 * j + 32] > 3).astype(np.int64) << j
    L = np.where(L > 3, L - 4, L)
    out = np.zeros((nb, 110), np.uint8)
    out[:, :32] = hmask
    out[:, 32:96] = pack_2bit(L)
    out[:, 96:108] = sc
    out[:, 108:110] = d16.reshape(-1, 1).view(np.uint8)
    return out.reshape(-1)


def best_index_iq4(x: np.ndarray) -> np.ndarray:
    x2 = x + x
    idx = np.zeros(x.shape, np.int64)
    kv = KVALUES_IQ4NL.astype(np.int64)
    for step in (8, 4, 2, 1):
        j = idx + step
        idx = np.where(x2 >= (kv[j - 1] + kv[j]).astype(F), j, idx)
    return idx


def np_quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    xb = x.reshape(-1, QK_K)
    nb = xb.shape[0]
    sub = xb.reshape(-1, 32)
    w = sub * sub
    amax, mx = signed_absmax(sub)
    zero = amax < GROUP_MAX_EPS
    mx = np.where(zero, F(1), mx)
    kv = KVALUES_IQ4NL.astype(F)

    def fit(id_):
        q = kv[best_index_iq4(id_[:, None] * sub)]
        return seq_sum(w * q * sub), seq_sum(w * q * q)

    sumqx, sumq2 = fit(F(1) / (-mx / F(-127)))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(sumq2 > 0, sumqx / sumq2, F(0))
        best = d * sumqx
        for itry in range(-7, 8):
            sumqx, sumq2 = fit(F(itry - 127) / mx)
            better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
            d = np.where(better, sumqx / sumq2, d)
            best = np.where(better, d * sumqx, best)
    scales = np.where(zero, F(0), d).reshape(nb, 8)
    _, max_scale = signed_absmax(scales)
    dsb = -max_scale / F(32)
    with np.errstate(divide="ignore"):
        id_ = np.where(dsb != 0, F(1) / dsb, F(0))
        l = np.clip(nearest_int(id_[:, None] * scales), -32, 31)
        dl = dsb[:, None] * l.astype(F)
        idl = np.where(dl != 0, F(1) / dl, F(0))
    L = best_index_iq4(idl[:, :, None] * xb.reshape(nb, 8, 32))
    l = l + 32
    out = np.zeros((nb, 136), np.uint8)
    out[:, 0:2] = f32_to_fp16_bits(dsb).reshape(-1, 1).view(np.uint8)
    sh = np.zeros(nb, np.int64)
    for ib in range(8):
        sh |= (l[:, ib] >> 4) << (2 * ib)
    out[:, 2:4] = sh.astype(np.uint16).reshape(-1, 1).view(np.uint8)
    out[:, 4:8] = (l[:, 0::2] & 0xF) | ((l[:, 1::2] & 0xF) << 4)
    out[:, 8:136] = (L[:, :, :16] | (L[:, :, 16:] << 4)).reshape(nb, 128)
    return out.reshape(-1)


NP_QUANTIZE = {"Q2_K": np_quantize_q2_K, "Q3_K": np_quantize_q3_K, "Q4_K": lambda x: np_quantize_k4(x, "Q4_K"),
               "Q5_K": lambda x: np_quantize_k4(x, "Q5_K"), "Q6_K": np_quantize_q6_K,
               "IQ4_XS": np_quantize_iq4_xs, "Q8_K": np_quantize_q8_K}


# ------------------------------------------------------------------ test data

def gaussian(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(F)


def awkward(seed: int = 0) -> np.ndarray:
    """Blocks that exercise the edge cases: all zero, constant, all positive, one outlier, tiny and
    large magnitudes, a +max/-max tie, and weight-like data with per-sub-block scales."""
    rng = np.random.default_rng(seed)
    parts = [
        np.zeros(QK_K),
        np.full(QK_K, 0.75),
        np.abs(rng.standard_normal(QK_K)) + 0.1,
        np.where(np.arange(QK_K) == 77, 40.0, rng.standard_normal(QK_K) * 0.02),
        rng.standard_normal(QK_K) * 1e-6,
        rng.standard_normal(QK_K) * 300.0,
        np.concatenate([[-2.0, 2.0], rng.uniform(-1, 1, QK_K - 2)]),
        rng.standard_normal(QK_K) * np.repeat(rng.uniform(0.001, 0.1, 16), 16),
        -np.abs(rng.standard_normal(QK_K)),
        np.concatenate([np.zeros(QK_K - 32), rng.standard_normal(32)]),
    ]
    return np.concatenate(parts).astype(F)


def random_blocks(qtype: str, nb: int, seed: int = 0) -> np.ndarray:
    """Random bytes with finite fp16 scale fields (every bit pattern of the quants is valid)."""
    rng = np.random.default_rng(seed)
    ts = type_info(qtype).type_size
    b = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    fp16_fields = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_XS": [0]}
    for off in fp16_fields.get(qtype, []):
        b[:, off:off + 2] = f32_to_fp16_bits(rng.uniform(-0.05, 0.05, nb)).reshape(-1, 1).view(np.uint8)
    if qtype == "Q8_K":
        b[:, 0:4] = rng.uniform(-0.05, 0.05, nb).astype(F).reshape(-1, 1).view(np.uint8)
    return b.reshape(-1)


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, F).view(np.uint32)


# ------------------------------------------------------------------ sizes and tables

@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_block_sizes_match_gguf(qtype):
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    info = type_info(qtype)
    assert (info.block_size, info.type_size) == (block, size)
    assert _core.row_size(tid(qtype), 3 * QK_K) == 3 * size
    assert _core.type_table()[tid(qtype)][1:3] == (block, size)


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_every_kernel_is_registered(qtype):
    name, _, _, _, vdt, has_deq, has_q, has_dot = _core.type_table()[tid(qtype)]
    assert (has_deq, has_q, has_dot) == (True, True, True)
    assert vdt == tid("Q8_K")


def test_simd_tier_is_used_when_available():
    kernels = _core.kernel_tiers()
    if "avx2" in TIERS and _core.active_tier() in ("avx2", "avx512", "avx512vnni"):
        for qtype in ALL_TYPES:
            assert kernels[qtype] in ("avx2", "avx512", "avx512vnni"), qtype


# ------------------------------------------------------------------ dequantize

@pytest.mark.parametrize("qtype", K_TYPES)
@pytest.mark.parametrize("nb", [1, 5])
def test_dequantize_random_bytes_matches_gguf_and_numpy(qtype, nb):
    data = random_blocks(qtype, nb, seed=nb)
    ours = dequantize(data, qtype, nb * QK_K)
    ref = gq.dequantize(data.reshape(nb, -1), gguf.GGMLQuantizationType[qtype]).reshape(-1)
    np.testing.assert_array_equal(bits(ours), bits(ref))
    np.testing.assert_array_equal(bits(ours), bits(np_dequantize(data, qtype)))


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_dequantize_quantized_data_matches_numpy(qtype):
    x = np.concatenate([gaussian(3 * QK_K, 1), awkward()])
    data = quantize(x, qtype)
    ours = dequantize(data, qtype, x.size)
    np.testing.assert_array_equal(bits(ours), bits(np_dequantize(data, qtype)))
    if qtype != "Q8_K":
        ref = gq.dequantize(data.reshape(x.size // QK_K, -1), gguf.GGMLQuantizationType[qtype]).reshape(-1)
        np.testing.assert_array_equal(bits(ours), bits(ref))


@pytest.mark.parametrize("tier", TIERS)
def test_dequantize_same_on_every_tier(tier):
    for qtype in ALL_TYPES:
        data = random_blocks(qtype, 3, seed=7)
        np.testing.assert_array_equal(bits(dequantize(data, qtype, 3 * QK_K, tier=tier)),
                                      bits(np_dequantize(data, qtype)))


# ------------------------------------------------------------------ quantize

@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("data", ["gaussian", "awkward", "weights"])
def test_reference_quantize_is_bit_exact(qtype, data):
    if data == "gaussian":
        x = gaussian(4 * QK_K, seed=3)
    elif data == "awkward":
        x = awkward(seed=4)
    else:  # weight-like: small values, heavy tails
        rng = np.random.default_rng(5)
        x = (rng.standard_t(4, 4 * QK_K) * 0.02).astype(F)
    ours = quantize(x, qtype)
    ref = NP_QUANTIZE[qtype](x)
    assert ours.nbytes == row_bytes(qtype, x.size)
    mismatch = np.flatnonzero(ours != ref)
    assert mismatch.size == 0, (f"{qtype}: {mismatch.size} bytes differ, first in block "
                                f"{mismatch[0] // type_info(qtype).type_size}")


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_quantize_roundtrip_error(qtype):
    x = gaussian(16 * QK_K, seed=11)
    y = dequantize(quantize(x, qtype), qtype, x.size)
    rel = np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2))
    assert rel < ROUNDTRIP_REL_RMSE[qtype]
    # and it is a real quantizer: the error is not zero and the values are not all alike
    assert rel > 1e-4
    assert np.corrcoef(x, y)[0, 1] > 0.9


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_quantize_zero_and_accepts_2d(qtype):
    z = np.zeros((2, QK_K), F)
    assert not dequantize(quantize(z, qtype), qtype, z.size).any()
    x = gaussian(2 * QK_K, 9).reshape(2, QK_K)
    np.testing.assert_array_equal(quantize(x, qtype), quantize(x.reshape(-1), qtype))


@pytest.mark.parametrize("tier", TIERS)
def test_fast_q8_K_quantizer_matches_reference(tier):
    x = np.concatenate([gaussian(8 * QK_K, 21), awkward(22), -awkward(23)])
    fast = quantize(x, "Q8_K", reference=False, tier=tier)
    np.testing.assert_array_equal(fast, quantize(x, "Q8_K"))
    np.testing.assert_array_equal(fast, np_quantize_q8_K(x))


def test_q8_K_sign_of_first_largest_value():
    # -2 comes before +2: ggml's scale takes the sign of the first value of largest magnitude
    x = np.zeros(QK_K, F)
    x[3], x[9], x[10] = -2.0, 2.0, 1.0
    b = quantize(x, "Q8_K")
    d = b[:4].view(F)[0]
    q = b[4:260].view(np.int8)
    assert d == pytest.approx(2.0 / 127)
    assert (q[3], q[9], q[10]) == (-127, 127, 64)
    assert b[260:262].view(np.int16)[0] == 64


# ------------------------------------------------------------------ vec_dot

def float_dot(w: np.ndarray, act: np.ndarray, qtype: str, n: int) -> tuple[float, float]:
    """(dot, sum |w_i a_i|) in float64 of the dequantized weights and Q8_K activations"""
    wf = dequantize(w, qtype, n).astype(np.float64)
    af = dequantize(act, "Q8_K", n).astype(np.float64)
    return float(wf @ af), float(np.abs(wf) @ np.abs(af))


@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("n", DOT_SIZES)
def test_vec_dot_scalar_vs_float(qtype, n):
    w = quantize(gaussian(n, seed=n), qtype)
    act = quantize(gaussian(n, seed=n + 1), "Q8_K")
    got = _core.vec_dot(tid(qtype), w, act, n, "scalar")
    ref, scale = float_dot(w, act, qtype, n)
    assert abs(got - ref) <= DOT_TOL_VS_FLOAT * scale


@pytest.mark.parametrize("tier", SIMD_TIERS)
@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("n", DOT_SIZES)
def test_vec_dot_simd_vs_scalar_and_float(tier, qtype, n):
    w = quantize(np.concatenate([gaussian(n - QK_K, seed=n), awkward(n)[:QK_K]]), qtype)
    act = quantize(gaussian(n, seed=n + 2) * 3, "Q8_K")
    got = _core.vec_dot(tid(qtype), w, act, n, tier)
    scalar = _core.vec_dot(tid(qtype), w, act, n, "scalar")
    ref, scale = float_dot(w, act, qtype, n)
    assert abs(got - scalar) <= DOT_TOL_VS_SCALAR * scale
    assert abs(got - ref) <= DOT_TOL_VS_FLOAT * scale


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("qtype", K_TYPES)
def test_vec_dot_random_bytes_every_quant_value(tier, qtype):
    # random weight bytes reach every quant level and scale, incl. the extremes the quantizer avoids
    n = 4 * QK_K
    w = random_blocks(qtype, 4, seed=31)
    act = quantize(gaussian(n, 32) * 10, "Q8_K")
    got = _core.vec_dot(tid(qtype), w, act, n, tier)
    ref, scale = float_dot(w, act, qtype, n)
    assert abs(got - ref) <= DOT_TOL_VS_FLOAT * scale


def _q8_K_rows(qs: np.ndarray, d: float) -> np.ndarray:
    """Q8_K blocks (d, 256 int8, 16 int16 sums of 16) of the given int8 values, one row per qs row."""
    rows, n = qs.shape
    q = qs.reshape(rows, n // QK_K, QK_K).astype(np.int8)
    out = np.zeros((rows, n // QK_K, 4 + QK_K + 32), np.uint8)
    out[:, :, 0:4] = np.array([d], F).view(np.uint8)
    out[:, :, 4:4 + QK_K] = q.view(np.uint8)
    out[:, :, 4 + QK_K:] = q.reshape(rows, n // QK_K, 16, 16).astype(np.int16).sum(-1).astype(np.int16).view(np.uint8)
    return out.reshape(rows, -1)


@pytest.mark.parametrize("tier", TIERS)
def test_iq4_xs_products_at_the_extremes_equal_vec_dot(tier):
    """The sixteen-row IQ4_XS kernels apply a sub-block's 6-bit scale to its exact int32 dot as two int16 words
    (low byte, the rest): the largest dots (every weight at kvalue -127, activations at -128, scale 0 or 63 so
    ls - 32 = -32 or 31) and random bytes must give vec_dot's floats bit for bit, in the file layout and
    repacked, with decode-sized and prefill-sized activation row counts (past a 512-row pass too)."""
    rows, nb = 37, 4
    n = nb * QK_K
    w = random_blocks("IQ4_XS", rows * nb, seed=5).reshape(rows, nb, -1)
    w[:8, :, 2:8] = 0        # scales_h, scales_l: every ls - 32 = -32
    w[8:12, :, 2:8] = 0xFF   # ls - 32 = 31
    w[:12, :, 8:] = 0        # every weight kvalue -127
    w[12:16, :, 8:] = 0xFF   # kvalue 113
    w = np.ascontiguousarray(w.reshape(-1))
    rng = np.random.default_rng(6)
    qs = rng.integers(-128, 128, size=(520, n))   # 520: past a prefill pass of 512 activation rows
    qs[:6] = -128
    qs[6:9] = 127
    act = np.ascontiguousarray(_q8_K_rows(qs, 0.01))
    expect = np.array([[_core.vec_dot(tid("IQ4_XS"), w.reshape(rows, -1)[r], act[j], n, tier) for r in range(rows)]
                       for j in range(len(act))], F)
    packed = _core.repack(w, tid("IQ4_XS"), rows, n, 1, tier) if "IQ4_XS" in _core.repacked_layouts(tier) else None
    for nc in (1, 3, 8, 9, 20, 520):
        for layout in ((None,) if packed is None else (None, packed)):
            Y = np.full((nc, rows), np.nan, F)
            _core.gemm_range(w, tid("IQ4_XS"), rows, n, act[:nc].reshape(-1), nc, Y, 0, rows, tier, layout)
            assert np.array_equal(Y, expect[:nc]), (tier, nc, layout is not None)


# ------------------------------------------------------------------ QMatrix

@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("qtype", K_TYPES)
def test_qmatrix_matvec_matmul(tier, qtype):
    rows, cols = 37, 2048  # odd row count; Gemma 3 270M's feed-forward width
    rng = np.random.default_rng(41)
    W = (rng.standard_normal((rows, cols)) * 0.05).astype(F)
    m = QMatrix(quantize(W, qtype), qtype, rows, cols, n_threads=2)
    Wd = m.dequantize().astype(np.float64)
    X = rng.standard_normal((5, cols)).astype(F)
    Xd = np.stack([dequantize(quantize(x, "Q8_K"), "Q8_K", cols) for x in X]).astype(np.float64)
    scale = np.abs(Xd) @ np.abs(Wd).T
    for n_threads in (1, 2):
        y = m.matvec(X[0], n_threads=n_threads, tier=tier)
        assert y.shape == (rows,)
        assert np.all(np.abs(y - Wd @ Xd[0]) <= DOT_TOL_VS_FLOAT * scale[0])
        Y = m.matmul(X, n_threads=n_threads, tier=tier)
        assert Y.shape == (5, rows)
        assert np.all(np.abs(Y - Xd @ Wd.T) <= DOT_TOL_VS_FLOAT * scale)
        # a matmul row is the matvec up to summation order (the matvec reads row by row, csrc/matmul.c)
        np.testing.assert_allclose(Y[3], m.matvec(X[3], n_threads=n_threads, tier=tier), rtol=0,
                                   atol=1e-5 * scale[3].max())


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_bad_lengths_raise(qtype):
    ts = type_info(qtype).type_size
    good = quantize(gaussian(2 * QK_K), qtype)
    with pytest.raises(QuantError, match="multiple of the block size"):
        quantize(gaussian(640), qtype)  # Gemma 3's n_embd is not a multiple of 256
    with pytest.raises(QuantError, match="multiple of the block size"):
        dequantize(good, qtype, 2 * QK_K - 32)
    with pytest.raises(QuantError):
        dequantize(good[:-1], qtype, 2 * QK_K)
    with pytest.raises(QuantError):
        dequantize(np.concatenate([good, good[:ts]]), qtype, 2 * QK_K)
    act = quantize(gaussian(2 * QK_K), "Q8_K")
    with pytest.raises(QuantError):
        _core.vec_dot(tid(qtype), good[:-ts], act, 2 * QK_K)
    with pytest.raises(QuantError):
        _core.vec_dot(tid(qtype), good, act[:-1], 2 * QK_K)
    with pytest.raises(QuantError):
        QMatrix(good, qtype, 2, 640)
    with pytest.raises(QuantError):
        QMatrix(good[:-1], qtype, 2, QK_K)
    m = QMatrix(good, qtype, 2, QK_K)
    with pytest.raises(QuantError):
        m.matvec(gaussian(2 * QK_K))
    with pytest.raises(QuantError):
        m.matvec(gaussian(QK_K).astype(np.float64))


# ------------------------------------------------------------------ the real model

@pytest.fixture
def gemma3_file(request):
    try:
        return Path(request.getfixturevalue("gemma3_path"))
    except pytest.FixtureLookupError:
        pass
    if not GEMMA3_FILE.exists():
        pytest.skip(f"{GEMMA3_FILE} not available")
    return GEMMA3_FILE


def test_gemma3_tensors_dequantize_bit_exact(gemma3_file):
    """Every tensor whose type this build can dequantize matches gguf.quants bit for bit. Tensors
    larger than FULL_CHECK_MAX_VALUES (only token_embd, 168M values of Q8_0) are checked on
    SAMPLE_CHUNKS evenly spaced blocks of rows, to keep the test to seconds."""
    FULL_CHECK_MAX_VALUES = 1 << 24
    SAMPLE_CHUNKS = 4
    ROWS_PER_CHUNK = 1024
    table = _core.type_table()
    seen = {}
    from oxillama.gguf import GGUFFile
    model = GGUFFile(gemma3_file)
    for name, tensor in model.tensors.items():
        qtype, ttype = tensor.qtype, tensor.qtype_id
        entry = table.get(ttype)
        if entry is None or not entry[5]:
            continue  # no dequantizer in this build
        n_per_row = tensor.ggml_shape[0]
        data = tensor.data.reshape(-1, row_bytes(qtype, n_per_row))
        n_rows = data.shape[0]
        if n_rows * n_per_row <= FULL_CHECK_MAX_VALUES:
            starts = range(0, n_rows, ROWS_PER_CHUNK)
        else:
            starts = np.linspace(0, n_rows - ROWS_PER_CHUNK, SAMPLE_CHUNKS).astype(int)
        for r0 in starts:
            chunk = np.array(data[r0:r0 + ROWS_PER_CHUNK])
            ours = dequantize(chunk.reshape(-1), qtype, chunk.shape[0] * n_per_row)
            ref = gq.dequantize(chunk, gguf.GGMLQuantizationType(ttype)).reshape(-1)
            np.testing.assert_array_equal(bits(ours), bits(ref), err_msg=f"{name} ({qtype}) rows {r0}..")
        seen[qtype] = seen.get(qtype, 0) + 1
    model.close()
    # the K-quant tensors of Q4_K_M (27 Q4_K, 9 Q6_K) were all checked
    assert seen.get("Q4_K") == 27 and seen.get("Q6_K") == 9, seen


# ------------------------------------------------------------------ ARM tiers on an x86 machine

REPO = Path(__file__).resolve().parents[2]
ARM_TIERS = {"neon": [], "dotprod": ["-march=armv8.2-a+dotprod"]}


@pytest.mark.parametrize("tier", sorted(ARM_TIERS))
def test_arm_tiers_under_qemu(tier, tmp_path):
    """The NEON/dotprod K-quant kernels against the scalar ones, cross-compiled and run under
    qemu-user (Debian: gcc-aarch64-linux-gnu qemu-user); skipped where those are missing."""
    import platform
    import shutil
    import subprocess
    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("native ARM: the tier tests above run these kernels directly")
    cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not cc or not qemu:
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64")
    exe = tmp_path / f"check_{tier}"
    build = subprocess.run(
        [cc, "-O2", "-std=gnu11", "-static", "-I", str(REPO / "csrc"), *ARM_TIERS[tier],
         f"-DREGISTER=oxl_register_{tier}_k", str(REPO / "tests/quant/native_kquants_check.c"),
         str(REPO / "csrc/scalar/quants_k.c"), str(REPO / f"csrc/arm/{tier}/quants_k_{tier}.c"), "-o", str(exe), "-lm"],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([qemu, "-cpu", "max", str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "checked 24 (3 kernels)" in run.stdout
    # the reference quantizers give the same bytes on AArch64 (FMA contraction must stay off)
    run = subprocess.run([qemu, "-cpu", "max", str(exe), "dump"], capture_output=True, timeout=120)
    assert run.returncode == 0
    out = np.frombuffer(run.stdout, np.uint8)
    x, pos = out[:4096 * 4].view(F), 4096 * 4
    for qtype in ALL_TYPES:
        want = quantize(x, qtype)
        np.testing.assert_array_equal(out[pos:pos + want.size], want, err_msg=qtype)
        pos += want.size
    assert pos == out.size
