/* NEON (AArch64) vec_dot kernels for Q4_K, Q5_K and Q6_K against Q8_K activations.
 *
 * The dotprod tier compiles this same file again (csrc/arm/dotprod/quants_k_dotprod.c) with
 * __ARM_FEATURE_DOTPROD set: then dot_s8 is one SDOT instead of two widening multiplies.
 * Each super-block is accumulated in integers and scaled once, as in the scalar kernels. */
#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>

#include "../../blocks.h"
#include "../../kernels.h"
#include "../../scalar/quants_k.h"

#ifndef OXL_K_NEON_REGISTER
#define OXL_K_NEON_REGISTER oxl_register_neon_k
#endif

/* acc + the 16 products a*b summed in groups of 4 (the lane grouping does not matter here:
 * callers reduce the whole vector) */
static inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* sum_j mins[j] * (bsums[2j] + bsums[2j+1]) for the 8 sub-blocks of 32 */
static inline int32_t mins_dot_k4(const uint8_t *mins, const int16_t *bsums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins)));
    const int32x4_t p = vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(pairs)), m, pairs);
    return vaddvq_s32(p);
}

static void vec_dot_q4_K_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx,
                                   const void *OXL_RESTRICT vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        uint32_t sm[4];
        oxl_unpack_scales_k4_words(x[i].scales, sm);
        const uint8_t *sc = (const uint8_t *)sm;
        const int32_t sum_m = mins_dot_k4(sc + 8, y[i].bsums);
        const int8_t *q8 = y[i].qs;
        int32_t sum_q = 0;
        for (int c = 0; c < 4; c++, q8 += 64) {
            const uint8x16_t qa = vld1q_u8(x[i].qs + 32 * c), qb = vld1q_u8(x[i].qs + 32 * c + 16);
            int32x4_t p = dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(qa, m4)), vld1q_s8(q8));
            p = dot_s8(p, vreinterpretq_s8_u8(vandq_u8(qb, m4)), vld1q_s8(q8 + 16));
            sum_q += vaddvq_s32(p) * sc[2 * c];
            p = dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(qa, 4)), vld1q_s8(q8 + 32));
            p = dot_s8(p, vreinterpretq_s8_u8(vshrq_n_u8(qb, 4)), vld1q_s8(q8 + 48));
            sum_q += vaddvq_s32(p) * sc[2 * c + 1];
        }
        sum += y[i].d * (oxl_fp16_to_fp32(x[i].d) * sum_q - oxl_fp16_to_fp32(x[i].dmin) * sum_m);
    }
    *s = sum;
}

static void vec_dot_q5_K_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx,
                                   const void *OXL_RESTRICT vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0xF), m1 = vdupq_n_u8(1), m2 = vdupq_n_u8(2);
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        uint32_t sm[4];
        oxl_unpack_scales_k4_words(x[i].scales, sm);
        const uint8_t *sc = (const uint8_t *)sm;
        const int32_t sum_m = mins_dot_k4(sc + 8, y[i].bsums);
        /* qh byte l: bit j = 5th bit of value 32j + l; consumed 2 bits per 64 values */
        uint8x16_t qha = vld1q_u8(x[i].qh), qhb = vld1q_u8(x[i].qh + 16);
        const int8_t *q8 = y[i].qs;
        int32_t sum_q = 0;
        for (int c = 0; c < 4; c++, q8 += 64) {
            const uint8x16_t qa = vld1q_u8(x[i].qs + 32 * c), qb = vld1q_u8(x[i].qs + 32 * c + 16);
            const uint8x16_t la = vorrq_u8(vandq_u8(qa, m4), vshlq_n_u8(vandq_u8(qha, m1), 4));
            const uint8x16_t lb = vorrq_u8(vandq_u8(qb, m4), vshlq_n_u8(vandq_u8(qhb, m1), 4));
            const uint8x16_t ha = vorrq_u8(vshrq_n_u8(qa, 4), vshlq_n_u8(vandq_u8(qha, m2), 3));
            const uint8x16_t hb = vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vandq_u8(qhb, m2), 3));
            qha = vshrq_n_u8(qha, 2);
            qhb = vshrq_n_u8(qhb, 2);
            int32x4_t p = dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(la), vld1q_s8(q8));
            p = dot_s8(p, vreinterpretq_s8_u8(lb), vld1q_s8(q8 + 16));
            sum_q += vaddvq_s32(p) * sc[2 * c];
            p = dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(ha), vld1q_s8(q8 + 32));
            p = dot_s8(p, vreinterpretq_s8_u8(hb), vld1q_s8(q8 + 48));
            sum_q += vaddvq_s32(p) * sc[2 * c + 1];
        }
        sum += y[i].d * (oxl_fp16_to_fp32(x[i].d) * sum_q - oxl_fp16_to_fp32(x[i].dmin) * sum_m);
    }
    *s = sum;
}

static void vec_dot_q6_K_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx,
                                   const void *OXL_RESTRICT vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0xF), m3 = vdupq_n_u8(3);
    const int8x16_t k32 = vdupq_n_s8(32);
    float sum = 0;
    for (int i = 0; i < nb; i++) {
        const int8_t *sc = x[i].scales;
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            /* value 32k + l of this half: nibble k/2 of ql[l + 32*(k%2)], 2 high bits at bit 2k of qh[l] */
            for (int k = 0; k < 4; k++) {
                int32_t part[2];
                for (int g = 0; g < 2; g++) {
                    const uint8x16_t lo = vld1q_u8(ql + 32 * (k % 2) + 16 * g);
                    const uint8x16_t hi = vld1q_u8(qh + 16 * g);
                    const uint8x16_t nib = k < 2 ? vandq_u8(lo, m4) : vshrq_n_u8(lo, 4);
                    const uint8x16_t top = vandq_u8(vshlq_u8(hi, vdupq_n_s8((int8_t)(-2 * k))), m3);
                    const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(nib, vshlq_n_u8(top, 4))), k32);
                    part[g] = vaddvq_s32(dot_s8(vdupq_n_s32(0), q, vld1q_s8(q8 + 32 * k + 16 * g)));
                }
                sumi += part[0] * sc[8 * h + 2 * k] + part[1] * sc[8 * h + 2 * k + 1];
            }
        }
        sum += oxl_fp16_to_fp32(x[i].d) * y[i].d * sumi;
    }
    *s = sum;
}

void OXL_K_NEON_REGISTER(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_neon;
    t->type[OXL_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_neon;
    t->type[OXL_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_neon;
}

#endif /* __aarch64__ */
