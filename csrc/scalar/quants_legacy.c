/* The 32-value block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL (layouts in blocks.h).
 *
 * Reference quantizers are bit-identical to ggml's quantize_row_*_ref (and so to the PyPI gguf
 * package's gguf.quants). That needs IEEE single-precision steps exactly as written: no fused
 * multiply-add, which GCC would otherwise form on targets where FMA is baseline (aarch64). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>

#include "quants.h"

/* ---- dequantize: y = d * q (+ m) ---------------------------------------------------------- */

void dequantize_row_q4_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[i * QK4_0 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[i * QK4_0 + j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d), m = oxl_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[i * QK4_1 + j] = (x[i].qs[j] & 0x0F) * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* qh bit j is the 5th bit of value j (j = 0..31) */
void dequantize_row_q5_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            y[i * QK5_0 + j] = x0 * d;
            y[i * QK5_0 + j + QK5_0 / 2] = x1 * d;
        }
    }
}

void dequantize_row_q5_1(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d), m = oxl_fp16_to_fp32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
            const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[i * QK5_1 + j] = x0 * d + m;
            y[i * QK5_1 + j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

void dequantize_row_q8_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

void dequantize_row_q8_1(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q8_1 *x = (const block_q8_1 *)vx;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[i * QK8_1 + j] = x[i].qs[j] * d;
    }
}

void dequantize_row_iq4_nl(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_iq4_nl *x = (const block_iq4_nl *)vx;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[i * QK4_NL + j] = d * kvalues_iq4nl[x[i].qs[j] & 0x0F];
            y[i * QK4_NL + j + QK4_NL / 2] = d * kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

/* ---- reference quantize ------------------------------------------------------------------- */

/* the value of largest magnitude (the first one on ties), as ggml picks it */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* d = max / -8 (max = signed value of largest magnitude), q = min(15, trunc(x / d + 8.5)) */
void quantize_row_q4_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q4_0 *y = (block_q4_0 *)vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const uint8_t q0 = (uint8_t)OXL_MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t q1 = (uint8_t)OXL_MIN(15, (int8_t)(x[j + QK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)) */
void quantize_row_q4_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q4_1 *y = (block_q4_1 *)vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        y[i].m = oxl_fp32_to_fp16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const uint8_t q0 = (uint8_t)OXL_MIN(15, (int8_t)((x[j] - mn) * id + 0.5f));
            const uint8_t q1 = (uint8_t)OXL_MIN(15, (int8_t)((x[j + QK4_1 / 2] - mn) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* d = max / -16, q = min(31, trunc(x / d + 16.5)); low nibbles in qs, 5th bits in qh */
void quantize_row_q5_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q5_0 *y = (block_q5_0 *)vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const uint8_t q0 = (uint8_t)OXL_MIN(31, (int8_t)(x[j] * id + 16.5f));
            const uint8_t q1 = (uint8_t)OXL_MIN(31, (int8_t)(x[j + QK5_0 / 2] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5) */
void quantize_row_q5_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q5_1 *y = (block_q5_1 *)vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        y[i].m = oxl_fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t q0 = (uint8_t)((x[j] - mn) * id + 0.5f);
            const uint8_t q1 = (uint8_t)((x[j + QK5_1 / 2] - mn) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* d = max|x| / 127, q = round(x / d) (half away from zero) */
void quantize_row_q8_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float d = absmax(x, QK8_0) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* as Q8_0, plus s = d * sum(q) so that a _1 type's "+ m" term costs one multiply per block */
void quantize_row_q8_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float d = absmax(x, QK8_1) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = oxl_fp32_to_fp16(sum * d);
    }
}

/* index of the codebook value nearest to x (the lower one on ties), values ascending */
static int best_index_iq4nl(float x) {
    const int8_t *val = kvalues_iq4nl;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < val[mid]) hi = mid; else lo = mid;
    }
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

#define IQ4NL_GROUP_MAX_EPS 1e-15f

/* ggml's quantize_row_iq4_nl_ref: start from d = max / -127, map each x to its nearest codebook
 * value, then set d to the weighted least-squares scale sum(w q x) / sum(w q q), w = x^2.
 * A block with max|x| < 1e-15 gets d = 0 and all indices 0 (ggml leaves them unspecified). */
void quantize_row_iq4_nl_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_iq4_nl *y = (block_iq4_nl *)vy;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        uint8_t L[QK4_NL] = {0};
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_NL; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        float d = 0.0f;
        if (amax >= IQ4NL_GROUP_MAX_EPS) {
            d = max / kvalues_iq4nl[0];
            const float id = 1 / d;
            float sumqx = 0, sumq2 = 0;
            for (int j = 0; j < QK4_NL; j++) {
                const float al = id * x[j];
                L[j] = (uint8_t)best_index_iq4nl(al);
                const float q = kvalues_iq4nl[L[j]];
                const float w = x[j] * x[j];
                sumqx += w * q * x[j];
                sumq2 += w * q * q;
            }
            d = sumqx / sumq2;
        }
        y[i].d = oxl_fp32_to_fp16(d);
        for (int j = 0; j < QK4_NL / 2; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + QK4_NL / 2] << 4));
    }
}

/* ---- vec_dot: integer dot per block, scaled by both blocks' d ----------------------------- */

void vec_dot_q4_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK4_0 / 2];
        }
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

/* sum_j (d_x q_j + m)(d_y p_j) = d_x d_y sum(q p) + m s_y */
void vec_dot_q4_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QK4_1 / 2];
        }
        sum += oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d) * sumi
             + oxl_fp16_to_fp32(x[i].m) * oxl_fp16_to_fp32(y[i].s);
    }
    *s = sum;
}

void vec_dot_q5_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += x0 * y[i].qs[j] + x1 * y[i].qs[j + QK5_0 / 2];
        }
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

void vec_dot_q5_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
            const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            sumi += x0 * y[i].qs[j] + x1 * y[i].qs[j + QK5_1 / 2];
        }
        sum += oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d) * sumi
             + oxl_fp16_to_fp32(x[i].m) * oxl_fp16_to_fp32(y[i].s);
    }
    *s = sum;
}

void vec_dot_q8_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

/* Q8_1 weights have no offset, so their s term is not needed */
void vec_dot_q8_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q8_1 *x = (const block_q8_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_1; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

void vec_dot_iq4_nl_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_iq4_nl *x = (const block_iq4_nl *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK4_NL; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_NL / 2; j++) {
            sumi += kvalues_iq4nl[x[i].qs[j] & 0x0F] * y[i].qs[j];
            sumi += kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + QK4_NL / 2];
        }
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

/* ---- registration ------------------------------------------------------------------------- */

#define SET(ty, deq, qref, dot) do { \
        t->type[ty].to_float = deq; \
        t->type[ty].from_float_ref = qref; \
        t->type[ty].vec_dot = dot; \
    } while (0)

void oxl_register_scalar_legacy(oxl_kernel_table *t) {
    SET(OXL_TYPE_Q4_0, dequantize_row_q4_0, quantize_row_q4_0_ref, vec_dot_q4_0_q8_0_scalar);
    SET(OXL_TYPE_Q4_1, dequantize_row_q4_1, quantize_row_q4_1_ref, vec_dot_q4_1_q8_1_scalar);
    SET(OXL_TYPE_Q5_0, dequantize_row_q5_0, quantize_row_q5_0_ref, vec_dot_q5_0_q8_0_scalar);
    SET(OXL_TYPE_Q5_1, dequantize_row_q5_1, quantize_row_q5_1_ref, vec_dot_q5_1_q8_1_scalar);
    SET(OXL_TYPE_Q8_0, dequantize_row_q8_0, quantize_row_q8_0_ref, vec_dot_q8_0_q8_0_scalar);
    SET(OXL_TYPE_Q8_1, dequantize_row_q8_1, quantize_row_q8_1_ref, vec_dot_q8_1_q8_1_scalar);
    SET(OXL_TYPE_IQ4_NL, dequantize_row_iq4_nl, quantize_row_iq4_nl_ref, vec_dot_iq4_nl_q8_0_scalar);
}
