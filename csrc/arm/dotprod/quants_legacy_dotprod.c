/* ARMv8.2 dotprod kernels for the hottest 32-value block types: vdotq_s32 does 4 int8 products per
 * int32 lane. Decoding is shared with the NEON tier (csrc/arm/quants_legacy_arm.h). */
#include "../quants_legacy_arm.h"

static inline int dot32_dotprod(const int8x16_t x[2], const int8x16_t y[2]) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), x[0], y[0]), x[1], y[1]));
}

#define VEC_DOT(name, kind) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) { \
        OXL_ARM_VEC_DOT_BODY(kind, n, s, x, y, dot32_dotprod); \
    }

VEC_DOT(vec_dot_q4_0_q8_0_dotprod, K_Q4_0)
VEC_DOT(vec_dot_q4_1_q8_1_dotprod, K_Q4_1)
VEC_DOT(vec_dot_q5_0_q8_0_dotprod, K_Q5_0)
VEC_DOT(vec_dot_q8_0_q8_0_dotprod, K_Q8_0)
VEC_DOT(vec_dot_iq4_nl_q8_0_dotprod, K_IQ4_NL)
VEC_DOT(vec_dot_mxfp4_q8_0_dotprod, K_MXFP4)

void oxl_register_dotprod_legacy(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_dotprod;
    t->type[OXL_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_dotprod;
    t->type[OXL_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_dotprod;
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_dotprod;
    t->type[OXL_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_dotprod;
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_dotprod;
}
