/* NEON kernels for the hottest 32-value block types (Q4_0, Q4_1, Q5_0, Q8_0, IQ4_NL) and F16:
 * widening int8 multiplies (vmull_s8) accumulated pairwise into int32. Layouts in blocks.h. */
#include "../quants_legacy_arm.h"

/* sum over 32 lanes of x * y; |x * y| <= 128 * 127, so a pair of products fits int16 */
static inline int dot32_neon(const int8x16_t x[2], const int8x16_t y[2]) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x[h]), vget_low_s8(y[h])));
        acc = vpadalq_s16(acc, vmull_high_s8(x[h], y[h]));
    }
    return vaddvq_s32(acc);
}

#define VEC_DOT(name, kind) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) { \
        OXL_ARM_VEC_DOT_BODY(kind, n, s, x, y, dot32_neon); \
    }

VEC_DOT(vec_dot_q4_0_q8_0_neon, K_Q4_0)
VEC_DOT(vec_dot_q4_1_q8_1_neon, K_Q4_1)
VEC_DOT(vec_dot_q5_0_q8_0_neon, K_Q5_0)
VEC_DOT(vec_dot_q8_0_q8_0_neon, K_Q8_0)
VEC_DOT(vec_dot_iq4_nl_q8_0_neon, K_IQ4_NL)
VEC_DOT(vec_dot_mxfp4_q8_0_neon, K_MXFP4)

static void vec_dot_f16_f32_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const uint16_t *x = (const uint16_t *)vx;
    const float *y = (const float *)vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(x + i);
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h))), vld1q_f32(y + i + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) sum += oxl_fp16_to_fp32(x[i]) * y[i];
    *s = sum;
}

void oxl_register_neon_legacy(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_neon;
    t->type[OXL_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_neon;
    t->type[OXL_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_neon;
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_neon;
    t->type[OXL_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_neon;
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_neon;
    t->type[OXL_TYPE_F16].vec_dot = vec_dot_f16_f32_neon;
}
