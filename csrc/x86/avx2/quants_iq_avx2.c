/* AVX2 kernels for the 1- to 3-bit i-quants against Q8_K: each 32-value run of a block decoded to 32
 * signed int8 weights (csrc/x86/quants_iq_x86.h's run decoder; the signs applied by a byte mask) and its two
 * integer scales, exactly csrc/iq_decode.h's integers; a super-block's dot is one exact integer, so vec_dot
 * gives the scalar tier's float and the multi-row kernel (the shared driver: each block decoded once for up
 * to IQ_GROUP activation rows) gives vec_dot's. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "../quants_iq_x86.h"

static inline int iq_hsum_i32_8(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set */
static inline __m256i mask_32(uint32_t x) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* g negated where the sign bit is set */
static inline __m256i apply_signs(__m256i g, uint32_t signs) {
    const __m256i m = mask_32(signs);
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

/* run ib of a block: 32 signed weights; *lsv = the two scales as int16 lanes (low 128 bits: values 0..15) */
OXL_INLINE __m256i iq_decode32_avx2(int type, const void *blk, int ib, __m256i *lsv) {
    uint32_t signs = 0;
    int ls[2];
    const __m256i g = iq_run_x86(type, blk, ib, &signs, ls);
    *lsv = _mm256_set_m128i(_mm_set1_epi16((short)ls[1]), _mm_set1_epi16((short)ls[0]));
    return iq_is_iq1(type) ? g : apply_signs(g, signs);
}

/* sum_j ls * w_j y_j over a run (|w| <= 62, |y| <= 127: pairs fit int16) as 8 int32 lanes */
static inline __m256i iq_run_dot(__m256i w, __m256i lsv, const int8_t *y) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(qy, w)), lsv);
}

OXL_INLINE void iq_rows(int type, const int C, const char *x, int nb, const char *y, size_t y_row, float *out,
                        int64_t lds) {
    const size_t bx = iq_block_bytes(type);
    float sum[IQ_GROUP] = {0};
    for (int i = 0; i < nb; i++) {
        const void *blk = x + i * bx;
        __m256i w[8], lsv[8], acc[IQ_GROUP];
        for (int ib = 0; ib < 8; ib++) w[ib] = iq_decode32_avx2(type, blk, ib, &lsv[ib]);
        for (int j = 0; j < C; j++) {
            const block_q8_K *yb = (const block_q8_K *)(y + j * y_row) + i;
            acc[j] = _mm256_setzero_si256();
            for (int ib = 0; ib < 8; ib++) acc[j] = _mm256_add_epi32(acc[j], iq_run_dot(w[ib], lsv[ib], yb->qs + 32 * ib));
        }
        const float dx = _cvtsh_ss(iq_block_d(type, blk));
        for (int j = 0; j < C; j++) {
            const block_q8_K *yb = (const block_q8_K *)(y + j * y_row) + i;
            sum[j] += (float)iq_hsum_i32_8(acc[j]) * (dx * yb->d);
        }
    }
    for (int j = 0; j < C; j++) out[j * lds] = iq_factor(type) * sum[j];
}

#define IQ_TIER avx2
#define IQ_ROWS iq_rows
#include "../quants_iq_x86.h"
