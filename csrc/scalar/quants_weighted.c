/* Whole-row quantization as a model quantizer does it (ggml's quantize_<type>), with an optional
 * importance matrix: per-column weights that say how much each input value matters (the mean of
 * the squared activations it meets, from llama.cpp's imatrix tool).
 *
 * Without weights the K-quants and the 32-value types are exactly their quantize_row_*_ref; with
 * weights they use ggml's weighted searches (quantize_row_<type>_impl), reproduced here bit for bit
 * (same float operations in the same order; no FMA contraction). IQ4_NL and IQ4_XS always take the
 * weighted search (x^2 when there is no imatrix), as ggml's quantize_iq4_nl/xs do. */
#include <math.h>

#include "quants.h"
#include "quants_k.h"
#include "../quantize.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quants_search.h"

/* positive values (sub-block scales or mins) to L in [0, nmax], weighted, with coordinate descent */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; i++) max = OXL_MAX(max, x[i]);
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale_is * x[i]);
            l = OXL_MIN(nmax, l);
            const float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = OXL_MIN(nmax, l);
        L[i] = (uint8_t)l;
        const float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = OXL_MIN(nmax, new_l);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

/* ---------------------------------------------------------------- K-quants, weighted */

static void q2_K_row_w(const float *x, block_q2_K *y, int64_t n, const float *qw_row) {
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16], weight[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        memset(sw, 0, sizeof(sw));
        float sumx2 = 0;
        for (int j = 0; j < QK_K; j++) sumx2 += x[j] * x[j];
        const float sigma2 = sumx2 / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            const float *qw = qw_row + QK_K * i + 16 * j;
            for (int l = 0; l < 16; l++) weight[l] = qw[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < QK_K / 16; l++) sw[j] += weight[l];
            scales[j] = make_qkx_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }
        float dm = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
        float mm = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
        y[i].d = oxl_fp32_to_fp16(dm);
        y[i].dmin = oxl_fp32_to_fp16(mm);
        dm = oxl_fp16_to_fp32(y[i].d);
        mm = oxl_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int((x[16 * j + ii] + m) / d);
                L[16 * j + ii] = (uint8_t)OXL_MAX(0, OXL_MIN(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

static void q3_K_row_w(const float *x, block_q3_K *y, int64_t n, const float *qw_row) {
    int8_t L[QK_K], Ls[QK_K / 16];
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float sumx2 = 0;
        for (int j = 0; j < QK_K; j++) sumx2 += x[j] * x[j];
        const float sigma2 = 2 * sumx2 / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            const float *qw = qw_row + QK_K * i + 16 * j;
            for (int l = 0; l < 16; l++) weight[l] = qw[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; l++) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; j++) {
            int l = Ls[j];
            if (j < 8) {
                y[i].scales[j] = (uint8_t)(l & 0xF);
            } else {
                y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            }
            l >>= 4;
            y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        y[i].d = oxl_fp32_to_fp16(d_block);
        for (int j = 0; j < QK_K / 16; j++) {
            int8_t sc = (int8_t)(j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4);
            sc = (int8_t)((sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            const float d = oxl_fp16_to_fp32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(OXL_MAX(-4, OXL_MIN(3, l)) + 4);
            }
        }
        memset(y[i].hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K / 8) { m = 0; hm <<= 1; }
        }
        pack_2bit((const uint8_t *)L, y[i].qs);
    }
}

/* Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32, 6-bit scales and mins */
static void k45_block_w(const float *x, const float *qw_blk, int nmax, oxl_half *dh, oxl_half *dminh,
                        uint8_t *sc12, uint8_t *L) {
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / QK_K;
    for (int j = 0; j < QK_K / 32; j++) {
        const float *qw = qw_blk + 32 * j;
        for (int l = 0; l < 32; l++) weights[l] = qw[l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
    }
    const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    for (int j = 0; j < QK_K / 32; j++) {
        const uint8_t ls = OXL_MIN(63, Ls[j]), lm = OXL_MIN(63, Lm[j]);
        if (j < 4) {
            sc12[j] = ls;
            sc12[j + 4] = lm;
        } else {
            sc12[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc12[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dh = oxl_fp32_to_fp16(d_block);
    *dminh = oxl_fp32_to_fp16(m_block);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        oxl_scale_min_k4(j, sc12, &sc, &m);
        const float d = oxl_fp16_to_fp32(*dh) * sc;
        if (!d) continue;
        const float dm = oxl_fp16_to_fp32(*dminh) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)OXL_MAX(0, OXL_MIN(nmax, l));
        }
    }
}

static void q4_K_row_w(const float *x, block_q4_K *y, int64_t n, const float *qw) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_block_w(x, qw + QK_K * i, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

static void q5_K_row_w(const float *x, block_q5_K *y, int64_t n, const float *qw) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_block_w(x, qw + QK_K * i, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int k = 0; k < QK_K; k += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[k + j], l2 = L[k + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

static void q6_K_row_w(const float *x, block_q6_K *y, int64_t n, const float *qw_row) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw_row + QK_K * i + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(block_q6_K));
            y[i].d = oxl_fp32_to_fp16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = oxl_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++) y[i].scales[ib] = (int8_t)OXL_MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = oxl_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(OXL_MAX(-32, OXL_MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---------------------------------------------------------------- 32-value types, weighted */

/* weights of a row's blocks: qw * sqrt(sigma2 + x^2), sigma2 = mean of x^2 over the whole row */
static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static void q4_0_row_w(const float *x, block_q4_0 *y, int64_t n, const float *qw) {
    float weight[32];
    int8_t L[32];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *xb = x + 32 * ib, *q = qw + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = q[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = oxl_fp32_to_fp16(make_qx_quants(32, 8, xb, L, weight));
        for (int j = 0; j < 16; j++) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void q4_1_row_w(const float *x, block_q4_1 *y, int64_t n, const float *qw) {
    float weight[32];
    uint8_t L[32], Laux[32];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *xb = x + 32 * ib, *q = qw + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = q[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float min;
        const float d = make_qkx_quants(32, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = oxl_fp32_to_fp16(d);
        y[ib].m = oxl_fp32_to_fp16(-min);
        for (int j = 0; j < 16; j++) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void pack_q5(const uint8_t *L, uint8_t *qs, uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const uint8_t xi0 = L[j], xi1 = L[j + 16];
        qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void q5_0_row_w(const float *x, block_q5_0 *y, int64_t n, const float *qw) {
    float weight[32];
    int8_t L[32];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *xb = x + 32 * ib, *q = qw + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = q[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = oxl_fp32_to_fp16(make_qx_quants(32, 16, xb, L, weight));
        pack_q5((const uint8_t *)L, y[ib].qs, y[ib].qh);
    }
}

static void q5_1_row_w(const float *x, block_q5_1 *y, int64_t n, const float *qw) {
    float weight[32];
    uint8_t L[32], Laux[32];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *xb = x + 32 * ib, *q = qw + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = q[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float min;
        const float d = make_qkx_quants(32, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = oxl_fp32_to_fp16(d);
        y[ib].m = oxl_fp32_to_fp16(-min);
        pack_q5(L, y[ib].qs, y[ib].qh);
    }
}

/* ---------------------------------------------------------------- IQ4_NL / IQ4_XS */

/* nearest codebook index (ties up), by midpoints; values ascending */
static inline int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl with ntry = 7: one super-block of sbs values in sub-blocks of 32
 * (sbs 32: IQ4_NL, one scale as fp16; sbs 256: IQ4_XS, 6-bit sub-block scales). qw may be NULL. */
static void iq4_superblock(int sbs, const float *x, oxl_half *dh, uint8_t *q4, uint16_t *scales_h,
                           uint8_t *scales_l, const float *qw) {
    const int8_t *values = kvalues_iq4nl;
    const int ntry = 7;
    float scales[QK_K / 32], weight[32];
    uint8_t L[QK_K];
    float sigma2 = 0;
    for (int j = 0; j < sbs; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / sbs;
    memset(q4, 0, sbs / 2);
    *dh = oxl_fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / 32; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        if (qw) {
            for (int j = 0; j < 32; j++) weight[j] = qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, 32);   /* ggml leaves these unset; they only meet a zero scale */
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float al = id * xb[j];
            const int l = best_index_int8(16, values, al);
            Lb[j] = (uint8_t)l;
            const float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float al = id * xb[j];
                const int l = best_index_int8(16, values, al);
                const float q = values[l], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
    }
    if (sbs / 32 > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = oxl_fp32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / 32; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = OXL_MAX(-32, OXL_MIN(31, l));
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index_int8(16, values, idl * x[32 * ib + j]);
            l += 32;
            const uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0) scales_l[ib / 2] = l_l;
            else scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h = (uint16_t)(*scales_h | (l_h << 2 * (ib % 8)));
        }
    } else {
        *dh = oxl_fp32_to_fp16(scales[0]);
        const float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < sbs; j++) L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    }
    for (int i = 0; i < sbs / 32; i++) {
        for (int j = 0; j < 16; j++) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
    }
}

static void iq4_nl_row(const float *x, block_iq4_nl *y, int64_t n, const float *qw) {
    uint16_t unused_h;
    for (int64_t ib = 0; ib < n / QK4_NL; ib++) {
        iq4_superblock(QK4_NL, x + QK4_NL * ib, &y[ib].d, y[ib].qs, &unused_h, NULL, qw ? qw + QK4_NL * ib : NULL);
    }
}

static void iq4_xs_row(const float *x, block_iq4_xs *y, int64_t n, const float *qw) {
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        iq4_superblock(QK_K, x + QK_K * ib, &y[ib].d, y[ib].qs, &y[ib].scales_h, y[ib].scales_l,
                       qw ? qw + QK_K * ib : NULL);
    }
}

/* ---------------------------------------------------------------- entry */

typedef void (*row_fn)(const float *x, void *y, int64_t n, const float *qw);

/* the weighted row quantizer of a type (NULL: the type ignores weights or has none here) */
static row_fn weighted_row(int type) {
    switch (type) {
    case OXL_TYPE_Q2_K: return (row_fn)q2_K_row_w;
    case OXL_TYPE_Q3_K: return (row_fn)q3_K_row_w;
    case OXL_TYPE_Q4_K: return (row_fn)q4_K_row_w;
    case OXL_TYPE_Q5_K: return (row_fn)q5_K_row_w;
    case OXL_TYPE_Q6_K: return (row_fn)q6_K_row_w;
    case OXL_TYPE_Q4_0: return (row_fn)q4_0_row_w;
    case OXL_TYPE_Q4_1: return (row_fn)q4_1_row_w;
    case OXL_TYPE_Q5_0: return (row_fn)q5_0_row_w;
    case OXL_TYPE_Q5_1: return (row_fn)q5_1_row_w;
    case OXL_TYPE_IQ4_NL: return (row_fn)iq4_nl_row;
    case OXL_TYPE_IQ4_XS: return (row_fn)iq4_xs_row;
    default: return NULL;
    }
}

int oxl_can_quantize_chunk(int type, int with_weights) {
    /* only the types checked bit for bit against ggml's quantize_<type> (tests/quant/test_quantize_file.py);
     * the float types and Q8_0 quantize the same with or without weights */
    (void)with_weights;
    switch (type) {
    case OXL_TYPE_F32: case OXL_TYPE_F16: case OXL_TYPE_BF16: case OXL_TYPE_Q8_0:
    case OXL_TYPE_Q4_0: case OXL_TYPE_Q4_1: case OXL_TYPE_Q5_0: case OXL_TYPE_Q5_1:
    case OXL_TYPE_Q2_K: case OXL_TYPE_Q3_K: case OXL_TYPE_Q4_K: case OXL_TYPE_Q5_K: case OXL_TYPE_Q6_K:
    case OXL_TYPE_IQ4_NL: case OXL_TYPE_IQ4_XS:
    /* ggml's quantize_<type> is the reference quantizer, weights or not */
    case OXL_TYPE_Q1_0: case OXL_TYPE_TQ1_0: case OXL_TYPE_TQ2_0: case OXL_TYPE_MXFP4: case OXL_TYPE_NVFP4:
        break;
    default:
        return 0;
    }
    const oxl_type_traits *t = oxl_type_info(type);
    return t != NULL && t->name != NULL && t->from_float_ref != NULL;
}

int64_t oxl_quantize_chunk(int type, const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *qw) {
    if (!oxl_can_quantize_chunk(type, qw != NULL) || nrow < 0 || n_per_row <= 0) return -1;
    const oxl_type_traits *t = oxl_type_info(type);
    if (n_per_row % t->blck_size) return -1;
    const int64_t row_size = n_per_row / t->blck_size * (int64_t)t->type_size;
    row_fn fn = weighted_row(type);
    const int always = type == OXL_TYPE_IQ4_NL || type == OXL_TYPE_IQ4_XS;
    if (fn == NULL || (qw == NULL && !always)) {
        t->from_float_ref(src, dst, nrow * n_per_row);
    } else {
        char *out = (char *)dst;
        for (int64_t r = 0; r < nrow; r++) fn(src + r * n_per_row, out + r * row_size, n_per_row, qw);
    }
    return nrow * row_size;
}
