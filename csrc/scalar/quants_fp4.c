/* The FP4 types: MXFP4 (32 E2M1 values, E8M0 scale) and NVFP4 (64 values, 4 UE4M3 scales of 16).
 * Layouts in blocks.h; both read Q8_0 activations (an NVFP4 block spans two).
 *
 * Dequantize and the reference quantizers are bit-identical to ggml's (ggml-quants.c:
 * dequantize_row_mxfp4/nvfp4, quantize_row_mxfp4/nvfp4_ref; the gguf package's gguf.quants holds
 * NumPy copies of both dequantizers and of MXFP4's quantizer, which the tests use). IEEE single
 * steps exactly as written: no fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "quants.h"

/* ---- dequantize: y = kvalues_mxfp4[q] * scale ---------------------------------------------- */

void dequantize_row_mxfp4(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_mxfp4 *x = (const block_mxfp4 *)vx;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float d = oxl_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[i * QK_MXFP4 + j] = kvalues_mxfp4[x[i].qs[j] & 0x0F] * d;
            y[i * QK_MXFP4 + j + QK_MXFP4 / 2] = kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

void dequantize_row_nvfp4(const void *OXL_RESTRICT vx, float *OXL_RESTRICT y, int64_t n) {
    const block_nvfp4 *x = (const block_nvfp4 *)vx;
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; s++) {
            const float d = oxl_ue4m3_to_fp32_half(x[i].d[s]);
            float *yb = y + i * QK_NVFP4 + s * QK_NVFP4_SUB;
            for (int j = 0; j < QK_NVFP4_SUB / 2; j++) {
                yb[j] = kvalues_mxfp4[x[i].qs[s * (QK_NVFP4_SUB / 2) + j] & 0x0F] * d;
                yb[j + QK_NVFP4_SUB / 2] = kvalues_mxfp4[x[i].qs[s * (QK_NVFP4_SUB / 2) + j] >> 4] * d;
            }
        }
    }
}

/* ---- reference quantize ---------------------------------------------------------------------- */

/* the codebook entry nearest x / e (the first one on ties), as ggml's best_index_mxfp4 */
static int best_index_fp4(float x, float e) {
    int best = 0;
    float best_err = fabsf(kvalues_mxfp4[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(kvalues_mxfp4[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static float abs_max(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    return amax;
}

/* e = floor(log2(amax)) - 2 + 127 (the largest value lands in the top binade of the codebook), 0 for a
 * zero block. ggml converts the float straight to uint8_t, which for a block below 2^-125 is out of
 * range; x86 compilers wrap it modulo 256 (via int), and so does this on every target. */
void quantize_row_mxfp4_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_mxfp4 *y = (block_mxfp4 *)vy;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        const float amax = abs_max(x, QK_MXFP4);
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = oxl_e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_fp4(x[j], d) | best_index_fp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

/* float -> UE4M3, as ggml_fp32_to_ue4m3: clamped to [0, 448], mantissa rounded half up on its 4th
 * bit, exponents past 14 saturate to 0x7E (448), subnormals rounded from x * 2^9 */
static uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    const uint32_t bits = oxl_fp32_to_bits(x);
    int e = (int)((bits >> 23) & 0xFF) - 127 + 7;
    if (e <= 0) {
        int m = (int)(x * 512.0f + 0.5f);
        if (m > 7) m = 7;
        return m < 1 ? 0 : (uint8_t)m;
    }
    if (e >= 15) return 0x7E;
    int m = (int)((bits >> 20) & 0x7) + (int)((bits >> 19) & 1);
    if (m > 7) {
        m = 0;
        e++;
        if (e >= 15) return 0x7E;
    }
    return (uint8_t)(e << 3 | m);
}

/* per sub-block of 16: d = ue4m3(amax / 6) (6 = the largest E2M1 value), then the nearest codes */
void quantize_row_nvfp4_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_nvfp4 *y = (block_nvfp4 *)vy;
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; s++) {
            const float *xb = x + i * QK_NVFP4 + s * QK_NVFP4_SUB;
            const uint8_t ue = fp32_to_ue4m3(abs_max(xb, QK_NVFP4_SUB) / 6.0f);
            const float d = oxl_ue4m3_to_fp32_half(ue);
            y[i].d[s] = ue;
            for (int j = 0; j < QK_NVFP4_SUB / 2; j++)
                y[i].qs[s * (QK_NVFP4_SUB / 2) + j] =
                    (uint8_t)(best_index_fp4(xb[j], d) | best_index_fp4(xb[j + QK_NVFP4_SUB / 2], d) << 4);
        }
    }
}

/* ---- vec_dot against Q8_0 --------------------------------------------------------------------- */

/* per 32-value block: sum += sumi * d_x * d_y, as the other 32-value types (quants_legacy.c) */
void vec_dot_mxfp4_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_mxfp4 *x = (const block_mxfp4 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_MXFP4; i++) {
        int sumi = 0;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            sumi += kvalues_mxfp4[x[i].qs[j] & 0x0F] * y[i].qs[j];
            sumi += kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + QK_MXFP4 / 2];
        }
        sum += sumi * oxl_e8m0_to_fp32_half(x[i].e) * oxl_fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

/* per 16-value sub-block s (its activations: half s % 2 of Q8_0 block 2i + s / 2):
 * sum += sumi * d_s * d_y */
void vec_dot_nvfp4_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_nvfp4 *x = (const block_nvfp4 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_NVFP4; i++) {
        for (int sb = 0; sb < QK_NVFP4 / QK_NVFP4_SUB; sb++) {
            const block_q8_0 *yb = y + 2 * i + sb / 2;
            const int8_t *q8 = yb->qs + (sb % 2) * QK_NVFP4_SUB;
            const uint8_t *qs = x[i].qs + sb * (QK_NVFP4_SUB / 2);
            int sumi = 0;
            for (int j = 0; j < QK_NVFP4_SUB / 2; j++) {
                sumi += kvalues_mxfp4[qs[j] & 0x0F] * q8[j];
                sumi += kvalues_mxfp4[qs[j] >> 4] * q8[j + QK_NVFP4_SUB / 2];
            }
            sum += sumi * oxl_ue4m3_to_fp32_half(x[i].d[sb]) * oxl_fp16_to_fp32(yb->d);
        }
    }
    *s = sum;
}

void oxl_register_scalar_fp4(oxl_kernel_table *t) {
    t->type[OXL_TYPE_MXFP4].to_float = dequantize_row_mxfp4;
    t->type[OXL_TYPE_MXFP4].from_float_ref = quantize_row_mxfp4_ref;
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_scalar;
    t->type[OXL_TYPE_NVFP4].to_float = dequantize_row_nvfp4;
    t->type[OXL_TYPE_NVFP4].from_float_ref = quantize_row_nvfp4_ref;
    t->type[OXL_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_scalar;
}
