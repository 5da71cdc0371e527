/* Q4_0 and Q8_0 on the AVX-512 VNNI tier: sixteen weight rows side by side, one int32 lane per row.
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row,
 * batched and verify products, the repacked prefill tiles), for each output:
 *
 *     out = +0;  for each 32-value block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *
 * isum_b the exact int32 dot of block b's 32 weight and activation values, dx_b * dy_b rounded to float
 * once, the fma rounded once: ggml's per-block order (an integer dot per block, one float multiply-add
 * per block), summed serially per output. A register of sixteen rows computes sixteen such serial sums
 * at once: per block and activation row eight vpdpbusd (4 values x 16 rows each), a convert, a multiply
 * and an fma, where the lane-per-value order of the AVX-512 tier (csrc/x86/avx512/quants_legacy_avx512.c,
 * a float sum per 8 values, which this tier followed before) costs a convert, a multiply and an fma per
 * 64 values. Kernel alone (Xeon, 1 thread, 2048 x 2048 Q4_0, medians of alternating runs, 2026-11-26):
 * 64 activation rows 1.96x the repacked kernel of that order, 8 rows 2.04x, 1 row 1.59x.
 *
 * Layout x16 (the repacked copy, or built per call from file rows into a per-thread buffer):
 *   a group of 16 rows, nb blocks: nb blocks of quants, then nb x 16 fp16 scales (row l's d at 2l)
 *   q4_0: 256 bytes a block: chunk c (0..3) at 64c holds row l's qs[4c..4c+3] at 4l (low nibbles: values
 *         4c..4c+3, high nibbles: 16 + 4c..), masked to the unsigned q + 8
 *   q8_0: 512 bytes a block: chunk c (0..7) at 64c holds row l's qs[4c..4c+3] + 128 (as u8) at 4l
 * The weight is vpdpbusd's unsigned operand, the activation's four bytes the broadcast signed one; each
 * block's int32 sum starts at -off * sum(y) (off 8 or 128), computed once per activation block.
 * A repacked matrix is its whole groups of 16 rows in this form, then its last rows % 16 rows as in the
 * file: the file's size, and a product's row range starts at a multiple of 16 (forward_impl.h's
 * matmul_share aligns them). The walk over groups and passes is x16_common.h's x16_gemm. */
#include <stdlib.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x16_common.h"

static inline int x16_chunks(int kind) { return kind == K_Q4_0 ? 4 : 8; }
static inline size_t x16_qbytes(int kind) { return kind == K_Q4_0 ? 256 : 512; }
static inline int x16_off(int kind) { return kind == K_Q4_0 ? 8 : 128; }
/* the offset a product's int32 sums start from (x16_act's base): the layout's, except for Q8_0 on the
 * AVX-512 tier, whose pass reads the signed values back and sums them by the sign trick (x16_dot32_q8) */
#ifdef X16_AVX512BW
static inline int x16_base_off(int kind) { return kind == K_Q4_0 ? 8 : 0; }
#else
static inline int x16_base_off(int kind) { return x16_off(kind); }
#endif
/* the bytes of one group of 16 rows (the file's bytes of those rows) */
static inline size_t x16_group_bytes(int kind, int nb) { return (size_t)nb * (x16_qbytes(kind) + 2 * X16); }

/* Up to 16 file rows (w_row bytes apart) in the x16 form; missing rows are zero, scales too. */
static void x16_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = kind_block_bytes(kind), qb = x16_qbytes(kind);
    const int nch = x16_chunks(kind);
    const uint32_t flip = kind == K_Q8_0 ? 0x80808080u : 0;
    uint16_t *sc = (uint16_t *)(void *)(dst + (size_t)nb * qb);
    for (int b = 0; b < nb; b++) {
        uint8_t *q = dst + (size_t)b * qb;
        for (int l = 0; l < X16; l++) {
            if (l >= nrows) {
                for (int c = 0; c < nch; c++) memset(q + 64 * c + 4 * l, 0, 4);
                sc[b * X16 + l] = 0;
                continue;
            }
            const char *blk = w + (size_t)l * w_row + (size_t)b * bx;   /* d, then qs: both block types */
            memcpy(&sc[b * X16 + l], blk, 2);
            for (int c = 0; c < nch; c++) {
                uint32_t v;
                memcpy(&v, blk + 2 + 4 * c, 4);
                v ^= flip;
                memcpy(q + 64 * c + 4 * l, &v, 4);
            }
        }
    }
}

#ifdef X16_AVX512BW
/* Q8_0's exact block dot on the AVX-512 tier (x: the layout's chunks, value + 128): per chunk |x| and x's
 * signs once, then per activation row |x| against y with x's sign (|x| <= 128, |y| <= 127: a pair |.| <= 32512) */
OXL_INLINE __m512i x16_dot32_q8(const __m512i ax[8], const __mmask64 neg[8], const int8_t *yq) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int c = 0; c < 8; c += 2) {
        const __m512i y0 = x16_bcast4(yq + 4 * c), y1 = x16_bcast4(yq + 4 * c + 4);
        s0 = x16_dpbusd_u7(s0, ax[c], _mm512_mask_sub_epi8(y0, neg[c], _mm512_setzero_si512(), y0));
        s1 = x16_dpbusd_u7(s1, ax[c + 1], _mm512_mask_sub_epi8(y1, neg[c + 1], _mm512_setzero_si512(), y1));
    }
    return _mm512_add_epi32(s0, s1);
}
#endif

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void x16_group(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                          const x16_act *A, int ahead, __m512 *acc) {
    const uint8_t *sc = g + (size_t)nb * x16_qbytes(kind);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    X16_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * x16_qbytes(kind);
        if (ahead) x16_ahead(g, x16_qbytes(kind) + 2 * X16, b);   /* a block's share of the group's bytes */
        __m512i x[8];
        if (kind == K_Q4_0) {
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * c));
                x[c] = _mm512_and_si512(v, m4);
                x[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
        } else {
            for (int c = 0; c < 8; c++) x[c] = _mm512_loadu_si512((const void *)(q + 64 * c));
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + 32 * b)));
#ifdef X16_AVX512BW
        if (kind == K_Q8_0) {
            __mmask64 neg[8];
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_xor_si512(x[c], _mm512_set1_epi8((char)0x80));   /* the file's value */
                neg[c] = _mm512_movepi8_mask(v);
                x[c] = _mm512_abs_epi8(v);
            }
            X16_UNROLL for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[b].qs;
                acc[j] = x16_step(acc[j], dx, A[(size_t)j * nb + b].d, x16_dot32_q8(x, neg, yq));
            }
            continue;
        }
#endif
        X16_UNROLL for (int j = 0; j < C; j++) {
            const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[b].qs;
            const x16_act a = A[(size_t)j * nb + b];
            acc[j] = x16_step(acc[j], dx, a.d, x16_dot32(x, yq, a.base));
        }
    }
}

/* one pass of C activation rows over a group */
OXL_INLINE void x16_pass(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, float *S, int64_t lds, int nrows) {
    __m512 acc[X16_VG];
    x16_group(kind, C, nb, g, y, y_row, (const x16_act *)A, ahead, acc);
    x16_store(C, acc, S, lds, nrows);
}

/* the family's functions, the kind a constant in each */
static void x16_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *A) {
    x16_prepare_q8_0(x16_base_off(kind), nb, y, y_row, nc, (x16_act *)A);
}
static void x16_pass_q4_0(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                          int ahead, float *S, int64_t lds, int nrows) {
    (void)kind;
#define X16_PASS(C_) x16_pass(K_Q4_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X16_BY_C(C, X16_PASS)
#undef X16_PASS
}
static void x16_pass_q8_0(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                          int ahead, float *S, int64_t lds, int nrows) {
    (void)kind;
#define X16_PASS(C_) x16_pass(K_Q8_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X16_BY_C(C, X16_PASS)
#undef X16_PASS
}

/* S[j * lds + r] for nr rows from w (file rows, or with `packed` a repacked matrix's rows from a group start) and
 * nc activation rows; -1 if no memory for the per-thread buffer */
OXL_INLINE int x16_gemm_kind(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                             const char *y, size_t y_row, int nc) {
    const x16_family f = {kind, n / 32, (size_t)(n / 32) * sizeof(x16_act), x16_group_bytes(kind, n / 32), 1,
                          x16_prepare, x16_build, kind == K_Q4_0 ? x16_pass_q4_0 : x16_pass_q8_0};
    return x16_gemm(&f, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void x16_vec_dot(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / 32;
    const size_t bx = kind_block_bytes(kind);
    const char *x = (const char *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const char *blk = x + (size_t)b * bx;
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256i u;
        if (kind == K_Q4_0) u = nibbles_32((const uint8_t *)blk + 2);
        else u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
        const int32_t isum = hsum_i32_8(x16_dpbusd256(_mm256_setzero_si256(), u, yq)) - x16_off(kind) * x16_sum_i8_32(y[b].qs);
        oxl_half dx;
        memcpy(&dx, blk, 2);
        const float d = fp16(dx) * fp16(y[b].d);
        acc = fmaf(d, (float)isum, acc);
    }
    *s = acc;
}

static void vec_dot_q4_0_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    x16_vec_dot(K_Q4_0, n, s, x, y);
}
static void vec_dot_q8_0_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    x16_vec_dot(K_Q8_0, n, s, x, y);
}

/* the file-layout products (x16_common.h's x16_gemm_file) */
static void gemm_q4_0_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x16_gemm_file(x16_gemm_kind, x16_vec_dot, K_Q4_0, n, S, lds, w, w_row, nr, y, y_row, nc);
}
static void gemm_q8_0_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x16_gemm_file(x16_gemm_kind, x16_vec_dot, K_Q8_0, n, S, lds, w, w_row, nr, y, y_row, nc);
}
/* the repacked products (rows from a group start); -1: no memory, the caller reads the file rows */
static int gemm_q4_0_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return x16_gemm_kind(K_Q4_0, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}
static int gemm_q8_0_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return x16_gemm_kind(K_Q8_0, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}

/* the repacked layout has the file's bytes per row; any width */
static int64_t q4_0_x16_row_size(int64_t cols) { return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)sizeof(block_q4_0) : -1; }
static int64_t q8_0_x16_row_size(int64_t cols) { return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)sizeof(block_q8_0) : -1; }

/* the repack (x16_common.h's x16_repack) */
static void repack_q4_0_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x16_repack(x16_build, K_Q4_0, (int)(cols / 32), (size_t)(cols / 32) * sizeof(block_q4_0), w, dst, rows);
}
static void repack_q8_0_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x16_repack(x16_build, K_Q8_0, (int)(cols / 32), (size_t)(cols / 32) * sizeof(block_q8_0), w, dst, rows);
}

/* Q4_0 and Q8_0 of this tier: vec_dot, the file-layout products (one row or many) and the repacked layout,
 * all in the order above */
void oxl_register_avx512vnni_x16(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_0].vec_dot = vec_dot_q4_0_x16;
    t->type[OXL_TYPE_Q4_0].gemm = gemm_q4_0_file_x16;
    t->type[OXL_TYPE_Q4_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q4_0].repacked = (oxl_repacked_layout){"q4_0_x16", q4_0_x16_row_size, repack_q4_0_x16, gemm_q4_0_x16};
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_x16;
    t->type[OXL_TYPE_Q8_0].gemm = gemm_q8_0_file_x16;
    t->type[OXL_TYPE_Q8_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q8_0].repacked = (oxl_repacked_layout){"q8_0_x16", q8_0_x16_row_size, repack_q8_0_x16, gemm_q8_0_x16};
}
