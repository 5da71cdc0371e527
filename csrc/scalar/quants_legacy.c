/* The 32-value block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL. */
#include <math.h>

#include "quants.h"

void dequantize_row_q8_0(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const float d = oxl_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

/* d = max|x| / 127, q = round(x / d) */
void quantize_row_q8_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[i * QK8_0 + j]));
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = oxl_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[i * QK8_0 + j] * id);
    }
}

void vec_dot_q8_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int nb = n / QK8_0;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += sumi * oxl_fp16_to_fp32(x[i].d) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}
