/* The AVX-512 decoder of one super-block of the 1- to 3-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 * IQ1_S, IQ1_M): csrc/iq_decode.h's integers as 4 registers of two 32-value runs each, magnitudes (unsigned)
 * and sign masks, with the 16 half-run scales. Used by the AVX-512 tier's kernels (quants_iq_avx512.c) and the
 * VNNI tier's sixteen-row panels (../avx512vnni/quants_iqx16_vnni.c); static inline, so each tier compiles
 * it with its own flags. */
#ifndef OXL_X86_AVX512_IQ_BLOCK_AVX512_H
#define OXL_X86_AVX512_IQ_BLOCK_AVX512_H

#include "../quants_iq_x86.h"

/* 32 seven-bit sign fields (bytes, one per 8 weights, in order) completed to ggml's even-parity sign bytes
 * (bit 7 = the parity of the other 7: ksigns_iq2xs), as 4 masks of 64 weights */
static inline void signs_from7(__m256i v7, __mmask64 neg[4]) {
    const __m256i ptab = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
                                          0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i m15 = _mm256_set1_epi8(15);
    const __m256i par = _mm256_xor_si256(_mm256_shuffle_epi8(ptab, _mm256_and_si256(v7, m15)),
                                         _mm256_shuffle_epi8(ptab, _mm256_and_si256(_mm256_srli_epi16(v7, 4), m15)));
    const __m256i v = _mm256_or_si256(v7, par);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    neg[0] = (__mmask64)_mm_cvtsi128_si64(lo);
    neg[1] = (__mmask64)_mm_extract_epi64(lo, 1);
    neg[2] = (__mmask64)_mm_cvtsi128_si64(hi);
    neg[3] = (__mmask64)_mm_extract_epi64(hi, 1);
}

/* fields7 of 8 dwords at once */
static inline __m256i fields7_x8(__m256i a) {
    const __m256i m7 = _mm256_set1_epi32(127);
    const __m256i f0 = _mm256_and_si256(a, m7);
    const __m256i f1 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a, 7), m7), 8);
    const __m256i f2 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a, 14), m7), 16);
    const __m256i f3 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a, 21), m7), 24);
    return _mm256_or_si256(_mm256_or_si256(f0, f1), _mm256_or_si256(f2, f3));
}

/* 2 (a >> 28) + 1 of 8 dwords (one scale per run) as the 16 half-run int16 lanes */
static inline __m256i run_scales(__m256i a) {
    const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(a, 28), 1), _mm256_set1_epi32(1));
    return _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
}

static inline void neg_from_bytes(const uint8_t *signs, __mmask64 neg[4]) {
    uint64_t u[4];
    memcpy(u, signs, 32);
    for (int p = 0; p < 4; p++) neg[p] = (__mmask64)u[p];
}

/* 2 s + 1 for the 16 nibbles s of 8 bytes (low nibble first): IQ2_XS and IQ2_S's half-run scales */
static inline __m256i nibble_scales(const uint8_t *scales) {
    uint64_t u;
    memcpy(&u, scales, 8);
    const __m128i sc = _mm_cvtsi64_si128((long long)u), m15 = _mm_set1_epi8(15);
    const __m128i s = _mm_unpacklo_epi8(_mm_and_si128(sc, m15), _mm_and_si128(_mm_srli_epi16(sc, 4), m15));
    return _mm256_cvtepu8_epi16(_mm_add_epi8(_mm_add_epi8(s, s), _mm_set1_epi8(1)));
}

/* IQ1: 64 weights 8 g + delta (g the grid bytes -1/0/1; delta -1 in the qwords set in dneg, else +1) as
 * magnitudes and sign mask */
static inline void iq1_split(__m512i g, __mmask8 dneg, __m512i *mag, __mmask64 *neg) {
    const __m512i d = _mm512_or_si512(_mm512_movm_epi64(dneg), _mm512_set1_epi8(1));
    const __m512i g2 = _mm512_add_epi8(g, g), g4 = _mm512_add_epi8(g2, g2);
    const __m512i w = _mm512_add_epi8(_mm512_add_epi8(g4, g4), d);
    *neg = _mm512_movepi8_mask(w);
    *mag = _mm512_abs_epi8(w);
}

/* a super-block as 4 registers of two runs each: magnitudes, sign masks, and the 16 half-run scales (int16,
 * half-run h of run ib at lane 2 ib + h) */
OXL_INLINE void iq_block_avx512(int type, const void *blk, __m512i mag[4], __mmask64 neg[4], __m256i *lsv) {
    switch (type) {
    case OXL_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        /* run ib: grid indices in dword 2 ib (bytes), signs and scale in dword 2 ib + 1 */
        const __m512i q = _mm512_loadu_si512((const void *)b->qs);
        const __m256i aux = _mm512_cvtepi64_epi32(_mm512_srli_epi64(q, 32));
        signs_from7(fields7_x8(aux), neg);
        *lsv = run_scales(aux);
        const __m256i idx = _mm512_cvtepi64_epi32(q);   /* run ib's four index bytes in dword ib */
        const __m128i lo = _mm256_castsi256_si128(idx), hi = _mm256_extracti128_si256(idx, 1);
        const __m128i i8[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
        for (int p = 0; p < 4; p++)
            mag[p] = _mm512_i32gather_epi64(_mm256_cvtepu8_epi32(i8[p]), (const void *)iq2xxs_grid, 8);
        break;
    }
    case OXL_TYPE_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        const __m512i q = _mm512_loadu_si512((const void *)b->qs);
        signs_from7(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)), neg);
        const __m512i idx = _mm512_and_si512(q, _mm512_set1_epi16(511));
        for (int p = 0; p < 4; p++) {
            const __m128i i16 = p < 2 ? _mm512_extracti32x4_epi32(idx, 0) : _mm512_extracti32x4_epi32(idx, 2);
            const __m128i i16b = p < 2 ? _mm512_extracti32x4_epi32(idx, 1) : _mm512_extracti32x4_epi32(idx, 3);
            mag[p] = _mm512_i32gather_epi64(_mm256_cvtepu16_epi32(p % 2 ? i16b : i16), (const void *)iq2xs_grid, 8);
        }
        *lsv = nibble_scales(b->scales);
        break;
    }
    case OXL_TYPE_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        neg_from_bytes(b->qs + QK_K / 8, neg);
        /* entry l of run ib: qs[4 ib + l] | ((qh[ib] >> 2 l) & 3) << 8 */
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
        for (int p = 0; p < 4; p++) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * p)));
            const __m256i qh = _mm256_set_m128i(_mm_set1_epi32(b->qh[2 * p + 1]), _mm_set1_epi32(b->qh[2 * p]));
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, sh), _mm256_set1_epi32(3)), 8);
            mag[p] = _mm512_i32gather_epi64(_mm256_or_si256(lo, hi), (const void *)iq2s_grid, 8);
        }
        *lsv = nibble_scales(b->scales);
        break;
    }
    case OXL_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const __m256i aux = _mm256_loadu_si256((const __m256i *)(b->qs + QK_K / 4));   /* run ib: dword ib */
        signs_from7(fields7_x8(aux), neg);
        *lsv = run_scales(aux);
        for (int p = 0; p < 4; p++)
            mag[p] = _mm512_i32gather_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * p))),
                                            (const void *)iq3xxs_grid, 4);
        break;
    }
    case OXL_TYPE_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        neg_from_bytes(b->signs, neg);
        /* entry k of run ib: qs[8 ib + k] | (bit k of qh[ib]) << 8 */
        const __m512i k = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0);
        for (int p = 0; p < 4; p++) {
            const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * p)));
            const __m512i qh = _mm512_inserti64x4(_mm512_set1_epi32(b->qh[2 * p]), _mm256_set1_epi32(b->qh[2 * p + 1]), 1);
            const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(qh, k), _mm512_set1_epi32(1)), 8);
            mag[p] = _mm512_i32gather_epi32(_mm512_or_si512(lo, hi), (const void *)iq3s_grid, 4);
        }
        uint32_t u;
        memcpy(&u, b->scales, 4);
        const __m128i sc = _mm_cvtsi32_si128((int)u), m15 = _mm_set1_epi8(15);
        const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(sc, m15), _mm_and_si128(_mm_srli_epi16(sc, 4), m15));
        const __m128i ls2 = _mm_unpacklo_epi8(nib, nib);   /* run ib's scale nibble at bytes 2 ib, 2 ib + 1 */
        *lsv = _mm256_cvtepu8_epi16(_mm_add_epi8(_mm_add_epi8(ls2, ls2), _mm_set1_epi8(1)));
        break;
    }
    case OXL_TYPE_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        /* entry l of run ib: qs[4 ib + l] | ((qh[ib] >> 3 l) & 7) << 8; the run's shift +-1 by qh[ib] bit 15 */
        const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
        for (int p = 0; p < 4; p++) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * p)));
            const __m256i qh = _mm256_set_m128i(_mm_set1_epi32(b->qh[2 * p + 1]), _mm_set1_epi32(b->qh[2 * p]));
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, sh), _mm256_set1_epi32(7)), 8);
            const __m512i g = _mm512_i32gather_epi64(_mm256_or_si256(lo, hi), (const void *)iq1s_grid, 8);
            const __mmask8 dneg = (__mmask8)((b->qh[2 * p] >> 15 ? 0x0F : 0) | (b->qh[2 * p + 1] >> 15 ? 0xF0 : 0));
            iq1_split(g, dneg, &mag[p], &neg[p]);
        }
        const __m128i v = _mm_loadu_si128((const __m128i *)b->qh);
        const __m128i ls = _mm_add_epi16(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(v, 12), _mm_set1_epi16(7)), 1),
                                         _mm_set1_epi16(1));
        *lsv = _mm256_set_m128i(_mm_unpackhi_epi16(ls, ls), _mm_unpacklo_epi16(ls, ls));
        break;
    }
    default: { /* OXL_TYPE_IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        /* entry l of run ib: qs[4 ib + l] | (h & 7) << 8 with h = qh[2 ib + l / 2] >> 4 (l % 2), and its 8
         * values' shift +-1 by h bit 3: lane k of register p reads qh byte 4 p + k / 2 */
        const __m256i sh = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
        for (int p = 0; p < 4; p++) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * p)));
            uint32_t q4;
            memcpy(&q4, b->qh + 4 * p, 4);
            const __m128i qb = _mm_cvtsi32_si128((int)q4);
            const __m256i h = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(qb, qb)), sh);
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(7)), 8);
            const __m512i g = _mm512_i32gather_epi64(_mm256_or_si256(lo, hi), (const void *)iq1s_grid, 8);
            iq1_split(g, _mm256_test_epi32_mask(h, _mm256_set1_epi32(8)), &mag[p], &neg[p]);
        }
        /* half-run lane k: 3-bit field k % 4 of scale word k / 4 */
        uint64_t u;
        memcpy(&u, b->scales, 8);
        const __m256i words = _mm256_permutexvar_epi16(_mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                       _mm256_castsi128_si256(_mm_cvtsi64_si128((long long)u)));
        const __m256i f = _mm256_and_si256(_mm256_srlv_epi16(words, _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9)),
                                           _mm256_set1_epi16(7));
        *lsv = _mm256_add_epi16(_mm256_add_epi16(f, f), _mm256_set1_epi16(1));
        break;
    }
    }
}

#endif /* OXL_X86_AVX512_IQ_BLOCK_AVX512_H */
