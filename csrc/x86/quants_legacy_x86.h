/* x86 helpers shared by the AVX2 and AVX-512 tiers for the 32-value block types: decode one weight
 * block to 32 int8 lanes in activation order (lanes 0..15 = low nibbles / first half, 16..31 = high
 * nibbles / second half) plus its scale, and read one Q8_0/Q8_1 activation block. Static inline:
 * each tier's objects compile them with their own flags. Needs AVX2 + F16C. */
#ifndef OXL_X86_QUANTS_LEGACY_X86_H
#define OXL_X86_QUANTS_LEGACY_X86_H

#include <immintrin.h>
#include <math.h>

#include "../blocks.h"
#include "avx2_util.h"
#include "../kernels.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static inline int hsum_i32_8(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

static inline float fp16(oxl_half h) { return _cvtsh_ss(h); }

/* 16 bytes of nibbles -> 32 bytes: low nibbles in lanes 0..15, high nibbles in 16..31. The bytes are
 * loaded into both halves at once and only the upper half shifted (Q4_0/Q5_0 gemv 7-10% faster on Zen 3
 * than a shift and an insert) */
static inline __m256i nibbles_32(const uint8_t *qs) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set */
static inline __m256i bits_32(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* sum over pairs of unsigned x * signed y, as 8 int32 lanes */
static inline __m256i dot_u8_i8(__m256i ux, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ux, y), _mm256_set1_epi16(1));
}

/* signed x * signed y (|x| <= 128, |y| <= 127), as 8 float lanes */
static inline __m256 dot_i8_f(__m256i x, __m256i y) {
    return _mm256_cvtepi32_ps(dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
}

static inline __m256 dot_u8_f(__m256i ux, __m256i y) { return _mm256_cvtepi32_ps(dot_u8_i8(ux, y)); }

/* ---- weight block decoders: int8 lanes + scale (+ min for the _1 types) -------------------- */

enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0, K_Q8_1, K_IQ4_NL, K_MXFP4 };

static inline __m256i decode(int kind, const void *blk, float *d, float *m) {
    switch (kind) {
    case K_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        *d = fp16(b->d);
        return _mm256_sub_epi8(nibbles_32(b->qs), _mm256_set1_epi8(8));
    }
    case K_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        *d = fp16(b->d);
        *m = fp16(b->m);
        return nibbles_32(b->qs);
    }
    case K_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        *d = fp16(b->d);
        /* nibble | 0xF0 where the 5th bit is clear == (nibble | bit << 4) - 16 as int8 */
        const __m256i hi = _mm256_andnot_si256(bits_32(b->qh), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(nibbles_32(b->qs), hi);
    }
    case K_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        *d = fp16(b->d);
        *m = fp16(b->m);
        const __m256i hi = _mm256_and_si256(bits_32(b->qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(nibbles_32(b->qs), hi);
    }
    case K_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)blk;
        *d = fp16(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    case K_Q8_1: {
        const block_q8_1 *b = (const block_q8_1 *)blk;
        *d = fp16(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    case K_MXFP4: {
        const block_mxfp4 *b = (const block_mxfp4 *)blk;
        *d = oxl_e8m0_to_fp32_half(b->e);
        const __m128i v = _mm_loadu_si128((const __m128i *)kvalues_mxfp4);
        return _mm256_shuffle_epi8(_mm256_set_m128i(v, v), nibbles_32(b->qs));
    }
    default: { /* K_IQ4_NL */
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        *d = fp16(b->d);
        const __m128i v = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);
        return _mm256_shuffle_epi8(_mm256_set_m128i(v, v), nibbles_32(b->qs));
    }
    }
}

static inline int kind_unsigned(int kind) { return kind == K_Q4_1 || kind == K_Q5_1; }
static inline int kind_act_q8_1(int kind) { return kind == K_Q4_1 || kind == K_Q5_1 || kind == K_Q8_1; }
static inline size_t kind_block_bytes(int kind) {
    static const size_t sz[] = {sizeof(block_q4_0), sizeof(block_q4_1), sizeof(block_q5_0), sizeof(block_q5_1),
                                sizeof(block_q8_0), sizeof(block_q8_1), sizeof(block_iq4_nl), sizeof(block_mxfp4)};
    return sz[kind];
}

/* The multi-row kernels (AVX2's and the VNNI tier's) take Q4_0 and Q5_0 as unsigned q + off (off = 8, 16):
 * sum((q + off) y) - off sum(y), with off sum(y) (per int32 lane) computed once per activation block
 * when it is packed; the same integers as the sign trick's, without the sign ops on every dot. */
static inline int tile_off(int kind) { return kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0; }

/* one weight block in the form the multi-row kernels take: q + off for Q4_0/Q5_0, else decode()'s */
OXL_INLINE __m256i tile_decode(int kind, const char *blk, float *d, float *m) {
    if (kind == K_Q4_0) {
        *d = fp16(((const block_q4_0 *)blk)->d);
        return nibbles_32(((const block_q4_0 *)blk)->qs);
    }
    if (kind == K_Q5_0) {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        *d = fp16(b->d);
        return _mm256_or_si256(nibbles_32(b->qs), _mm256_and_si256(bits_32(b->qh), _mm256_set1_epi8(0x10)));
    }
    return decode(kind, blk, d, m);
}

/* activation block: int8 lanes, d, and (Q8_1) s = d * sum(q) */
static inline __m256i act_block(int kind, const char *y, int i, float *d, float *s) {
    if (kind_act_q8_1(kind)) {
        const block_q8_1 *b = (const block_q8_1 *)y + i;
        *d = fp16(b->d);
        *s = fp16(b->s);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    const block_q8_0 *b = (const block_q8_0 *)y + i;
    *d = fp16(b->d);
    *s = 0.0f;
    return _mm256_loadu_si256((const __m256i *)b->qs);
}

#endif
