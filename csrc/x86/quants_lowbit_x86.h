/* x86 helpers for the 1-bit and ternary types (Q1_0, TQ1_0, TQ2_0), shared by the AVX2 and AVX-512
 * tiers; static inline, so each tier compiles them with its own flags. Needs AVX2.
 *
 * Orders (every tier and the multi-row kernels sum each output so; tests/quant/test_invariance.py):
 * - Q1_0: each Q8_0 activation block k of the row (4 per weight block) gives 8 int32 lanes p_k (exact) and
 *   c_k = d_x * d_y,k; even = fma(c_k, p_k, even) for even k, odd = fma(c_k, p_k, odd) for odd k;
 *   result = hsum_f32_8(even + odd). (The AVX-512 tier holds even in the low and odd in the high half of
 *   one register: the same floats. The AVX-512 VNNI tier sums Q1_0 in its own order, one fma per activation
 *   block and output: csrc/x86/avx512vnni/quants_lowbit_vnni.c.)
 * - TQ1_0, TQ2_0: one exact integer sum per super-block, sum += (float)sumi * (d_x * d_y), as the scalar
 *   tier does: every tier gives the scalar float. */
#ifndef OXL_X86_QUANTS_LOWBIT_X86_H
#define OXL_X86_QUANTS_LOWBIT_X86_H

#include <immintrin.h>

#include "../blocks.h"
#include "../kernels.h"
#include "avx2_util.h"

static inline int lb_hsum_i32_8(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* 32 sign bits -> 32 bytes: -1 where the bit is set, +1 where clear (the negated Q1_0 values; the order
 * above multiplies them with -c, which gives the same floats as c times the true sums) */
static inline __m256i q1_0_neg_signs(const uint8_t *qs) {
    uint32_t x;
    memcpy(&x, qs, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_or_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(1));
}

/* sum over 4-lane groups of s * y (s = +-1; |y| <= 127) as 8 int32 lanes */
static inline __m256i q1_0_dot(__m256i s, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(y, s)), _mm256_set1_epi16(1));
}

/* TQ2_0 block: the 8 runs of 32 trit values (0, 1, 2), value 128 c + 32 l + m in run 4 c + l */
static inline void tq2_0_decode(const block_tq2_0 *b, __m256i t[8]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int c = 0; c < 2; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        t[4 * c + 0] = _mm256_and_si256(q, m3);
        t[4 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
        t[4 * c + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
        t[4 * c + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
    }
}

/* ((uint8_t)q * 3) >> 8 for every byte: 0 below 86, 1 below 171, else 2 */
static inline __m256i tq1_trit(__m256i q) {
    const __m256i sq = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
    const __m256i ge86 = _mm256_cmpgt_epi8(sq, _mm256_set1_epi8((char)(85 ^ 0x80)));
    const __m256i ge171 = _mm256_cmpgt_epi8(sq, _mm256_set1_epi8((char)(170 ^ 0x80)));
    return _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(ge86, ge171));
}

/* q * 3 mod 256 for every byte */
static inline __m256i times3(__m256i q) { return _mm256_add_epi8(q, _mm256_add_epi8(q, q)); }

/* TQ1_0 block: its 256 trits as 8 runs of 32 in value order. Values 0..159: 5 runs from qs[0..32);
 * 160..239: 5 runs of 16 from qs[32..48); 240..255: 4 runs of 4 from qh (assembled into the last run). All in
 * registers: a run assembled through a byte array read back as a vector stalls on the store-forward. */
static inline void tq1_0_decode(const block_tq1_0 *b, __m256i t[8]) {
    __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
    for (int n = 0; n < 5; n++, q = times3(q)) t[n] = tq1_trit(q);
    /* qs[32..48) in both halves; the upper half one power of 3 ahead: runs (5, 6), (7, 8), (9, -) of 16 */
    const __m128i lo = _mm_loadu_si128((const __m128i *)(b->qs + 32));
    __m256i q2 = _mm256_set_m128i(_mm_add_epi8(lo, _mm_add_epi8(lo, lo)), lo);
    t[5] = tq1_trit(q2);
    q2 = times3(times3(q2));
    t[6] = tq1_trit(q2);
    q2 = times3(times3(q2));
    const __m256i r9 = tq1_trit(q2);   /* low half: the 5th run of 16 (values 224..239) */
    /* values 240..255: qh[m] trit n at 240 + 4 n + m, so dword n of the broadcast qh times 3^n */
    uint32_t h;
    memcpy(&h, b->qh, 4);
    const __m128i h0 = _mm_set1_epi32((int)h), h1 = _mm_add_epi8(h0, _mm_add_epi8(h0, h0));
    const __m128i h2 = _mm_add_epi8(h1, _mm_add_epi8(h1, h1)), h3 = _mm_add_epi8(h2, _mm_add_epi8(h2, h2));
    const __m128i hq = _mm_blend_epi32(_mm_blend_epi32(h0, h1, 0x2), _mm_blend_epi32(h2, h3, 0x8), 0xC);
    t[7] = _mm256_inserti128_si256(r9, _mm256_castsi256_si128(tq1_trit(_mm256_castsi128_si256(hq))), 1);
}

/* sum over the super-block of t * y with t the trits (0..2): sum(t y) - sum(y). The pair sums of a run are
 * at most 2 * 2 * 128 = 512, so 8 runs and the 16 bsums (|.| <= 2048) fit int16 lanes. */
static inline int tq_block_dot(const __m256i t[8], const block_q8_K *y) {
    __m256i acc = _mm256_setzero_si256();
    for (int r = 0; r < 8; r++)
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(t[r], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * r))));
    acc = _mm256_sub_epi16(acc, _mm256_loadu_si256((const __m256i *)y->bsums));
    return lb_hsum_i32_8(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
}

#endif
