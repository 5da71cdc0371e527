# cython: language_level=3
"""nogil wrappers over csrc/sampling/vocab_ops.c: the passes that read the whole vocabulary.

The public modules (candidates.py, logprobs.py) validate dtypes and contiguity; these wrappers
check every length against the buffers they are given, then release the GIL.
"""
from libc.stdint cimport int32_t, int64_t

import numpy as np

from oxillama.errors import SamplerError


cdef extern from "sampling/sampling.h" nogil:
    int OXL_SAMP_HAS_NAN
    int OXL_SAMP_HAS_POSINF
    int oxl_samp_copy_check(const float *src, float *dst, int64_t n, float *max_out)
    int oxl_samp_check(const float *x, int64_t n, float *max_out, int64_t *argmax_out)
    float oxl_samp_max(const float *x, int64_t n)
    void oxl_samp_exp_sum(const float *x, int64_t n, float shift, float scale, float *w,
                          double *sum_w, double *sum_wx)
    int64_t oxl_samp_pick(const float *w, int64_t n, double target)
    int64_t oxl_samp_top_k(const float *x, int64_t n, int64_t k, int32_t *out_idx, float *out_val)
    int64_t oxl_samp_filter_ge(const float *x, int64_t n, float threshold, int32_t *out_idx)
    int64_t oxl_samp_top_p(const float *w, int64_t n, double p, int32_t *out_idx, double *scratch)


def copy_check(const float[::1] src, float[::1] dst):
    """dst[:] = src in one pass; returns (max, has_nan, has_posinf). Same lengths required."""
    cdef int64_t n = src.shape[0]
    if dst.shape[0] != n:
        raise SamplerError(f"copy_check: {n} values into a buffer of {dst.shape[0]}")
    cdef float m = 0
    cdef int flags = 0
    if n:
        with nogil:
            flags = oxl_samp_copy_check(&src[0], &dst[0], n, &m)
    return m, bool(flags & OXL_SAMP_HAS_NAN), bool(flags & OXL_SAMP_HAS_POSINF)


def check(const float[::1] x):
    """copy_check's scan without the copy: (max, has_nan, has_posinf, first position of the max)."""
    if x.shape[0] >= 2 ** 31:
        raise SamplerError(f"check: {x.shape[0]} logits, at most 2**31 - 1")
    cdef float m = 0
    cdef int64_t arg = 0
    cdef int flags = 0
    if x.shape[0]:
        with nogil:
            flags = oxl_samp_check(&x[0], x.shape[0], &m, &arg)
    return m, bool(flags & OXL_SAMP_HAS_NAN), bool(flags & OXL_SAMP_HAS_POSINF), arg


def vmax(const float[::1] x):
    """max(x); x must be non-empty."""
    if x.shape[0] == 0:
        raise SamplerError("max of an empty logits array")
    cdef float m
    with nogil:
        m = oxl_samp_max(&x[0], x.shape[0])
    return m


def exp_sum(const float[::1] x, float shift, float scale, float[::1] w):
    """(sum_w, sum_wx) with w[:len(x)] = exp((x - shift) * scale), sum_wx = sum(w * (x - shift) * scale)."""
    cdef int64_t n = x.shape[0]
    cdef double s_w = 0, s_wx = 0
    if w.shape[0] < n:
        raise SamplerError(f"exp_sum: output buffer holds {w.shape[0]} values, need {n}")
    if n:
        with nogil:
            oxl_samp_exp_sum(&x[0], n, shift, scale, &w[0], &s_w, &s_wx)
    return s_w, s_wx


def pick(const float[::1] w, int64_t n, double target):
    """Index of the weighted draw: first i with cumsum(w[:n])[i] > target."""
    if n <= 0 or n > w.shape[0]:
        raise SamplerError(f"pick: n={n} outside the buffer of {w.shape[0]} weights")
    cdef int64_t i
    with nogil:
        i = oxl_samp_pick(&w[0], n, target)
    return i


def top_k(const float[::1] x, int64_t k, int32_t[::1] out_idx, float[::1] out_val):
    """Write the k largest finite-or-not -inf entries of x, descending, ties by lower index.

    Returns how many were written (fewer than k when fewer entries are > -inf)."""
    cdef int64_t n = x.shape[0]
    if k < 0:
        raise SamplerError(f"top_k: k must be >= 0, got {k}")
    if k > n:
        k = n
    if out_idx.shape[0] < k or out_val.shape[0] < k:
        raise SamplerError(f"top_k: output buffers hold {min(out_idx.shape[0], out_val.shape[0])}, need {k}")
    if k == 0:
        return 0
    cdef int64_t m
    with nogil:
        m = oxl_samp_top_k(&x[0], n, k, &out_idx[0], &out_val[0])
    return m


def filter_ge(const float[::1] x, float threshold, int32_t[::1] out_idx):
    """Write the positions i with x[i] >= threshold (increasing) to out_idx; returns the count."""
    cdef int64_t n = x.shape[0]
    if out_idx.shape[0] < n:
        raise SamplerError(f"filter_ge: output buffer holds {out_idx.shape[0]}, need {n}")
    if n == 0:
        return 0
    cdef int64_t m
    with nogil:
        m = oxl_samp_filter_ge(&x[0], n, threshold, &out_idx[0])
    return m


def top_p_cut(const float[::1] w, double p, int32_t[::1] out_idx):
    """Positions (increasing) of the smallest set of largest weights w >= 0 whose sum reaches
    p * sum(w), written to out_idx; returns the count. Exact on ties (lower position first)."""
    cdef int64_t n = w.shape[0]
    if out_idx.shape[0] < n:
        raise SamplerError(f"top_p_cut: output buffer holds {out_idx.shape[0]}, need {n}")
    if not 0.0 < p <= 1.0:
        raise SamplerError(f"top_p_cut: p must be in (0, 1], got {p}")
    if n == 0:
        return 0
    cdef double[::1] scratch = np.empty(4096, dtype=np.float64)
    cdef int64_t m
    with nogil:
        m = oxl_samp_top_p(&w[0], n, p, &out_idx[0], &scratch[0])
    return m
