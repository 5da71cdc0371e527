/* AVX-512 kernels for the 1- to 3-bit i-quants against Q8_K (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M): vec_dot and the multi-row kernel.
 *
 * The integers are csrc/iq_decode.h's: a 32-value run is 32 weights with two integer scales. Here a run is
 * held as its magnitudes (the grid bytes, unsigned; for IQ1 |8 grid +- 1|) and 32 sign bits, and the signs
 * go onto the activations with one masked vpsubb (AVX2 needs a byte shuffle, a compare and two vpsignb per
 * run). Two runs fill a 512-bit register: vpmaddubsw (magnitude x signed activation, pairs; |w| <= 62, so no
 * int16 saturation), vpmaddwd by the runs' scales (16 int16 lanes per half-run), int32 sums. A super-block's
 * dot is one exact integer, so every output is the scalar tier's float:
 *     sum += (float)bsum * (d_x * d_y);  result = IQ_FACTOR * sum
 * and the multi-row kernel (csrc/x86/quants_iq_x86.h's driver: each block decoded once for up to IQ_GROUP
 * activation rows) gives vec_dot's. Blocks are decoded whole here (the AVX2 tier decodes run by run with
 * that header's run decoder); nothing a block needs goes through memory but its own bytes and the grids. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "iq_block_avx512.h"

OXL_INLINE void iq_rows_avx512(int type, const int C, const char *x, int nb, const char *y, size_t y_row, float *out,
                               int64_t lds) {
    const size_t bx = iq_block_bytes(type);
    const __m512i sel0 = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                            15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    float sum[IQ_GROUP] = {0};
    for (int i = 0; i < nb; i++) {
        const void *blk = x + i * bx;
        __m512i mag[4], lsv[4];
        __mmask64 neg[4];
        __m256i ls16;
        iq_block_avx512(type, blk, mag, neg, &ls16);
        /* int16 lane l of register p (values 2l, 2l + 1 of its 64) takes scale 4 p + l / 8 */
        const __m512i ls_all = _mm512_castsi256_si512(ls16);
        for (int p = 0; p < 4; p++) lsv[p] = _mm512_permutexvar_epi16(_mm512_add_epi16(sel0, _mm512_set1_epi16((short)(4 * p))), ls_all);
        const float dx = _cvtsh_ss(iq_block_d(type, blk));
        for (int j = 0; j < C; j++) {
            const block_q8_K *yb = (const block_q8_K *)(y + j * y_row) + i;
            __m512i acc = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) {
                const __m512i q = _mm512_loadu_si512((const void *)(yb->qs + 64 * p));
                const __m512i sq = _mm512_mask_sub_epi8(q, neg[p], _mm512_setzero_si512(), q);
                acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(mag[p], sq), lsv[p]));
            }
            sum[j] += (float)_mm512_reduce_add_epi32(acc) * (dx * yb->d);
        }
    }
    for (int j = 0; j < C; j++) out[j * lds] = iq_factor(type) * sum[j];
}

#define IQ_TIER avx512
#define IQ_ROWS iq_rows_avx512
#include "../quants_iq_x86.h"
