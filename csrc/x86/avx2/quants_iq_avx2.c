/* AVX2 kernels for the 1- to 3-bit i-quants against Q8_K: each 32-value run of a block decoded to 32
 * signed int8 weights (grid entries gathered by index, signs applied by mask) and its two integer scales,
 * exactly csrc/iq_decode.h's integers; a super-block's dot is one exact integer, so vec_dot gives the
 * scalar tier's float and the multi-row kernel (each block decoded once for up to IQ_GROUP activation
 * rows) gives vec_dot's. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include "../../iq_decode.h"
#include "../avx2_util.h"

#define IQ_GROUP 4

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

static inline uint32_t ksigns4(uint32_t aux) {
    return (uint32_t)ksigns_iq2xs[aux & 127] | (uint32_t)ksigns_iq2xs[(aux >> 7) & 127] << 8 |
           (uint32_t)ksigns_iq2xs[(aux >> 14) & 127] << 16 | (uint32_t)ksigns_iq2xs[(aux >> 21) & 127] << 24;
}

/* 8 * g + delta per 8 values (delta bytes +-1) */
static inline __m256i iq1_weights(__m256i g, __m256i delta) {
    const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
    return _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
}

static inline int64_t delta8(int neg) { return neg ? -1 : 0x0101010101010101; }

/* run ib of a block: 32 weights; *lsv = the two scales as int16 lanes (low 128 bits: values 0..15) */
OXL_INLINE __m256i iq_decode32_avx2(int type, const void *blk, int ib, __m256i *lsv) {
    int ls0, ls1;
    __m256i w;
    switch (type) {
    case OXL_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * ib, 8);
        const uint8_t *i8 = (const uint8_t *)&aux[0];
        w = apply_signs(_mm256_set_epi64x((int64_t)iq2xxs_grid[i8[3]], (int64_t)iq2xxs_grid[i8[2]],
                                          (int64_t)iq2xxs_grid[i8[1]], (int64_t)iq2xxs_grid[i8[0]]), ksigns4(aux[1]));
        ls0 = ls1 = 2 * (int)(aux[1] >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        const uint16_t *q = b->qs + 4 * ib;
        const uint32_t s = (uint32_t)ksigns_iq2xs[q[0] >> 9] | (uint32_t)ksigns_iq2xs[q[1] >> 9] << 8 |
                           (uint32_t)ksigns_iq2xs[q[2] >> 9] << 16 | (uint32_t)ksigns_iq2xs[q[3] >> 9] << 24;
        w = apply_signs(_mm256_set_epi64x((int64_t)iq2xs_grid[q[3] & 511], (int64_t)iq2xs_grid[q[2] & 511],
                                          (int64_t)iq2xs_grid[q[1] & 511], (int64_t)iq2xs_grid[q[0] & 511]), s);
        ls0 = 2 * (b->scales[ib] & 0xF) + 1;
        ls1 = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        const uint8_t *qs = b->qs + 4 * ib;
        const int qh = b->qh[ib];
        uint32_t s;
        memcpy(&s, b->qs + QK_K / 8 + 4 * ib, 4);
        w = apply_signs(_mm256_set_epi64x((int64_t)iq2s_grid[qs[3] | ((qh << 2) & 0x300)],
                                          (int64_t)iq2s_grid[qs[2] | ((qh << 4) & 0x300)],
                                          (int64_t)iq2s_grid[qs[1] | ((qh << 6) & 0x300)],
                                          (int64_t)iq2s_grid[qs[0] | ((qh << 8) & 0x300)]), s);
        ls0 = 2 * (b->scales[ib] & 0xF) + 1;
        ls1 = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *q = b->qs + 8 * ib;
        uint32_t aux;
        memcpy(&aux, b->qs + QK_K / 4 + 4 * ib, 4);
        w = apply_signs(_mm256_set_epi32((int)iq3xxs_grid[q[7]], (int)iq3xxs_grid[q[6]], (int)iq3xxs_grid[q[5]],
                                          (int)iq3xxs_grid[q[4]], (int)iq3xxs_grid[q[3]], (int)iq3xxs_grid[q[2]],
                                          (int)iq3xxs_grid[q[1]], (int)iq3xxs_grid[q[0]]), ksigns4(aux));
        ls0 = ls1 = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const uint8_t *q = b->qs + 8 * ib;
        const int qh = b->qh[ib];
        uint32_t s;
        memcpy(&s, b->signs + 4 * ib, 4);
        int g[8];
        for (int k = 0; k < 8; k++) g[k] = (int)iq3s_grid[q[k] | ((qh << (8 - k)) & 256)];
        w = apply_signs(_mm256_set_epi32(g[7], g[6], g[5], g[4], g[3], g[2], g[1], g[0]), s);
        ls0 = ls1 = 1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 0xF);
        break;
    }
    case OXL_TYPE_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        const int qh = b->qh[ib];
        const int64_t d = delta8(qh & 0x8000);
        w = iq1_weights(_mm256_set_epi64x((int64_t)iq1s_grid[q[3] | (((qh >> 9) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[2] | (((qh >> 6) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[1] | (((qh >> 3) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[0] | ((qh & 7) << 8)]), _mm256_set1_epi64x(d));
        ls0 = ls1 = 2 * ((qh >> 12) & 7) + 1;
        break;
    }
    default: { /* OXL_TYPE_IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        const int h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
        uint16_t sc[4];
        memcpy(sc, b->scales, 8);
        w = iq1_weights(_mm256_set_epi64x((int64_t)iq1s_grid[q[3] | (((h1 >> 4) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[2] | ((h1 & 7) << 8)],
                                          (int64_t)iq1s_grid[q[1] | (((h0 >> 4) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[0] | ((h0 & 7) << 8)]),
                        _mm256_set_epi64x(delta8(h1 & 0x80), delta8(h1 & 8), delta8(h0 & 0x80), delta8(h0 & 8)));
        ls0 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
        ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
        break;
    }
    }
    *lsv = _mm256_set_m128i(_mm_set1_epi16((short)ls1), _mm_set1_epi16((short)ls0));
    return w;
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

OXL_INLINE void iq_gemm(int type, int n, float *S, int64_t lds, const void *w, size_t w_row, int nr, const void *y,
                        size_t y_row, int nc) {
    const char *wc = (const char *)w, *yc = (const char *)y;
    for (int r = 0; r < nr; r++) {
        oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row);
        for (int j = 0; j < nc; j += IQ_GROUP) {
            const char *x = wc + r * w_row, *yj = yc + j * y_row;
            float *out = S + j * lds + r;
            switch (OXL_MIN(IQ_GROUP, nc - j)) {
            case 4: iq_rows(type, 4, x, n / QK_K, yj, y_row, out, lds); break;
            case 3: iq_rows(type, 3, x, n / QK_K, yj, y_row, out, lds); break;
            case 2: iq_rows(type, 2, x, n / QK_K, yj, y_row, out, lds); break;
            default: iq_rows(type, 1, x, n / QK_K, yj, y_row, out, lds); break;
            }
        }
    }
}

#define IQ_AVX2(t, T) \
    static void vec_dot_##t##_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, \
                                        const void *OXL_RESTRICT y) { \
        iq_rows(T, 1, (const char *)x, n / QK_K, (const char *)y, 0, s, 0); \
    } \
    static void gemm_##t##_avx2(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, \
                                int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        iq_gemm(T, n, S, lds, w, w_row, nr, y, y_row, nc); \
    }

IQ_AVX2(iq2_xxs, OXL_TYPE_IQ2_XXS)
IQ_AVX2(iq2_xs, OXL_TYPE_IQ2_XS)
IQ_AVX2(iq2_s, OXL_TYPE_IQ2_S)
IQ_AVX2(iq3_xxs, OXL_TYPE_IQ3_XXS)
IQ_AVX2(iq3_s, OXL_TYPE_IQ3_S)
IQ_AVX2(iq1_s, OXL_TYPE_IQ1_S)
IQ_AVX2(iq1_m, OXL_TYPE_IQ1_M)

void oxl_register_avx2_iq(oxl_kernel_table *t) {
#define SET_IQ(T, t_) do { t->type[T].vec_dot = vec_dot_##t_##_q8_K_avx2; t->type[T].gemm = gemm_##t_##_avx2; } while (0)
    SET_IQ(OXL_TYPE_IQ2_XXS, iq2_xxs);
    SET_IQ(OXL_TYPE_IQ2_XS, iq2_xs);
    SET_IQ(OXL_TYPE_IQ2_S, iq2_s);
    SET_IQ(OXL_TYPE_IQ3_XXS, iq3_xxs);
    SET_IQ(OXL_TYPE_IQ3_S, iq3_s);
    SET_IQ(OXL_TYPE_IQ1_S, iq1_s);
    SET_IQ(OXL_TYPE_IQ1_M, iq1_m);
#undef SET_IQ
}
