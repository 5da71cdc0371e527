/* The 1-bit and ternary types: Q1_0 (128 signs and a scale: Bonsai's models), TQ1_0 and TQ2_0
 * (BitNet b1.58 ternary, 256-value super-blocks). Layouts in blocks.h. Q1_0 reads Q8_0 activations
 * (four per block), the ternary types Q8_K.
 *
 * Dequantize and the reference quantizers are bit-identical to ggml's (ggml-quants.c:
 * dequantize_row_q1_0/tq1_0/tq2_0, quantize_row_*_ref; gguf.quants holds NumPy copies of the ternary
 * ones). No fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "quants.h"

/* ---- Q1_0 ------------------------------------------------------------------------------------- */

void dequantize_row_q1_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d), neg_d = -d;
        for (int j = 0; j < QK1_0; j++) y[i * QK1_0 + j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : neg_d;
    }
}

/* d = mean |x| (summed in order), bit j set where x_j >= 0 (so -0.0 and +0.0 both read as +d) */
void quantize_row_q1_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q1_0 *y = (block_q1_0 *)vy;
    for (int64_t i = 0; i < n / QK1_0; i++, x += QK1_0) {
        float sum_abs = 0.0f;
        for (int j = 0; j < QK1_0; j++) sum_abs += fabsf(x[j]);
        y[i].d = oxl_fp32_to_fp16(sum_abs / QK1_0);
        memset(y[i].qs, 0, sizeof(y[i].qs));
        for (int j = 0; j < QK1_0; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

/* per Q8_0 block k of the four: sum += sumi_k * d_x * d_y,k (sumi_k = sum of +-y over its 32 values) */
void vec_dot_q1_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK1_0; i++) {
        const float dx = oxl_fp16_to_fp32(x[i].d);
        for (int k = 0; k < QK1_0 / QK8_0; k++) {
            const block_q8_0 *yb = y + i * (QK1_0 / QK8_0) + k;
            int sumi = 0;
            for (int j = 0; j < QK8_0; j++) {
                const int bit = (x[i].qs[4 * k + j / 8] >> (j % 8)) & 1;
                sumi += bit ? yb->qs[j] : -yb->qs[j];
            }
            sum += sumi * dx * oxl_fp16_to_fp32(yb->d);
        }
    }
    *s = sum;
}

/* ---- TQ2_0: value 128 c + 32 l + m is bits 2l..2l+1 of qs[32 c + m], minus 1 ------------------- */

void dequantize_row_tq2_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_tq2_0 *x = (const block_tq2_0 *)vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    *y++ = (float)(((x[i].qs[32 * c + m] >> (2 * l)) & 3) - 1) * d;
    }
}

/* d = max |x|, q = round(x / d) + 1 (roundf: half away from zero) */
void quantize_row_tq2_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_tq2_0 *y = (block_tq2_0 *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = OXL_MAX(amax, fabsf(x[j]));
        const float d = amax, id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        for (int c = 0; c < 2; c++)
            for (int m = 0; m < 32; m++) {
                uint8_t q = 0;
                for (int l = 0; l < 4; l++) q |= (uint8_t)((int)roundf(x[128 * c + 32 * l + m] * id) + 1) << (2 * l);
                y[i].qs[32 * c + m] = q;
            }
    }
}

/* per super-block: sum += sumi * (d_x * d_y), sumi exact */
void vec_dot_tq2_0_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_tq2_0 *x = (const block_tq2_0 *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    sumi += y[i].qs[128 * c + 32 * l + m] * (((x[i].qs[32 * c + m] >> (2 * l)) & 3) - 1);
        sum += (float)sumi * (oxl_fp16_to_fp32(x[i].d) * y[i].d);
    }
    *s = sum;
}

/* ---- TQ1_0: base-3 digits. A byte b holds t = ceil(b' * 256 / 243) for a 5-trit number b'; trit n
 * (most significant first) is ((uint8_t)(b * 3^n) * 3) >> 8. Values 32 n + m from qs[m] (m < 32), then
 * 160 + 16 n + m from qs[32 + m] (m < 16), then 240 + 4 n + m from qh[m] (4 trits each). ---------- */

static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};

static inline int trit(uint8_t b, int n) { return (((uint8_t)(b * pow3[n])) * 3) >> 8; }

/* the 256 trits (0, 1, 2) of a block in value order */
static void tq1_0_trits(const block_tq1_0 *b, uint8_t *t) {
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) t[32 * n + m] = (uint8_t)trit(b->qs[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) t[160 + 16 * n + m] = (uint8_t)trit(b->qs[32 + m], n);
    for (int n = 0; n < 4; n++)
        for (int m = 0; m < 4; m++) t[240 + 4 * n + m] = (uint8_t)trit(b->qh[m], n);
}

void dequantize_row_tq1_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_tq1_0 *x = (const block_tq1_0 *)vx;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        tq1_0_trits(&x[i], t);
        for (int j = 0; j < QK_K; j++) *y++ = (float)(t[j] - 1) * d;
    }
}

/* 5 (or 4, then times 3) trits, most significant first, stored as ceil(v * 256 / 243) */
static uint8_t pack_trits(const int *q, int stride, int count) {
    int v = 0;
    for (int k = 0; k < count; k++) v = v * 3 + q[k * stride];
    for (int k = count; k < 5; k++) v *= 3;
    return (uint8_t)((v * 256 + (243 - 1)) / 243);
}

void quantize_row_tq1_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_tq1_0 *y = (block_tq1_0 *)vy;
    int q[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = OXL_MAX(amax, fabsf(x[j]));
        const float d = amax, id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        for (int j = 0; j < QK_K; j++) q[j] = (int)roundf(x[j] * id) + 1;
        for (int m = 0; m < 32; m++) y[i].qs[m] = pack_trits(q + m, 32, 5);
        for (int m = 0; m < 16; m++) y[i].qs[32 + m] = pack_trits(q + 160 + m, 16, 5);
        for (int m = 0; m < 4; m++) y[i].qh[m] = pack_trits(q + 240 + m, 4, 4);
    }
}

void vec_dot_tq1_0_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_tq1_0 *x = (const block_tq1_0 *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    uint8_t t[QK_K];
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        tq1_0_trits(&x[i], t);
        int sumi = 0;
        for (int j = 0; j < QK_K; j++) sumi += y[i].qs[j] * (t[j] - 1);
        sum += (float)sumi * (oxl_fp16_to_fp32(x[i].d) * y[i].d);
    }
    *s = sum;
}

void oxl_register_scalar_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q1_0].to_float = dequantize_row_q1_0;
    t->type[OXL_TYPE_Q1_0].from_float_ref = quantize_row_q1_0_ref;
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_scalar;
    t->type[OXL_TYPE_TQ1_0].to_float = dequantize_row_tq1_0;
    t->type[OXL_TYPE_TQ1_0].from_float_ref = quantize_row_tq1_0_ref;
    t->type[OXL_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_scalar;
    t->type[OXL_TYPE_TQ2_0].to_float = dequantize_row_tq2_0;
    t->type[OXL_TYPE_TQ2_0].from_float_ref = quantize_row_tq2_0_ref;
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_scalar;
}
