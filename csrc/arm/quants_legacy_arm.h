/* ARM helpers shared by the NEON and dotprod tiers for the 32-value block types: decode one weight
 * block into two int8x16 halves in activation order (half 0 = values 0..15 = low nibbles, half 1 =
 * values 16..31 = high nibbles) plus its scale (and min), and read one Q8_0/Q8_1 activation block.
 * Static inline: each tier's objects compile them with their own flags. */
#ifndef OXL_ARM_QUANTS_LEGACY_ARM_H
#define OXL_ARM_QUANTS_LEGACY_ARM_H

/* the float steps must be the scalar tier's exactly (no fused multiply-add), see OXL_ARM_VEC_DOT_BODY */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <arm_neon.h>

#include "../blocks.h"
#include "../kernels.h"

enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0, K_Q8_1, K_IQ4_NL, K_MXFP4 };

static inline int kind_unsigned(int kind) { return kind == K_Q4_1 || kind == K_Q5_1; }
static inline int kind_act_q8_1(int kind) { return kind == K_Q4_1 || kind == K_Q5_1 || kind == K_Q8_1; }
static inline size_t kind_block_bytes(int kind) {
    static const size_t sz[] = {sizeof(block_q4_0), sizeof(block_q4_1), sizeof(block_q5_0), sizeof(block_q5_1),
                                sizeof(block_q8_0), sizeof(block_q8_1), sizeof(block_iq4_nl), sizeof(block_mxfp4)};
    return sz[kind];
}

/* 16 bits of qh (bytes b0, b1) -> 16 lanes of 0x10 where the bit is set */
static inline uint8x16_t fifth_bits(const uint8_t *qh) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t rep = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    return vandq_u8(vtstq_u8(rep, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

static inline void decode(int kind, const void *blk, int8x16_t q[2], float *d, float *m) {
    switch (kind) {
    case K_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        const uint8x16_t v = vld1q_u8(b->qs);
        *d = oxl_fp16_to_fp32(b->d);
        q[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        q[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
        break;
    }
    case K_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        const uint8x16_t v = vld1q_u8(b->qs);
        *d = oxl_fp16_to_fp32(b->d);
        *m = oxl_fp16_to_fp32(b->m);
        q[0] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
        q[1] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        break;
    }
    case K_Q5_0:
    case K_Q5_1: {
        const int one = kind == K_Q5_1;
        const uint8_t *qs = one ? ((const block_q5_1 *)blk)->qs : ((const block_q5_0 *)blk)->qs;
        const uint8_t *qh = one ? ((const block_q5_1 *)blk)->qh : ((const block_q5_0 *)blk)->qh;
        *d = oxl_fp16_to_fp32(one ? ((const block_q5_1 *)blk)->d : ((const block_q5_0 *)blk)->d);
        if (one) *m = oxl_fp16_to_fp32(((const block_q5_1 *)blk)->m);
        const uint8x16_t v = vld1q_u8(qs);
        const uint8x16_t lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), fifth_bits(qh));
        const uint8x16_t hi = vorrq_u8(vshrq_n_u8(v, 4), fifth_bits(qh + 2));
        const int8x16_t off = vdupq_n_s8(one ? 0 : 16);
        q[0] = vsubq_s8(vreinterpretq_s8_u8(lo), off);
        q[1] = vsubq_s8(vreinterpretq_s8_u8(hi), off);
        break;
    }
    case K_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)blk;
        *d = oxl_fp16_to_fp32(b->d);
        q[0] = vld1q_s8(b->qs);
        q[1] = vld1q_s8(b->qs + 16);
        break;
    }
    case K_Q8_1: {
        const block_q8_1 *b = (const block_q8_1 *)blk;
        *d = oxl_fp16_to_fp32(b->d);
        q[0] = vld1q_s8(b->qs);
        q[1] = vld1q_s8(b->qs + 16);
        break;
    }
    case K_MXFP4: {
        const block_mxfp4 *b = (const block_mxfp4 *)blk;
        const uint8x16_t v = vld1q_u8(b->qs);
        const int8x16_t values = vld1q_s8(kvalues_mxfp4);
        *d = oxl_e8m0_to_fp32_half(b->e);
        q[0] = vqtbl1q_s8(values, vandq_u8(v, vdupq_n_u8(0x0F)));
        q[1] = vqtbl1q_s8(values, vshrq_n_u8(v, 4));
        break;
    }
    default: { /* K_IQ4_NL */
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        const uint8x16_t v = vld1q_u8(b->qs);
        const int8x16_t values = vld1q_s8(kvalues_iq4nl);
        *d = oxl_fp16_to_fp32(b->d);
        q[0] = vqtbl1q_s8(values, vandq_u8(v, vdupq_n_u8(0x0F)));
        q[1] = vqtbl1q_s8(values, vshrq_n_u8(v, 4));
        break;
    }
    }
}

static inline void act_block(int kind, const char *y, int i, int8x16_t q[2], float *d, float *s) {
    const int8_t *qs;
    if (kind_act_q8_1(kind)) {
        const block_q8_1 *b = (const block_q8_1 *)y + i;
        *d = oxl_fp16_to_fp32(b->d);
        *s = oxl_fp16_to_fp32(b->s);
        qs = b->qs;
    } else {
        const block_q8_0 *b = (const block_q8_0 *)y + i;
        *d = oxl_fp16_to_fp32(b->d);
        *s = 0.0f;
        qs = b->qs;
    }
    q[0] = vld1q_s8(qs);
    q[1] = vld1q_s8(qs + 16);
}

/* vec_dot over whole blocks with an integer block dot `dot32(x, y)`; the float steps are the scalar
 * tier's, in the same order, so the result equals the scalar one bit for bit. */
#define OXL_ARM_VEC_DOT_BODY(kind, n, s, vx, vy, dot32) do { \
        const char *x_ = (const char *)(vx), *y_ = (const char *)(vy); \
        const size_t bx_ = kind_block_bytes(kind); \
        float sum_ = 0.0f; \
        for (int i_ = 0; i_ < (n) / 32; i_++) { \
            int8x16_t qx_[2], qy_[2]; \
            float dx_, mx_ = 0.0f, dy_, sy_; \
            decode(kind, x_ + i_ * bx_, qx_, &dx_, &mx_); \
            act_block(kind, y_, i_, qy_, &dy_, &sy_); \
            const int sumi_ = dot32(qx_, qy_); \
            if (kind_unsigned(kind)) sum_ += dx_ * dy_ * sumi_ + mx_ * sy_; \
            else sum_ += sumi_ * dx_ * dy_; \
        } \
        *(s) = sum_; \
    } while (0)

#endif
