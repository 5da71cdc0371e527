/* x86 helpers and multi-row kernels (tiles) for the K-quants Q4_K, Q5_K, Q6_K and IQ4_XS of the AVX2 tier
 * (csrc/x86/avx2/quants_k_avx2.c, with its vec_dots; the AVX-512 tier inherits them, the AVX-512 VNNI tier has
 * its own sixteen-row kernels). Static inline. Needs AVX2 + F16C. */
#ifndef OXL_X86_QUANTS_K_X86_H
#define OXL_X86_QUANTS_K_X86_H

#include <immintrin.h>
#include <string.h>

#include "avx2_util.h"

#include "../blocks.h"
#include "../kernels.h"
#include "../scalar/quants_k.h"

/* acc + vpmaddwd(a, b) per int32 lane */
#define OXL_K_ACC_MADD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))

/* 16 int16 lanes: element e of the 8 int16 in each 128-bit lane, broadcast (byte shuffle control) */
#define BCAST16(e) _mm256_set1_epi16((short)((2 * (e)) | ((2 * (e) + 1) << 8)))
/* low 128-bit lane: int16 element e broadcast, high lane: element e+1 (same source in both lanes) */
#define BCAST16_PAIR(e) _mm256_setr_epi8(2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, \
    2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, 2 * (e), 2 * (e) + 1, \
    2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3, \
    2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3, 2 * (e) + 2, 2 * (e) + 3)

/* ---------------------------------------------------------------- Q4_K, Q5_K */

/* Q4_K/Q5_K sub-block pair c (values 64c..64c+63): sumi + sum of scale_j * dot over both sub-blocks */
static inline __m256i dot_k4_pair(__m256i sumi, __m256i q_lo, __m256i q_hi, const int8_t *q8, __m256i scales,
                                  __m256i ctrl_lo, __m256i ctrl_hi) {
    const __m256i q8l = _mm256_loadu_si256((const __m256i *)q8);
    const __m256i q8h = _mm256_loadu_si256((const __m256i *)(q8 + 32));
    sumi = OXL_K_ACC_MADD(sumi, _mm256_shuffle_epi8(scales, ctrl_lo), _mm256_maddubs_epi16(q_lo, q8l));
    return OXL_K_ACC_MADD(sumi, _mm256_shuffle_epi8(scales, ctrl_hi), _mm256_maddubs_epi16(q_hi, q8h));
}

/* Q4_K/Q5_K scales (bytes 0-7) and mins (bytes 8-15), built in a register: going through a
 * uint32_t[4] on the stack costs a store-forwarding stall per block. */
static inline __m128i scales_mins_k4(const uint8_t *q) {
    uint32_t a[3];
    memcpy(a, q, 12);
    const uint32_t s_lo = a[0] & 0x3f3f3f3fu;
    const uint32_t s_hi = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_lo = a[1] & 0x3f3f3f3fu;
    const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
    return _mm_setr_epi32((int)s_lo, (int)s_hi, (int)m_lo, (int)m_hi);
}

/* 4 int32 as floats in lanes 0-3, +0.0 in lanes 4-7 (a VEX 128-bit op zeroes the upper half: the
 * extension costs nothing) */
static inline __m256 cvt_i32x4_ps256(__m128i v) {
    return _mm256_zextps128_ps256(_mm_cvtepi32_ps(v));
}

/* Q4_K/Q5_K: a super-block's float steps, the canonical order of vec_dot and the multi-row kernels:
 * acc = fma(dx dy, sumi, acc), then acc = fma(-dminx dy, [sum_j min_j (bsums[2j] + bsums[2j+1]), 0 x4], acc) */
static inline __m256 k4_accumulate(__m256 acc, __m256i sumi, __m128i sm, const int16_t *bsums, float dx, float dminx,
                                   float dy) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fmadd_ps(_mm256_set1_ps(-dminx * dy), cvt_i32x4_ps256(_mm_madd_epi16(mins, pairs)), acc);
}

/* ---------------------------------------------------------------- multi-row products
 * R weight rows x rc activation rows (S[j * lds + r]): each weight chunk is decoded once and used for
 * rc activation rows, each activation block is read for R weight rows. The arithmetic of one
 * (weight row, activation row) is vec_dot's, step for step, for every R and rc: the outputs are
 * bit-identical to vec_dot's. Small batches (<= K_SMALL_BATCH activation rows) walk the weight rows
 * one at a time (one sequential stream, as the matvec); larger ones use 4 x 2 tiles. */

#define TILE_R 4
#define TILE_RC 4
#define K_SMALL_BATCH 8
/* activation rows of the tiles of larger batches: 2 with AVX2's 16 vector registers */
#define K_WIDE_RC 2

/* Q4_K (has_qh = 0) and Q5_K (has_qh = 1) */
OXL_INLINE void tile_k4(const int has_qh, const int R, const int rc, int nb, float *S, int64_t lds, const char *w,
                        size_t w_row, const char *y, size_t y_row) {
    const size_t bsize = has_qh ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m1 = _mm256_set1_epi8(1);
    __m256 acc[TILE_R][TILE_RC];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < rc; j++) acc[r][j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_q8_K *yb[TILE_RC];
        for (int j = 0; j < rc; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            /* Q4_K and Q5_K share d, dmin, scales; Q5_K has qh before qs */
            const block_q4_K *x = (const block_q4_K *)(w + r * w_row + i * bsize);
            const uint8_t *qs = has_qh ? ((const block_q5_K *)x)->qs : x->qs;
            const __m256i qh = has_qh ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)x)->qh)
                                      : _mm256_setzero_si256();
            const __m128i sm = scales_mins_k4(x->scales);
            const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
            __m256i sumi[TILE_RC];
            for (int j = 0; j < rc; j++) sumi[j] = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i q4 = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i q_lo = _mm256_and_si256(q4, m4);
                __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                if (has_qh) {
                    q_lo = _mm256_or_si256(q_lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m1), 4));
                    q_hi = _mm256_or_si256(q_hi,
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), m1), 4));
                }
                for (int j = 0; j < rc; j++)
                    sumi[j] = dot_k4_pair(sumi[j], q_lo, q_hi, yb[j]->qs + 64 * c, scales, BCAST16(2 * c),
                                          BCAST16(2 * c + 1));
            }
            const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
            for (int j = 0; j < rc; j++) acc[r][j] = k4_accumulate(acc[r][j], sumi[j], sm, yb[j]->bsums, d, dmin, yb[j]->d);
        }
    }
    for (int j = 0; j < rc; j++)
        for (int r = 0; r < R; r++) S[j * lds + r] = hsum_f32_8(acc[r][j]);
}

OXL_INLINE void tile_q6_K(const int R, const int rc, int nb, float *S, int64_t lds, const char *w, size_t w_row,
                          const char *y, size_t y_row) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[TILE_R][TILE_RC];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < rc; j++) acc[r][j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_q8_K *yb[TILE_RC];
        for (int j = 0; j < rc; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const block_q6_K *x = (const block_q6_K *)(w + r * w_row) + i;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            __m256i sumi[TILE_RC];
            for (int j = 0; j < rc; j++) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)yb[j]->bsums);
                sumi[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
            }
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                const __m256i scales16 = _mm256_broadcastsi128_si256(
                    _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(x->scales + 8 * h))));
                for (int k = 0; k < 4; k++) {
                    const __m256i lo = k % 2 ? ql1 : ql0;
                    const __m256i nib = k < 2 ? _mm256_and_si256(lo, m4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4);
                    const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3), 4);
                    const __m256i q = _mm256_or_si256(nib, top);
                    const __m256i sck = _mm256_shuffle_epi8(scales16, BCAST16_PAIR(2 * k));
                    for (int j = 0; j < rc; j++) {
                        const __m256i q8 = _mm256_loadu_si256((const __m256i *)(yb[j]->qs + 128 * h + 32 * k));
                        sumi[j] = OXL_K_ACC_MADD(sumi[j], sck, _mm256_maddubs_epi16(q, q8));
                    }
                }
            }
            /* vec_dot's d is y.d * x.d: the same product */
            const float d = _cvtsh_ss(x->d);
            for (int j = 0; j < rc; j++)
                acc[r][j] = _mm256_fmadd_ps(_mm256_set1_ps(yb[j]->d * d), _mm256_cvtepi32_ps(sumi[j]), acc[r][j]);
        }
    }
    for (int j = 0; j < rc; j++)
        for (int r = 0; r < R; r++) S[j * lds + r] = hsum_f32_8(acc[r][j]);
}

/* ---------------------------------------------------------------- IQ4_XS */

/* signed x signed int8 products, pairwise summed to int16 (|x| <= 127 so |x| fits maddubs' unsigned side) */
static inline __m256i madd_i8_signed(__m256i x, __m256i y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* IQ4_XS sub-blocks ib, ib + 1 decoded: codebook values of the low nibbles (values 0..15 of each sub-block,
 * sub-block ib in the low 128 bits), of the high nibbles (values 16..31), and the two int16 scales */
typedef struct {
    __m256i v_lo, v_hi, sc;
} iq4_xs_pair;

static inline iq4_xs_pair iq4_xs_decode_pair(const block_iq4_xs *x, int ib, __m256i values) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i q4 = _mm256_loadu_si256((const __m256i *)(x->qs + 16 * ib));
    iq4_xs_pair p;
    p.v_lo = _mm256_shuffle_epi8(values, _mm256_and_si256(q4, m4));
    p.v_hi = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4));
    p.sc = _mm256_set_m128i(_mm_set1_epi16((short)oxl_iq4xs_scale(x, ib + 1)), _mm_set1_epi16((short)oxl_iq4xs_scale(x, ib)));
    return p;
}

/* sumi + the pair's scaled products with the Q8_K values q8 (the super-block's, from value 32 ib) */
static inline __m256i iq4_xs_dot_pair(__m256i sumi, const iq4_xs_pair *p, const int8_t *q8) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)q8);
    const __m256i b = _mm256_loadu_si256((const __m256i *)(q8 + 32));
    const __m256i q8_lo = _mm256_permute2x128_si256(a, b, 0x20);
    const __m256i q8_hi = _mm256_permute2x128_si256(a, b, 0x31);
    sumi = OXL_K_ACC_MADD(sumi, madd_i8_signed(p->v_lo, q8_lo), p->sc);
    return OXL_K_ACC_MADD(sumi, madd_i8_signed(p->v_hi, q8_hi), p->sc);
}

static inline __m256i iq4_xs_values(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
}

/* The steps of vec_dot_iq4_xs_q8_K_avx2 for R x rc outputs: per super-block acc = fma(dy dx, sumi, acc) */
OXL_INLINE void tile_iq4_xs(const int R, const int rc, int nb, float *S, int64_t lds, const char *w, size_t w_row,
                            const char *y, size_t y_row) {
    const __m256i values = iq4_xs_values();
    __m256 acc[TILE_R][TILE_RC];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < rc; j++) acc[r][j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_q8_K *yb[TILE_RC];
        for (int j = 0; j < rc; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const block_iq4_xs *x = (const block_iq4_xs *)(w + r * w_row) + i;
            __m256i sumi[TILE_RC];
            for (int j = 0; j < rc; j++) sumi[j] = _mm256_setzero_si256();
            for (int ib = 0; ib < QK_K / 32; ib += 2) {
                const iq4_xs_pair p = iq4_xs_decode_pair(x, ib, values);
                for (int j = 0; j < rc; j++) sumi[j] = iq4_xs_dot_pair(sumi[j], &p, yb[j]->qs + 32 * ib);
            }
            const float dx = _cvtsh_ss(x->d);
            for (int j = 0; j < rc; j++)
                acc[r][j] = _mm256_fmadd_ps(_mm256_set1_ps(yb[j]->d * dx), _mm256_cvtepi32_ps(sumi[j]), acc[r][j]);
        }
    }
    for (int j = 0; j < rc; j++)
        for (int r = 0; r < R; r++) S[j * lds + r] = hsum_f32_8(acc[r][j]);
}

/* nr x nc outputs from tiles with compile-time R and rc */
#define GEMM_ROWS_K(name, call)                                                                                \
    static void name(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,      \
                     int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {                               \
        const int nb = n / QK_K;                                                                               \
        const char *wc = (const char *)w, *yc = (const char *)y;                                               \
        int r = 0;                                                                                             \
        if (nc > K_SMALL_BATCH) {                                                                              \
            for (; r + TILE_R <= nr; r += TILE_R) {                                                            \
                int j = 0;                                                                                     \
                for (; j + K_WIDE_RC <= nc; j += K_WIDE_RC)                                                    \
                    call(TILE_R, K_WIDE_RC, nb, S + j * lds + r, lds, wc + r * w_row, w_row, yc + j * y_row, y_row); \
                for (; j + 2 <= nc; j += 2) call(TILE_R, 2, nb, S + j * lds + r, lds, wc + r * w_row, w_row, yc + j * y_row, y_row); \
                if (j < nc) call(TILE_R, 1, nb, S + j * lds + r, lds, wc + r * w_row, w_row, yc + j * y_row, y_row); \
            }                                                                                                  \
        }                                                                                                      \
        for (; r < nr; r++) {                                                                                  \
            const char *wr = wc + r * w_row;                                                                   \
            oxl_stream_row(wr, w_row, wc + (size_t)nr * w_row);                                                \
            for (int j = 0; j < nc; j += TILE_RC) {                                                            \
                float *Sj = S + j * lds + r;                                                                   \
                const char *yj = yc + j * y_row;                                                               \
                switch (OXL_MIN(TILE_RC, nc - j)) {                                                            \
                case 4: call(1, 4, nb, Sj, lds, wr, w_row, yj, y_row); break;                                  \
                case 3: call(1, 3, nb, Sj, lds, wr, w_row, yj, y_row); break;                                  \
                case 2: call(1, 2, nb, Sj, lds, wr, w_row, yj, y_row); break;                                  \
                default: call(1, 1, nb, Sj, lds, wr, w_row, yj, y_row); break;                                 \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

#define TILE_Q4_K(R, rc, ...) tile_k4(0, R, rc, __VA_ARGS__)
#define TILE_Q5_K(R, rc, ...) tile_k4(1, R, rc, __VA_ARGS__)

#endif
