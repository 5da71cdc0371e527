/* The K-quants (256-value super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, and Q8_K, the
 * activation type their vec_dot reads. Block layouts: csrc/blocks.h (byte-identical to ggml).
 *
 * quantize_row_*_ref reproduce ggml's quantize_row_*_ref bit for bit (same float operations in the
 * same order), so files we write match llama.cpp's. vec_dot_*_q8_K_scalar accumulate each super-block
 * in integers and scale once per super-block, as the SIMD tiers do. */
#include <math.h>

#include "quants.h"
#include "quants_k.h"

/* Bit-exact reference rounding needs every a*b+c rounded twice, as ggml's portable C does:
 * forbid fused multiply-add contraction (matters on aarch64, where FMA is always available). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quants_search.h"

/* Symmetric 3-bit-style quantization with up to 5 rounds of coordinate descent (weights x^2);
 * L gets values in [0, 2*nmax). Returns the scale. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = OXL_MAX(-nmax, OXL_MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = OXL_MAX(-nmax, OXL_MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Pack 256 2-bit values: byte l of each 32-byte half holds values l, l+32, l+64, l+96 of that half. */
static void pack_2bit_k(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

/* ---------------------------------------------------------------- Q2_K
 * qs: 4 values per byte (pack_2bit_k); scales[j]: low nibble scale, high nibble min of 16-group j.
 * x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4) */

void quantize_row_q2_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q2_K *y = (block_q2_K *)vy;
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = oxl_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = 0;
            y[i].d = oxl_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++) {
                const int l = nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = oxl_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = oxl_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = oxl_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = oxl_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)OXL_MAX(0, OXL_MIN(3, l));
            }
        }
        pack_2bit_k(L, y[i].qs);
    }
}

void dequantize_row_q2_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        const float dmin = oxl_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int half = 0; half < QK_K; half += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int g = 0; g < 2; g++, is++) {
                    const uint8_t sc = x[i].scales[is];
                    const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[16 * g + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* The 256 2-bit fields of a Q2_K/Q3_K block: value v is byte (v/128)*32 + v%32, bits 2*((v/32)%4). */
static void unpack_2bit_k(const uint8_t *qs, int8_t *q) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * k + l] = (int8_t)((qs[32 * h + l] >> (2 * k)) & 3);
}

void vec_dot_q2_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    int8_t q[QK_K];
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        unpack_2bit_k(x[i].qs, q);
        int sum_q = 0, sum_m = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * g + l] * y[i].qs[16 * g + l];
            sum_q += (x[i].scales[g] & 0xF) * dot;
            sum_m += (x[i].scales[g] >> 4) * y[i].bsums[g];
        }
        sum += y[i].d * (oxl_fp16_to_fp32(x[i].d) * sum_q - oxl_fp16_to_fp32(x[i].dmin) * sum_m);
    }
    *s = sum;
}

/* ---------------------------------------------------------------- Q3_K
 * value = low 2 bits (as Q2_K) | hmask bit << 2, minus 4; hmask byte v%32 holds value v at bit v/32.
 * x = d * scale[v/16] * (q - 4) with 6-bit signed scales (oxl_unpack_scales_q3k). */

void quantize_row_q3_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q3_K *y = (block_q3_K *)vy;
    const int64_t nb = n / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(OXL_MAX(-32, OXL_MIN(31, l)) + 32);
                if (j < 8) {
                    y[i].scales[j] = l & 0xF;
                } else {
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                }
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = oxl_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = oxl_fp32_to_fp16(0.f);
        }
        int8_t sc[16];
        oxl_unpack_scales_q3k(y[i].scales, sc);
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = oxl_fp16_to_fp32(y[i].d) * sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(OXL_MAX(-4, OXL_MIN(3, l)) + 4);
            }
        }
        memset(y[i].hmask, 0, QK_K / 8);
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] -= 4;
            }
        }
        pack_2bit_k((const uint8_t *)L, y[i].qs);
    }
}

/* the 256 values of a Q3_K block, q - 4 in [-4, 3] */
static void q3_k_values(const block_q3_K *b, int8_t *q) {
    unpack_2bit_k(b->qs, q);
    for (int v = 0; v < QK_K; v++) q[v] = (int8_t)(q[v] - ((b->hmask[v % 32] >> (v / 32)) & 1 ? 0 : 4));
}

void dequantize_row_q3_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        int8_t sc[16], q[QK_K];
        oxl_unpack_scales_q3k(x[i].scales, sc);
        q3_k_values(&x[i], q);
        for (int v = 0; v < QK_K; v++) y[i * QK_K + v] = d * sc[v / 16] * q[v];
    }
}

void vec_dot_q3_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int8_t sc[16], q[QK_K];
        oxl_unpack_scales_q3k(x[i].scales, sc);
        q3_k_values(&x[i], q);
        int sumi = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * g + l] * y[i].qs[16 * g + l];
            sumi += sc[g] * dot;
        }
        sum += oxl_fp16_to_fp32(x[i].d) * y[i].d * sumi;
    }
    *s = sum;
}

/* ---------------------------------------------------------------- Q4_K / Q5_K
 * 8 sub-blocks of 32; qs byte l of 32-byte chunk c holds value 64c+l (low nibble) and 64c+32+l
 * (high nibble); Q5_K's qh byte l holds the 5th bit of value 32k+l at bit k.
 * x = d * scale_j * q - dmin * min_j (oxl_scale_min_k4). */

/* shared by Q4_K and Q5_K: fit the sub-blocks, pack scales/mins, return the final levels in L */
static void quantize_k4_block(const float *x, int nmax, float rmin, int nstep, uint8_t *scales_out,
                              oxl_half *d_out, oxl_half *dmin_out, uint8_t *L) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = OXL_MIN(63, ls);
        lm = OXL_MIN(63, lm);
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = oxl_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = oxl_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        oxl_scale_min_k4(j, scales_out, &sc, &m);
        const float d = oxl_fp16_to_fp32(*d_out) * sc;
        if (!d) continue;
        const float dm = oxl_fp16_to_fp32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)OXL_MAX(0, OXL_MIN(nmax, l));
        }
    }
}

void quantize_row_q4_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q4_K *y = (block_q4_K *)vy;
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        memset(y[i].scales, 0, K_SCALE_SIZE);
        quantize_k4_block(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
        }
    }
}

void dequantize_row_q4_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        const float dmin = oxl_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            oxl_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            oxl_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void vec_dot_q4_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        uint8_t sm[16];
        oxl_unpack_scales_k4(x[i].scales, sm);
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int dot = 0;
            for (int l = 0; l < 32; l++) dot += ((q[l] >> shift) & 0xF) * y[i].qs[32 * j + l];
            sum_q += sm[j] * dot;
            sum_m += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += y[i].d * (oxl_fp16_to_fp32(x[i].d) * sum_q - oxl_fp16_to_fp32(x[i].dmin) * sum_m);
    }
    *s = sum;
}

void quantize_row_q5_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q5_K *y = (block_q5_K *)vy;
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        memset(y[i].scales, 0, K_SCALE_SIZE);
        quantize_k4_block(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        memset(y[i].qh, 0, QK_K / 8);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) { l1 -= 16; y[i].qh[l] |= (uint8_t)(1 << (2 * c)); }
                if (l2 > 15) { l2 -= 16; y[i].qh[l] |= (uint8_t)(2 << (2 * c)); }
                y[i].qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void dequantize_row_q5_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        const float dmin = oxl_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            oxl_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            oxl_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0xF) + ((qh[l] >> (2 * c)) & 1) * 16) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + ((qh[l] >> (2 * c + 1)) & 1) * 16) - m2;
        }
    }
}

void vec_dot_q5_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        uint8_t sm[16];
        oxl_unpack_scales_k4(x[i].scales, sm);
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int dot = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
                dot += v * y[i].qs[32 * j + l];
            }
            sum_q += sm[j] * dot;
            sum_m += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += y[i].d * (oxl_fp16_to_fp32(x[i].d) * sum_q - oxl_fp16_to_fp32(x[i].dmin) * sum_m);
    }
    *s = sum;
}

/* ---------------------------------------------------------------- Q6_K
 * per 128-value half: ql 64 bytes, qh 32 bytes. Value 32k+l (k = 0..3, l = 0..31) of the half:
 * low 4 bits in ql[l + 32*(k%2)] (nibble k/2), high 2 bits in qh[l] at bit 2k; q - 32 in [-32, 31].
 * x = d * scales[v/16] * (q - 32), int8 scales. */

void quantize_row_q6_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q6_K *y = (block_q6_K *)vy;
    const int64_t nb = n / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, NULL);
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
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(OXL_MAX(-32, OXL_MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* the 256 values of a Q6_K block, q - 32 in [-32, 31] */
static void q6_k_values(const block_q6_K *b, int8_t *q) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            q[128 * h + l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
            q[128 * h + l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[128 * h + l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[128 * h + l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void dequantize_row_q6_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const int64_t nb = n / QK_K;
    int8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        q6_k_values(&x[i], q);
        /* ggml evaluates d * sc * q left to right: keep that order for bit-exact output */
        for (int v = 0; v < QK_K; v++) y[i * QK_K + v] = d * x[i].scales[v / 16] * q[v];
    }
}

void vec_dot_q6_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    int8_t q[QK_K];
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        q6_k_values(&x[i], q);
        int sumi = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * g + l] * y[i].qs[16 * g + l];
            sumi += x[i].scales[g] * dot;
        }
        sum += oxl_fp16_to_fp32(x[i].d) * y[i].d * sumi;
    }
    *s = sum;
}

/* ---------------------------------------------------------------- IQ4_XS
 * 8 sub-blocks of 32: qs[16*ib + j] holds value j (low nibble) and j+16 (high nibble) of sub-block ib
 * as indices into kvalues_iq4nl; x = d * (ls - 32) * kvalues_iq4nl[q] (oxl_iq4xs_scale). */

/* index of the codebook value nearest to x (ties go up), by midpoints; val sorted, n a power of 2 */
static inline int best_index_int8(int n, const int8_t *val, float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = n >> 1; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = (x2 >= (float)(val[j - 1] + val[j])) ? j : idx;
    }
    return idx;
}

/* ggml's quantize_row_iq4_nl_impl for one IQ4_XS super-block without importance weights
 * (weights x^2, 7 scale trials either side of -max/127). */
static void quantize_iq4_xs_block(const float *x, block_iq4_xs *y) {
    const int8_t *values = kvalues_iq4nl;
    const int ntry = 7;
    uint8_t L[QK_K];
    float scales[QK_K / 32], weight[32];
    memset(y->qs, 0, QK_K / 2);
    y->d = oxl_fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, 32);
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const int l = best_index_int8(16, values, id * xb[j]);
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
                const int l = best_index_int8(16, values, id * xb[j]);
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
    y->scales_h = 0;
    const float d = -max_scale / 32;
    y->d = oxl_fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        int l = nearest_int(id * scales[ib]);
        l = OXL_MAX(-32, OXL_MIN(31, l));
        const float dl = d * l;
        const float idl = dl ? 1 / dl : 0.f;
        for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index_int8(16, values, idl * x[32 * ib + j]);
        l += 32;
        if (ib % 2 == 0) {
            y->scales_l[ib / 2] = (uint8_t)(l & 0xF);
        } else {
            y->scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
        }
        y->scales_h = (uint16_t)(y->scales_h | ((l >> 4) << (2 * ib)));
    }
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int j = 0; j < 16; j++) y->qs[16 * ib + j] = (uint8_t)(L[32 * ib + j] | (L[32 * ib + 16 + j] << 4));
    }
}

void quantize_row_iq4_xs_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_iq4_xs *y = (block_iq4_xs *)vy;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) quantize_iq4_xs_block(x + i * QK_K, &y[i]);
}

void dequantize_row_iq4_xs(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_iq4_xs *x = (const block_iq4_xs *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, y += 32) {
            const float dl = d * oxl_iq4xs_scale(&x[i], ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * kvalues_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void vec_dot_iq4_xs_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_iq4_xs *x = (const block_iq4_xs *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int sumi = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t *qs = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int dot = 0;
            for (int j = 0; j < 16; j++) {
                dot += kvalues_iq4nl[qs[j] & 0xF] * q8[j] + kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
            }
            sumi += oxl_iq4xs_scale(&x[i], ib) * dot;
        }
        sum += oxl_fp16_to_fp32(x[i].d) * y[i].d * sumi;
    }
    *s = sum;
}

/* ---------------------------------------------------------------- Q8_K (activations)
 * d = max|x| / 127 (sign of the first largest |x|: q = round(-127/max * x)), float d,
 * bsums[g] = sum of q over values 16g..16g+15. */

void quantize_row_q8_K_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_K *y = (block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            y[i].d = 0;
            memset(y[i].qs, 0, QK_K);
            memset(y[i].bsums, 0, sizeof(y[i].bsums));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)OXL_MIN(127, nearest_int(iscale * x[j]));
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void dequantize_row_q8_K(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q8_K *x = (const block_q8_K *)vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        for (int j = 0; j < QK_K; j++) *y++ = x[i].d * x[i].qs[j];
    }
}

void vec_dot_q8_K_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q8_K *x = (const block_q8_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < QK_K; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += x[i].d * y[i].d * sumi;
    }
    *s = sum;
}

/* ---------------------------------------------------------------- registration */

#define SET_K(id, t)                                         \
    do {                                                     \
        tab->type[id].to_float = dequantize_row_##t;         \
        tab->type[id].from_float_ref = quantize_row_##t##_ref; \
        tab->type[id].from_float = quantize_row_##t##_ref;   \
        tab->type[id].vec_dot = vec_dot_##t##_q8_K_scalar;   \
    } while (0)

void oxl_register_scalar_k(oxl_kernel_table *tab) {
    SET_K(OXL_TYPE_Q2_K, q2_K);
    SET_K(OXL_TYPE_Q3_K, q3_K);
    SET_K(OXL_TYPE_Q4_K, q4_K);
    SET_K(OXL_TYPE_Q5_K, q5_K);
    SET_K(OXL_TYPE_Q6_K, q6_K);
    SET_K(OXL_TYPE_IQ4_XS, iq4_xs);
    SET_K(OXL_TYPE_Q8_K, q8_K);
}
