/* x86 pieces of the 1- to 3-bit i-quant kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M against
 * Q8_K) shared by the AVX2 and AVX-512 tiers; static inline, so each tier compiles them with its own flags.
 *
 * - iq_run_x86: one 32-value run of a block (csrc/iq_decode.h's integers) as 256 bits: for the grid types the
 *   grid bytes (magnitudes) and 32 sign bits, for IQ1_S/IQ1_M the signed weights 8 g +- 1; and its two
 *   integer scales: the AVX2 tier's decoder (it puts the signs on the weights by a byte compare; the AVX-512
 *   tier decodes whole blocks and puts them on the activations by a masked subtract).
 * - The driver (below, once per tier): a tier defines IQ_TIER (its name suffix) and IQ_ROWS, its block
 *   kernel
 *       IQ_ROWS(type, C, x, nb, y, y_row, out, lds)
 *   which sums weight row x (nb super-blocks) against the C <= IQ_GROUP activation rows y, y + y_row, ...
 *   into out[j * lds] (each block decoded once for the C rows), then includes this header; it gets the
 *   multi-row kernel over it, the seven vec_dot / gemm pairs and oxl_register_<IQ_TIER>_iq. */
#ifndef OXL_X86_QUANTS_IQ_X86_H
#define OXL_X86_QUANTS_IQ_X86_H

#include <immintrin.h>

#include "../iq_decode.h"
#include "avx2_util.h"

#define IQ_GROUP 4   /* activation rows per decoded block */

static inline int iq_is_iq1(int type) { return type == OXL_TYPE_IQ1_S || type == OXL_TYPE_IQ1_M; }

/* the four 7-bit sign fields of aux (bits 0..27) as ggml's even-parity sign bytes */
static inline uint32_t iq_ksigns4(uint32_t aux) {
    return (uint32_t)ksigns_iq2xs[aux & 127] | (uint32_t)ksigns_iq2xs[(aux >> 7) & 127] << 8 |
           (uint32_t)ksigns_iq2xs[(aux >> 14) & 127] << 16 | (uint32_t)ksigns_iq2xs[(aux >> 21) & 127] << 24;
}

static inline int64_t iq1_delta8(int neg) { return neg ? -1 : 0x0101010101010101; }

/* 8 * g + delta per 8 values (delta bytes +-1): IQ1's signed weights */
static inline __m256i iq1_weights(__m256i g, __m256i delta) {
    const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
    return _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
}

/* run ib of a block: grid magnitudes with *signs (bit j set where weight j is negative), or for IQ1_S/IQ1_M
 * the signed weights (*signs untouched); ls[0] scales values 0..15, ls[1] 16..31 */
OXL_INLINE __m256i iq_run_x86(int type, const void *blk, int ib, uint32_t *signs, int ls[2]) {
    __m256i g;
    switch (type) {
    case OXL_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * ib, 8);
        const uint8_t *i8 = (const uint8_t *)&aux[0];
        g = _mm256_set_epi64x((int64_t)iq2xxs_grid[i8[3]], (int64_t)iq2xxs_grid[i8[2]], (int64_t)iq2xxs_grid[i8[1]],
                              (int64_t)iq2xxs_grid[i8[0]]);
        *signs = iq_ksigns4(aux[1]);
        ls[0] = ls[1] = 2 * (int)(aux[1] >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        const uint16_t *q = b->qs + 4 * ib;
        *signs = (uint32_t)ksigns_iq2xs[q[0] >> 9] | (uint32_t)ksigns_iq2xs[q[1] >> 9] << 8 |
                 (uint32_t)ksigns_iq2xs[q[2] >> 9] << 16 | (uint32_t)ksigns_iq2xs[q[3] >> 9] << 24;
        g = _mm256_set_epi64x((int64_t)iq2xs_grid[q[3] & 511], (int64_t)iq2xs_grid[q[2] & 511],
                              (int64_t)iq2xs_grid[q[1] & 511], (int64_t)iq2xs_grid[q[0] & 511]);
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        const uint8_t *qs = b->qs + 4 * ib;
        const int qh = b->qh[ib];
        memcpy(signs, b->qs + QK_K / 8 + 4 * ib, 4);
        g = _mm256_set_epi64x((int64_t)iq2s_grid[qs[3] | ((qh << 2) & 0x300)], (int64_t)iq2s_grid[qs[2] | ((qh << 4) & 0x300)],
                              (int64_t)iq2s_grid[qs[1] | ((qh << 6) & 0x300)], (int64_t)iq2s_grid[qs[0] | ((qh << 8) & 0x300)]);
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *q = b->qs + 8 * ib;
        uint32_t aux;
        memcpy(&aux, b->qs + QK_K / 4 + 4 * ib, 4);
        g = _mm256_set_epi32((int)iq3xxs_grid[q[7]], (int)iq3xxs_grid[q[6]], (int)iq3xxs_grid[q[5]], (int)iq3xxs_grid[q[4]],
                             (int)iq3xxs_grid[q[3]], (int)iq3xxs_grid[q[2]], (int)iq3xxs_grid[q[1]], (int)iq3xxs_grid[q[0]]);
        *signs = iq_ksigns4(aux);
        ls[0] = ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const uint8_t *q = b->qs + 8 * ib;
        const int qh = b->qh[ib];
        memcpy(signs, b->signs + 4 * ib, 4);
        int gi[8];
        for (int k = 0; k < 8; k++) gi[k] = (int)iq3s_grid[q[k] | ((qh << (8 - k)) & 256)];
        g = _mm256_set_epi32(gi[7], gi[6], gi[5], gi[4], gi[3], gi[2], gi[1], gi[0]);
        ls[0] = ls[1] = 1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 0xF);
        break;
    }
    case OXL_TYPE_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        const int qh = b->qh[ib];
        g = iq1_weights(_mm256_set_epi64x((int64_t)iq1s_grid[q[3] | (((qh >> 9) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[2] | (((qh >> 6) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[1] | (((qh >> 3) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[0] | ((qh & 7) << 8)]),
                        _mm256_set1_epi64x(iq1_delta8(qh & 0x8000)));
        ls[0] = ls[1] = 2 * ((qh >> 12) & 7) + 1;
        break;
    }
    default: { /* OXL_TYPE_IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        const uint8_t *q = b->qs + 4 * ib;
        const int h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
        uint16_t sc[4];
        memcpy(sc, b->scales, 8);
        g = iq1_weights(_mm256_set_epi64x((int64_t)iq1s_grid[q[3] | (((h1 >> 4) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[2] | ((h1 & 7) << 8)],
                                          (int64_t)iq1s_grid[q[1] | (((h0 >> 4) & 7) << 8)],
                                          (int64_t)iq1s_grid[q[0] | ((h0 & 7) << 8)]),
                        _mm256_set_epi64x(iq1_delta8(h1 & 0x80), iq1_delta8(h1 & 8), iq1_delta8(h0 & 0x80),
                                          iq1_delta8(h0 & 8)));
        ls[0] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
        ls[1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
        break;
    }
    }
    return g;
}

#endif /* OXL_X86_QUANTS_IQ_X86_H */

/* ---- the driver, once per including tier (needs IQ_TIER and IQ_ROWS) ---- */
#if defined(IQ_TIER) && defined(IQ_ROWS)

#define IQ_CAT_(a, b) a##b
#define IQ_CAT(a, b) IQ_CAT_(a, b)
#define IQ_NAME(x) IQ_CAT(x, IQ_TIER)

/* weight rows one after the other (streamed ahead), each against the activation rows IQ_GROUP at a time */
OXL_INLINE void IQ_NAME(iq_gemm_)(int type, int n, float *S, int64_t lds, const void *w, size_t w_row, int nr,
                                  const void *y, size_t y_row, int nc) {
    const char *wc = (const char *)w, *yc = (const char *)y;
    for (int r = 0; r < nr; r++) {
        oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row);
        for (int j = 0; j < nc; j += IQ_GROUP) {
            const char *x = wc + r * w_row, *yj = yc + j * y_row;
            float *out = S + j * lds + r;
            switch (OXL_MIN(IQ_GROUP, nc - j)) {
            case 4: IQ_ROWS(type, 4, x, n / QK_K, yj, y_row, out, lds); break;
            case 3: IQ_ROWS(type, 3, x, n / QK_K, yj, y_row, out, lds); break;
            case 2: IQ_ROWS(type, 2, x, n / QK_K, yj, y_row, out, lds); break;
            default: IQ_ROWS(type, 1, x, n / QK_K, yj, y_row, out, lds); break;
            }
        }
    }
}

#define IQ_KERNELS(t, T)                                                                                          \
    static void IQ_NAME(vec_dot_##t##_q8_K_)(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x,            \
                                             const void *OXL_RESTRICT y) {                                        \
        IQ_ROWS(T, 1, (const char *)x, n / QK_K, (const char *)y, 0, s, 0);                                       \
    }                                                                                                             \
    static void IQ_NAME(gemm_##t##_)(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,       \
                                     size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {    \
        IQ_NAME(iq_gemm_)(T, n, S, lds, w, w_row, nr, y, y_row, nc);                                              \
    }

IQ_KERNELS(iq2_xxs, OXL_TYPE_IQ2_XXS)
IQ_KERNELS(iq2_xs, OXL_TYPE_IQ2_XS)
IQ_KERNELS(iq2_s, OXL_TYPE_IQ2_S)
IQ_KERNELS(iq3_xxs, OXL_TYPE_IQ3_XXS)
IQ_KERNELS(iq3_s, OXL_TYPE_IQ3_S)
IQ_KERNELS(iq1_s, OXL_TYPE_IQ1_S)
IQ_KERNELS(iq1_m, OXL_TYPE_IQ1_M)
#undef IQ_KERNELS

void IQ_CAT(IQ_CAT(oxl_register_, IQ_TIER), _iq)(oxl_kernel_table *t) {
#define SET_IQ(T, t_) do { t->type[T].vec_dot = IQ_NAME(vec_dot_##t_##_q8_K_); t->type[T].gemm = IQ_NAME(gemm_##t_##_); } while (0)
    SET_IQ(OXL_TYPE_IQ2_XXS, iq2_xxs);
    SET_IQ(OXL_TYPE_IQ2_XS, iq2_xs);
    SET_IQ(OXL_TYPE_IQ2_S, iq2_s);
    SET_IQ(OXL_TYPE_IQ3_XXS, iq3_xxs);
    SET_IQ(OXL_TYPE_IQ3_S, iq3_s);
    SET_IQ(OXL_TYPE_IQ1_S, iq1_s);
    SET_IQ(OXL_TYPE_IQ1_M, iq1_m);
#undef SET_IQ
}

#endif
