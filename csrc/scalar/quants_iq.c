/* The i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: dequantize (bit for bit with ggml's
 * dequantize_row_iq*; gguf.quants holds NumPy copies the tests use) and vec_dot against Q8_K, both on the
 * integer form of csrc/iq_decode.h. No reference quantizer: ggml's needs its grid search tables and an
 * importance matrix; files of these types are made by llama.cpp (llama-quantize). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "../iq_decode.h"
#include "quants.h"

/* ggml's per-run scale db from the integer one (ls = 2 s + 1), and its value y = db * (grid * sign) --
 * for IQ1 db * (grid + delta) = db * (w / 8), exact -- in ggml's float steps */
static inline float iq_run_scale(int type, float d, int ls) {
    const int s = (ls - 1) / 2;
    switch (type) {
    case OXL_TYPE_IQ2_XXS: case OXL_TYPE_IQ2_XS: case OXL_TYPE_IQ2_S: return d * (0.5f + s) * 0.25f;
    case OXL_TYPE_IQ3_XXS: return d * (0.5f + s) * 0.5f;
    default: return d * ls;   /* IQ3_S: d (1 + 2 s); IQ1: d (2 s + 1) */
    }
}

static void iq_dequantize(int type, const void *vx, float *y, int64_t n) {
    const char *x = (const char *)vx;
    const size_t bx = iq_block_bytes(type);
    const int iq1 = type == OXL_TYPE_IQ1_S || type == OXL_TYPE_IQ1_M;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const void *blk = x + i * bx;
        const float d = oxl_fp16_to_fp32(iq_block_d(type, blk));
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int8_t w[32];
            int ls[2];
            iq_decode32(type, blk, ib, w, ls);
            for (int h = 0; h < 2; h++) {
                const float db = iq_run_scale(type, d, ls[h]);
                for (int j = 16 * h; j < 16 * h + 16; j++) *y++ = iq1 ? db * (w[j] * 0.125f) : db * w[j];
            }
        }
    }
}

static void iq_vec_dot(int type, int n, float *s, const void *vx, const void *vy) {
    const char *x = (const char *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const size_t bx = iq_block_bytes(type);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const void *blk = x + i * bx;
        int bsum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int8_t w[32];
            int ls[2];
            iq_decode32(type, blk, ib, w, ls);
            for (int h = 0; h < 2; h++) {
                int sumi = 0;
                for (int j = 16 * h; j < 16 * h + 16; j++) sumi += w[j] * y[i].qs[32 * ib + j];
                bsum += ls[h] * sumi;
            }
        }
        sum += (float)bsum * (oxl_fp16_to_fp32(iq_block_d(type, blk)) * y[i].d);
    }
    *s = iq_factor(type) * sum;
}

#define IQ_KERNELS(t, T) \
    void dequantize_row_##t(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n) { \
        iq_dequantize(T, x, y, n); \
    } \
    void vec_dot_##t##_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, \
                                   const void *OXL_RESTRICT y) { \
        iq_vec_dot(T, n, s, x, y); \
    }

IQ_KERNELS(iq2_xxs, OXL_TYPE_IQ2_XXS)
IQ_KERNELS(iq2_xs, OXL_TYPE_IQ2_XS)
IQ_KERNELS(iq2_s, OXL_TYPE_IQ2_S)
IQ_KERNELS(iq3_xxs, OXL_TYPE_IQ3_XXS)
IQ_KERNELS(iq3_s, OXL_TYPE_IQ3_S)
IQ_KERNELS(iq1_s, OXL_TYPE_IQ1_S)
IQ_KERNELS(iq1_m, OXL_TYPE_IQ1_M)

void oxl_register_scalar_iq(oxl_kernel_table *t) {
#define SET_IQ(T, t) do { t_->type[T].to_float = dequantize_row_##t; t_->type[T].vec_dot = vec_dot_##t##_q8_K_scalar; } while (0)
    oxl_kernel_table *t_ = t;
    SET_IQ(OXL_TYPE_IQ2_XXS, iq2_xxs);
    SET_IQ(OXL_TYPE_IQ2_XS, iq2_xs);
    SET_IQ(OXL_TYPE_IQ2_S, iq2_s);
    SET_IQ(OXL_TYPE_IQ3_XXS, iq3_xxs);
    SET_IQ(OXL_TYPE_IQ3_S, iq3_s);
    SET_IQ(OXL_TYPE_IQ1_S, iq1_s);
    SET_IQ(OXL_TYPE_IQ1_M, iq1_m);
#undef SET_IQ
}
