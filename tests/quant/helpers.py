"""Shared helpers for the quant tests: independent NumPy references and test data.

The references here are written from the ggml block layouts (ggml-common.h) and reference
quantizers (ggml-quants.c), independently of the C code they check.
"""
from __future__ import annotations

import numpy as np

from oxillama import _core
from oxillama.quant import GGMLType, type_info

# 32-value block types: (weight type) -> activation type of its vec_dot
LEGACY_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "IQ4_NL")
FLOAT_TYPES = ("F32", "F16", "BF16")
ACT_TYPE = {"Q4_0": "Q8_0", "Q4_1": "Q8_1", "Q5_0": "Q8_0", "Q5_1": "Q8_1", "Q8_0": "Q8_0", "Q8_1": "Q8_1",
            "IQ4_NL": "Q8_0", "F32": "F32", "F16": "F32", "BF16": "F32"}

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         dtype=np.int8)


def usable_tiers() -> list[str]:
    return _core.usable_tiers()


def qid(name: str) -> int:
    return int(GGMLType[name])


def rng_rows(rng: np.random.Generator, rows: int, cols: int, *, scale: float = 1.0) -> np.ndarray:
    """Weights-like data: normal values with a few outliers, per-row scales of different magnitude."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= np.float32(scale) * np.exp(rng.uniform(-2, 1, size=(rows, 1))).astype(np.float32)
    mask = rng.random((rows, cols)) < 0.01
    x[mask] *= 8
    return x


def blocks(data: np.ndarray, type_size: int) -> np.ndarray:
    return np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, type_size)


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) bytes -> (nb, 32): low nibbles first, then high nibbles (ggml's order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """(nb, 4) bytes of a little-endian uint32 -> (nb, 32) bits, bit j for value j."""
    return np.unpackbits(qh, axis=1, bitorder="little")


def ref_dequantize(data: np.ndarray, qtype: str) -> np.ndarray:
    """Independent NumPy dequantizer for the float and 32-value block types (float32 out)."""
    if qtype == "F32":
        return data.view(np.float32).copy()
    if qtype == "F16":
        return data.view(np.float16).astype(np.float32)
    if qtype == "BF16":
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    b = blocks(data, type_info(qtype).type_size)
    if qtype == "Q4_0":
        return (_f16(b[:, 0:2]) * (_nibbles(b[:, 2:]).astype(np.float32) - 8)).reshape(-1)
    if qtype == "Q4_1":
        q = _nibbles(b[:, 4:]).astype(np.float32)
        return (_f16(b[:, 0:2]) * q + _f16(b[:, 2:4])).reshape(-1)
    if qtype == "Q5_0":
        q = (_nibbles(b[:, 6:]) | (_fifth_bits(b[:, 2:6]) << 4)).astype(np.float32) - 16
        return (_f16(b[:, 0:2]) * q).reshape(-1)
    if qtype == "Q5_1":
        q = (_nibbles(b[:, 8:]) | (_fifth_bits(b[:, 4:8]) << 4)).astype(np.float32)
        return (_f16(b[:, 0:2]) * q + _f16(b[:, 2:4])).reshape(-1)
    if qtype == "Q8_0":
        return (_f16(b[:, 0:2]) * b[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
    if qtype == "Q8_1":
        return (_f16(b[:, 0:2]) * b[:, 4:].view(np.int8).astype(np.float32)).reshape(-1)
    if qtype == "IQ4_NL":
        q = KVALUES_IQ4NL[_nibbles(b[:, 2:])].astype(np.float32)
        return (_f16(b[:, 0:2]) * q).reshape(-1)
    raise ValueError(qtype)


def _roundf(x: np.ndarray) -> np.ndarray:
    """C roundf: half away from zero, exact (no x + 0.5 double rounding)."""
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0).astype(x.dtype)


def ref_quantize_q8_1(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_1_ref in NumPy (gguf.quants has no Q8_1)."""
    xb = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(xb).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = _roundf((xb * inv).astype(np.float32)).astype(np.int8)
    s = (q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d).astype(np.float32)
    return np.concatenate([d.astype(np.float16).view(np.uint8), s.astype(np.float16).view(np.uint8),
                           q.view(np.uint8)], axis=1).reshape(-1)


def _best_index_iq4nl(v: np.ndarray) -> np.ndarray:
    """Nearest codebook index; on a tie the lower one (ggml's best_index_int8)."""
    vals = KVALUES_IQ4NL.astype(np.float32)
    hi = np.clip(np.searchsorted(vals, v, side="right"), 1, 15)   # first value > v
    lo = hi - 1
    pick_lo = (v - vals[lo]) < (vals[hi] - v)
    idx = np.where(pick_lo, lo, hi)
    idx = np.where(v <= vals[0], 0, idx)
    return np.where(v >= vals[15], 15, idx).astype(np.uint8)


def ref_quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_iq4_nl_ref (ntry = -1: one pass, then the weighted least-squares scale)."""
    xb = x.reshape(-1, 32).astype(np.float32)
    amax_i = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(len(xb)), amax_i][:, None]
    nonzero = np.abs(mx) >= np.float32(1e-15)
    with np.errstate(divide="ignore", invalid="ignore"):
        d0 = (mx / np.float32(-127)).astype(np.float32)
        inv = (np.float32(1) / d0).astype(np.float32)
        L = _best_index_iq4nl((inv * xb).astype(np.float32))
        q = KVALUES_IQ4NL[L].astype(np.float32)
        w = (xb * xb).astype(np.float32)
        # sequential float32 sums, in the C order, so the scale matches bit for bit
        sumqx = np.zeros((len(xb), 1), np.float32)
        sumq2 = np.zeros((len(xb), 1), np.float32)
        for j in range(32):
            sumqx += (w[:, j:j + 1] * q[:, j:j + 1]) * xb[:, j:j + 1]
            sumq2 += (w[:, j:j + 1] * q[:, j:j + 1]) * q[:, j:j + 1]
        d = np.where(nonzero, sumqx / sumq2, np.float32(0)).astype(np.float32)
    L = np.where(nonzero, L, 0).astype(np.uint8)
    qs = L[:, :16] | (L[:, 16:] << 4)
    return np.concatenate([d.astype(np.float16).view(np.uint8), qs], axis=1).reshape(-1)


def act_halfstep(x: np.ndarray, act_type: str) -> np.ndarray:
    """Largest error the activation quantizer may make per value (d/2 of its block), |x| shape."""
    if act_type == "F32":
        return np.zeros_like(x)
    xb = x.reshape(*x.shape[:-1], -1, 32)
    d = np.abs(xb).max(axis=-1, keepdims=True) / 127
    # fp16 rounding of d changes the grid by at most 2^-11 relative: 127 steps of that on top
    half = d * (0.5 + 127 * 2.0 ** -11)
    return np.broadcast_to(half, xb.shape).reshape(x.shape)



# the i-quants oxillama reads but cannot write (ggml's quantizers need an importance matrix)
NO_QUANTIZER_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")


def random_iq_blocks(qtype: str, nb: int, rng: np.random.Generator, *, d_scale: float = 0.01) -> np.ndarray:
    """nb blocks of an i-quant with random grid indices, signs and sub-scales and a finite fp16 scale
    (every code the file format allows, as a file from llama-quantize may hold them), as uint8."""
    size = type_info(qtype).type_size
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    h = (rng.standard_normal(nb) * d_scale).astype(np.float16).view(np.uint16)
    if qtype == "IQ1_M":   # the fp16 scale sits in the top nibbles of the four scale words
        sc = raw[:, size - 8:].copy().view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        raw[:, size - 8:] = sc.view(np.uint8)
    else:
        raw[:, 0:2] = h.view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def weights_bytes(W: np.ndarray, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """W quantized to qtype, or for the i-quants random blocks of the same shape."""
    if qtype in NO_QUANTIZER_TYPES:
        return random_iq_blocks(qtype, W.size // type_info(qtype).block_size, rng)
    from oxillama.quant import quantize
    return quantize(W, qtype)
