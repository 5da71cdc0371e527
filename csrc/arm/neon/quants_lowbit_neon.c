/* NEON kernels for the 1-bit, ternary, NVFP4 and 1- to 3-bit i-quant types: exact integer block sums and
 * the scalar tier's float steps in its order (csrc/scalar/quants_lowbit.c, quants_fp4.c, csrc/iq_decode.h),
 * so every result is the scalar float bit for bit. The dotprod tier inherits them. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <arm_neon.h>

#include "../../iq_decode.h"

static const uint8_t kbit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};

/* 0xFF in lane j where bit j of (b0, b1) is set */
static inline uint8x16_t bit_mask16(uint8_t b0, uint8_t b1) {
    return vtstq_u8(vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1)), vld1q_u8(kbit));
}

/* sum of x * y over 16 lanes (|x y| <= 128 * 127) */
static inline int dot16(int8x16_t x, int8x16_t y) {
    int32x4_t acc = vpaddlq_s16(vmull_s8(vget_low_s8(x), vget_low_s8(y)));
    acc = vpadalq_s16(acc, vmull_high_s8(x, y));
    return vaddvq_s32(acc);
}

/* ---- Q1_0: per Q8_0 block, sumi = sum of +-y; sum += sumi * d_x * d_y ----------------------------- */

static void vec_dot_q1_0_q8_0_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK1_0; i++) {
        const float dx = oxl_fp16_to_fp32(x[i].d);
        for (int k = 0; k < 4; k++) {
            const block_q8_0 *yb = y + 4 * i + k;
            const uint8_t *q = x[i].qs + 4 * k;
            int sumi = 0;
            for (int h = 0; h < 2; h++) {
                const int8x16_t qy = vld1q_s8(yb->qs + 16 * h);
                sumi += vaddlvq_s8(vbslq_s8(bit_mask16(q[2 * h], q[2 * h + 1]), qy, vnegq_s8(qy)));
            }
            sum += sumi * dx * oxl_fp16_to_fp32(yb->d);
        }
    }
    *s = sum;
}

/* ---- NVFP4: per 16-value sub-block s, sum += sumi * d_s * d_y (d_y: Q8_0 block 2i + s / 2) -------- */

/* Sub-block s holds its values 0..7 in the low nibbles of qs[8 s .. 8 s + 8), 8..15 in the high ones: one
 * 16-byte load gives two sub-blocks, their codes mapped to E2M1 integers (kvalues_mxfp4) by one table
 * lookup each. */
static void vec_dot_nvfp4_q8_0_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_nvfp4 *x = (const block_nvfp4 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int8x16_t kv = vld1q_s8(kvalues_mxfp4);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_NVFP4; i++) {
        for (int h = 0; h < 2; h++) {   /* sub-blocks 2h, 2h + 1: Q8_0 block 2i + h */
            const block_q8_0 *yb = y + 2 * i + h;
            const uint8x16_t q = vld1q_u8(x[i].qs + 16 * h);
            const uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
            const int8x16_t w0 = vqtbl1q_s8(kv, vcombine_u8(vget_low_u8(lo), vget_low_u8(hi)));
            const int8x16_t w1 = vqtbl1q_s8(kv, vcombine_u8(vget_high_u8(lo), vget_high_u8(hi)));
            const int sumi0 = dot16(w0, vld1q_s8(yb->qs)), sumi1 = dot16(w1, vld1q_s8(yb->qs + 16));
            const float dy = oxl_fp16_to_fp32(yb->d);
            sum += sumi0 * oxl_ue4m3_to_fp32_half(x[i].d[2 * h]) * dy;
            sum += sumi1 * oxl_ue4m3_to_fp32_half(x[i].d[2 * h + 1]) * dy;
        }
    }
    *s = sum;
}

/* ---- TQ2_0, TQ1_0: one integer per super-block, sum += (float)sumi * (d_x * d_y) ---------------- */

static void vec_dot_tq2_0_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_tq2_0 *x = (const block_tq2_0 *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int c = 0; c < 2; c++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(x[i].qs + 32 * c + 16 * h);
                for (int l = 0; l < 4; l++) {
                    const uint8x16_t t = vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * l))), vdupq_n_u8(3));
                    const int8x16_t w = vsubq_s8(vreinterpretq_s8_u8(t), vdupq_n_s8(1));
                    sumi += dot16(w, vld1q_s8(y[i].qs + 128 * c + 32 * l + 16 * h));
                }
            }
        sum += (float)sumi * (oxl_fp16_to_fp32(x[i].d) * y[i].d);
    }
    *s = sum;
}

/* trit n (most significant first) of each byte b: ((uint8_t)(b * 3^n) * 3) >> 8, minus 1 */
static inline int8x16_t tq1_w(uint8x16_t q) {
    const uint16x8_t lo = vmull_u8(vget_low_u8(q), vdup_n_u8(3)), hi = vmull_high_u8(q, vdupq_n_u8(3));
    return vsubq_s8(vreinterpretq_s8_u8(vcombine_u8(vshrn_n_u16(lo, 8), vshrn_n_u16(hi, 8))), vdupq_n_s8(1));
}

static void vec_dot_tq1_0_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const block_tq1_0 *x = (const block_tq1_0 *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const int8_t *qy = y[i].qs;
        int sumi = 0;
        for (int p = 0; p < 5; p++) {
            for (int h = 0; h < 2; h++)   /* values 32 p + 16 h + m from qs[16 h + m] */
                sumi += dot16(tq1_w(vmulq_u8(vld1q_u8(x[i].qs + 16 * h), vdupq_n_u8(pow3[p]))), vld1q_s8(qy + 32 * p + 16 * h));
            /* values 160 + 16 p + m from qs[32 + m] */
            sumi += dot16(tq1_w(vmulq_u8(vld1q_u8(x[i].qs + 32), vdupq_n_u8(pow3[p]))), vld1q_s8(qy + 160 + 16 * p));
        }
        /* values 240 + 4 p + m from qh[m], 4 trits: the 4 bytes repeated, lane 4 p + m taking trit p */
        uint8_t h4[16];
        for (int p = 0; p < 4; p++)
            for (int m = 0; m < 4; m++) h4[4 * p + m] = (uint8_t)(x[i].qh[m] * pow3[p]);
        sumi += dot16(tq1_w(vld1q_u8(h4)), vld1q_s8(qy + 240));
        sum += (float)sumi * (oxl_fp16_to_fp32(x[i].d) * y[i].d);
    }
    *s = sum;
}

/* ---- i-quants: run ib as two int8x16 halves (csrc/iq_decode.h's integers) -------------------------- */

static inline int8x16_t grid16(uint64_t a, uint64_t b) { return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(a), vcreate_u64(b))); }
static inline int8x16_t signed16(int8x16_t g, uint8_t s0, uint8_t s1) { return vbslq_s8(bit_mask16(s0, s1), vnegq_s8(g), g); }
static inline uint64_t g4x2(uint32_t a, uint32_t b) { return (uint64_t)a | (uint64_t)b << 32; }
static inline int8x16_t iq1_w(int8x16_t g, int neg0, int neg1) {
    return vaddq_s8(vshlq_n_s8(g, 3), vcombine_s8(vdup_n_s8(neg0 ? -1 : 1), vdup_n_s8(neg1 ? -1 : 1)));
}

OXL_INLINE void iq_decode32_neon(int type, const void *blk, int ib, int8x16_t w[2], int ls[2]) {
    switch (type) {
    case OXL_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * ib, 8);
        const uint8_t *i8 = (const uint8_t *)&aux[0];
        for (int h = 0; h < 2; h++)
            w[h] = signed16(grid16(iq2xxs_grid[i8[2 * h]], iq2xxs_grid[i8[2 * h + 1]]),
                            ksigns_iq2xs[(aux[1] >> 14 * h) & 127], ksigns_iq2xs[(aux[1] >> (14 * h + 7)) & 127]);
        ls[0] = ls[1] = 2 * (int)(aux[1] >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        const uint16_t *q = b->qs + 4 * ib;
        for (int h = 0; h < 2; h++)
            w[h] = signed16(grid16(iq2xs_grid[q[2 * h] & 511], iq2xs_grid[q[2 * h + 1] & 511]),
                            ksigns_iq2xs[q[2 * h] >> 9], ksigns_iq2xs[q[2 * h + 1] >> 9]);
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        const uint8_t *qs = b->qs + 4 * ib, *sg = b->qs + QK_K / 8 + 4 * ib;
        const int qh = b->qh[ib];
        for (int h = 0; h < 2; h++)
            w[h] = signed16(grid16(iq2s_grid[qs[2 * h] | ((qh << (8 - 4 * h)) & 0x300)],
                                   iq2s_grid[qs[2 * h + 1] | ((qh << (6 - 4 * h)) & 0x300)]), sg[2 * h], sg[2 * h + 1]);
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *q = b->qs + 8 * ib;
        uint32_t aux;
        memcpy(&aux, b->qs + QK_K / 4 + 4 * ib, 4);
        for (int h = 0; h < 2; h++)
            w[h] = signed16(grid16(g4x2(iq3xxs_grid[q[4 * h]], iq3xxs_grid[q[4 * h + 1]]),
                                   g4x2(iq3xxs_grid[q[4 * h + 2]], iq3xxs_grid[q[4 * h + 3]])),
                            ksigns_iq2xs[(aux >> 14 * h) & 127], ksigns_iq2xs[(aux >> (14 * h + 7)) & 127]);
        ls[0] = ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const uint8_t *q = b->qs + 8 * ib, *sg = b->signs + 4 * ib;
        const int qh = b->qh[ib];
        uint32_t g[8];
        for (int k = 0; k < 8; k++) g[k] = iq3s_grid[q[k] | ((qh << (8 - k)) & 256)];
        for (int h = 0; h < 2; h++)
            w[h] = signed16(grid16(g4x2(g[4 * h], g[4 * h + 1]), g4x2(g[4 * h + 2], g[4 * h + 3])), sg[2 * h], sg[2 * h + 1]);
        ls[0] = ls[1] = 1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 0xF);
        break;
    }
    case OXL_TYPE_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        const int qh = b->qh[ib], neg = qh & 0x8000;
        for (int h = 0; h < 2; h++)
            w[h] = iq1_w(grid16(iq1s_grid[q[2 * h] | (((qh >> 6 * h) & 7) << 8)],
                                iq1s_grid[q[2 * h + 1] | (((qh >> (6 * h + 3)) & 7) << 8)]), neg, neg);
        ls[0] = ls[1] = 2 * ((qh >> 12) & 7) + 1;
        break;
    }
    default: { /* OXL_TYPE_IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        uint16_t sc[4];
        memcpy(sc, b->scales, 8);
        for (int h = 0; h < 2; h++) {
            const int qh = b->qh[2 * ib + h];
            w[h] = iq1_w(grid16(iq1s_grid[q[2 * h] | ((qh & 7) << 8)], iq1s_grid[q[2 * h + 1] | (((qh >> 4) & 7) << 8)]),
                         qh & 8, qh & 0x80);
        }
        ls[0] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
        ls[1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
        break;
    }
    }
}

OXL_INLINE void iq_vec_dot_neon(int type, int n, float *s, const void *vx, const void *vy) {
    const char *x = (const char *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const size_t bx = iq_block_bytes(type);
    float sum = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const void *blk = x + i * bx;
        int bsum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int8x16_t w[2];
            int ls[2];
            iq_decode32_neon(type, blk, ib, w, ls);
            bsum += ls[0] * dot16(w[0], vld1q_s8(y[i].qs + 32 * ib)) + ls[1] * dot16(w[1], vld1q_s8(y[i].qs + 32 * ib + 16));
        }
        sum += (float)bsum * (oxl_fp16_to_fp32(iq_block_d(type, blk)) * y[i].d);
    }
    *s = iq_factor(type) * sum;
}

#define IQ_NEON(t, T) \
    static void vec_dot_##t##_q8_K_neon(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, \
                                        const void *OXL_RESTRICT y) { \
        iq_vec_dot_neon(T, n, s, x, y); \
    }

IQ_NEON(iq2_xxs, OXL_TYPE_IQ2_XXS)
IQ_NEON(iq2_xs, OXL_TYPE_IQ2_XS)
IQ_NEON(iq2_s, OXL_TYPE_IQ2_S)
IQ_NEON(iq3_xxs, OXL_TYPE_IQ3_XXS)
IQ_NEON(iq3_s, OXL_TYPE_IQ3_S)
IQ_NEON(iq1_s, OXL_TYPE_IQ1_S)
IQ_NEON(iq1_m, OXL_TYPE_IQ1_M)

void oxl_register_neon_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_neon;
    t->type[OXL_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_neon;
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_neon;
    t->type[OXL_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_neon;
    t->type[OXL_TYPE_IQ2_XXS].vec_dot = vec_dot_iq2_xxs_q8_K_neon;
    t->type[OXL_TYPE_IQ2_XS].vec_dot = vec_dot_iq2_xs_q8_K_neon;
    t->type[OXL_TYPE_IQ2_S].vec_dot = vec_dot_iq2_s_q8_K_neon;
    t->type[OXL_TYPE_IQ3_XXS].vec_dot = vec_dot_iq3_xxs_q8_K_neon;
    t->type[OXL_TYPE_IQ3_S].vec_dot = vec_dot_iq3_s_q8_K_neon;
    t->type[OXL_TYPE_IQ1_S].vec_dot = vec_dot_iq1_s_q8_K_neon;
    t->type[OXL_TYPE_IQ1_M].vec_dot = vec_dot_iq1_m_q8_K_neon;
}
