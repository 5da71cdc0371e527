/* Q4_0 and Q8_0 on the AVX2 tier: eight weight rows side by side, one int32 lane per row (x8_common.h).
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row,
 * batched and verify products, the repacked prefill tiles), for each output:
 *
 *     out = +0;  for each 32-value block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *
 * isum_b the exact int32 dot of block b's 32 weight and activation values, dx_b * dy_b rounded to float
 * once, the fma rounded once: the AVX-512 VNNI tier's order (csrc/x86/avx512vnni/quants_x16_vnni.c), so
 * the two tiers give the same floats. A register of eight rows computes eight such serial sums at once.
 *   Q4_0: per block and activation row eight vpmaddubsw (the file's unsigned nibbles q + 8 against four
 *         broadcast activation bytes; a pair's sum |.| <= 2 * 15 * 128 and the eight summed in int16
 *         |.| <= 30720, exact), one vpmaddwd by ones, the int32 sum starting at -8 sum(y) (computed once
 *         per activation block), a convert, a multiply and an fma.
 *   Q8_0: the sign trick, |x| against y with x's sign (|x| <= 128, |y| <= 127: a pair |.| <= 32512), a
 *         vpmaddwd by ones and an int32 add per four values.
 * The order the AVX2 tier had before (quants_legacy_avx2.c: float lanes per 4 values, blocks in even / odd
 * pairs) stays for the AVX-512 tier, whose vec_dots sum in it.
 *
 * Layout x8 (the repacked copy, or built per call from file rows into a per-thread buffer):
 *   a group of 8 rows, nb blocks: nb blocks of quants, then nb x 8 fp16 scales (row l's d at 2l)
 *   q4_0: 128 bytes a block: chunk c (0..3) at 32c holds row l's qs[4c..4c+3] at 4l (low nibbles: values
 *         4c..4c+3, high nibbles: 16 + 4c..), as in the file
 *   q8_0: 256 bytes a block: chunk c (0..7) at 32c holds row l's qs[4c..4c+3] at 4l
 * A repacked matrix is its whole groups of 8 rows in this form, then its last rows % 8 rows as in the
 * file: the file's size, and a product's row range starts at a multiple of 8 (forward_impl.h's
 * matmul_share aligns repacked ranges to 16). */
#include <stdlib.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x8_common.h"

#define X8_AHEAD 2048 /* prefetch distance in a repacked matrix, bytes */

/* per activation block: its scale and where its int32 sums start */
typedef struct {
    float d;
    int32_t base;   /* Q4_0: -8 * sum(y); Q8_0: 0 */
} x8_act;

static inline int x8_chunks(int kind) { return kind == K_Q4_0 ? 4 : 8; }
static inline size_t x8_qbytes(int kind) { return kind == K_Q4_0 ? 128 : 256; }
/* the bytes of one group of 8 rows (the file's bytes of those rows) */
static inline size_t x8_group_bytes(int kind, int nb) { return (size_t)nb * (x8_qbytes(kind) + 2 * X8); }

/* the exact sum of 32 int8 values, as 8 int32 lanes */
static inline __m256i x8_sum_i8_lanes(__m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
}

/* Up to 8 file rows (w_row bytes apart) in the x8 form; missing rows are zero, scales too. */
static void x8_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = kind_block_bytes(kind), qb = x8_qbytes(kind);
    uint16_t *sc = (uint16_t *)(void *)(dst + (size_t)nb * qb);
    for (int b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * bx;   /* d, then qs: both block types */
        uint8_t *q = dst + (size_t)b * qb;
        for (int h = 0; h < x8_chunks(kind) / 4; h++) {
            __m256i T[4];
            x8_rows_dwords(blk + 2 + 16 * h, w_row, nrows, T);
            for (int c = 0; c < 4; c++) _mm256_storeu_si256((__m256i *)(void *)(q + 32 * (4 * h + c)), T[c]);
        }
        for (int l = 0; l < X8; l++) {
            if (l < nrows) memcpy(&sc[b * X8 + l], blk + (size_t)l * w_row, 2);
            else sc[b * X8 + l] = 0;
        }
    }
}

static void x8_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *vA) {
    x8_act *A = (x8_act *)vA;
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            const block_q8_0 *yb = (const block_q8_0 *)(const void *)(y + (size_t)j * y_row) + b;
            const int32_t s = kind == K_Q4_0 ? hsum_i32_8(x8_sum_i8_lanes(_mm256_loadu_si256((const __m256i *)yb->qs))) : 0;
            A[(size_t)j * nb + b] = (x8_act){_cvtsh_ss(yb->d), -8 * s};
        }
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void x8_group(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                         const x8_act *A, int ahead, __m256 *acc) {
    const uint8_t *sc = g + (size_t)nb * x8_qbytes(kind);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * x8_qbytes(kind);
        /* a repacked matrix streams group after group: ask for the bytes `ahead` on, a block's worth per block */
        if (ahead)
            for (int c = 0; c < (kind == K_Q4_0 ? 2 + (b % 4 == 0) : 4 + (b % 2 == 0)); c++)
                __builtin_prefetch(q + ahead + 64 * c, 0, 3);
        const int8_t *yq[X8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) yq[j] = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[b].qs;
        __m256i isum[X8_VG];
        if (kind == K_Q4_0) {
            __m256i s16[X8_VG];
            X8_UNROLL for (int j = 0; j < C; j++) s16[j] = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * c));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                X8_UNROLL for (int j = 0; j < C; j++) {
                    s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(lo, x8_bcast4(yq[j] + 4 * c)));
                    s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(hi, x8_bcast4(yq[j] + 16 + 4 * c)));
                }
            }
            X8_UNROLL for (int j = 0; j < C; j++)
                isum[j] = _mm256_add_epi32(_mm256_madd_epi16(s16[j], ones), _mm256_set1_epi32(A[(size_t)j * nb + b].base));
        } else {
            X8_UNROLL for (int j = 0; j < C; j++) isum[j] = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * c));
                const __m256i ax = _mm256_sign_epi8(x, x);
                X8_UNROLL for (int j = 0; j < C; j++) {
                    const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(x8_bcast4(yq[j] + 4 * c), x));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sc + 16 * b)));
        X8_UNROLL for (int j = 0; j < C; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(A[(size_t)j * nb + b].d)),
                                     _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
}

OXL_INLINE void x8_pass(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                        int ahead, float *S, int64_t lds, int nrows) {
    __m256 acc[X8_VG];
    x8_group(kind, C, nb, g, y, y_row, (const x8_act *)A, ahead, acc);
    x8_store(C, acc, S, lds, nrows);
}

static void x8_pass_q4_0(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, float *S, int64_t lds, int nrows) {
    (void)kind;
#define X8_PASS(C_) x8_pass(K_Q4_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X8_BY_C(C, X8_PASS)
#undef X8_PASS
}
static void x8_pass_q8_0(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, float *S, int64_t lds, int nrows) {
    (void)kind;
#define X8_PASS(C_) x8_pass(K_Q8_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X8_BY_C(C, X8_PASS)
#undef X8_PASS
}

OXL_INLINE int x8_gemm_kind(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                            const char *y, size_t y_row, int nc) {
    const x8_family f = {kind, n / 32, (size_t)(n / 32) * sizeof(x8_act), x8_group_bytes(kind, n / 32), X8_AHEAD,
                         x8_prepare, x8_build, kind == K_Q4_0 ? x8_pass_q4_0 : x8_pass_q8_0};
    return x8_gemm(&f, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void x8_vec_dot(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / 32;
    const size_t bx = kind_block_bytes(kind);
    const char *x = (const char *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const __m256i ones = _mm256_set1_epi16(1);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const char *blk = x + (size_t)b * bx;
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256i p;
        if (kind == K_Q4_0) {   /* (q + 8) y - 8 y per pair, in int16: |.| <= 2 * 15 * 128 */
            p = _mm256_sub_epi16(_mm256_maddubs_epi16(nibbles_32((const uint8_t *)blk + 2), yq),
                                 _mm256_maddubs_epi16(_mm256_set1_epi8(8), yq));
        } else {
            const __m256i xq = _mm256_loadu_si256((const __m256i *)(blk + 2));
            p = _mm256_maddubs_epi16(_mm256_sign_epi8(xq, xq), _mm256_sign_epi8(yq, xq));
        }
        const int32_t isum = hsum_i32_8(_mm256_madd_epi16(p, ones));
        oxl_half dx;
        memcpy(&dx, blk, 2);
        acc = fmaf(fp16(dx) * fp16(y[b].d), (float)isum, acc);
    }
    *s = acc;
}

static void vec_dot_q4_0_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    x8_vec_dot(K_Q4_0, n, s, x, y);
}
static void vec_dot_q8_0_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    x8_vec_dot(K_Q8_0, n, s, x, y);
}

/* the file-layout products; without memory for the per-thread buffer, one output at a time (the same floats) */
OXL_INLINE void x8_gemm_file(int kind, int n, float *S, int64_t lds, const void *w, size_t w_row, int nr, const void *y,
                             size_t y_row, int nc) {
    if (!x8_gemm_kind(kind, 0, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc)) return;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++)
            x8_vec_dot(kind, n, &S[j * lds + r], (const char *)w + (size_t)r * w_row, (const char *)y + (size_t)j * y_row);
}
static void gemm_q4_0_file_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                              int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x8_gemm_file(K_Q4_0, n, S, lds, w, w_row, nr, y, y_row, nc);
}
static void gemm_q8_0_file_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                              int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x8_gemm_file(K_Q8_0, n, S, lds, w, w_row, nr, y, y_row, nc);
}
/* the repacked products (rows from a group start); -1: no memory, the caller reads the file rows */
static int gemm_q4_0_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                        const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return x8_gemm_kind(K_Q4_0, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}
static int gemm_q8_0_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                        const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return x8_gemm_kind(K_Q8_0, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}

/* the repacked layout has the file's bytes per row; any width */
static int64_t q4_0_x8_row_size(int64_t cols) { return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)sizeof(block_q4_0) : -1; }
static int64_t q8_0_x8_row_size(int64_t cols) { return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)sizeof(block_q8_0) : -1; }

/* whole groups of 8 rows repacked, the last rows % 8 copied; run once at load, per thread over a row range
 * that starts at a group boundary (matmul.c's oxl_repack splits in multiples of OXL_REPACK_ROW_ALIGN) */
static void x8_repack(int kind, const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    const int nb = (int)(cols / 32);
    const size_t row = (size_t)nb * kind_block_bytes(kind);
    int64_t r = 0;
    for (; r + X8 <= rows; r += X8) x8_build(kind, (const char *)w + r * row, row, X8, nb, (uint8_t *)dst + r * row);
    memcpy((char *)dst + r * row, (const char *)w + r * row, (size_t)(rows - r) * row);
}
static void repack_q4_0_x8(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x8_repack(K_Q4_0, w, dst, rows, cols);
}
static void repack_q8_0_x8(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x8_repack(K_Q8_0, w, dst, rows, cols);
}

/* Q4_0 and Q8_0 of this tier: vec_dot, the file-layout products (one row or many) and the repacked layout,
 * all in the order above */
void oxl_register_avx2_x8(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_0].vec_dot = vec_dot_q4_0_x8;
    t->type[OXL_TYPE_Q4_0].gemm = gemm_q4_0_file_x8;
    t->type[OXL_TYPE_Q4_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q4_0].repacked = (oxl_repacked_layout){"q4_0_x8", q4_0_x8_row_size, repack_q4_0_x8, gemm_q4_0_x8};
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_x8;
    t->type[OXL_TYPE_Q8_0].gemm = gemm_q8_0_file_x8;
    t->type[OXL_TYPE_Q8_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q8_0].repacked = (oxl_repacked_layout){"q8_0_x8", q8_0_x8_row_size, repack_q8_0_x8, gemm_q8_0_x8};
}
