/* Q4_1, Q5_0 and Q5_1 on the AVX-512 VNNI tier: sixteen weight rows side by side, one int32 lane per row, as
 * Q4_0 and Q8_0 (quants_x16_vnni.c), through x16_common.h's x16_gemm.
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row, batched
 * and verify products, the repacked prefill tiles), for each output:
 *
 *     out = +0, mout = +0;  for each 32-value block b in order:
 *         out  = fma(dx_b * dy_b, (float)isum_b, out)
 *         mout = fma(mx_b, sy_b, mout)                     (Q4_1, Q5_1: the min term)
 *     result = out + mout   (Q4_1, Q5_1);   out   (Q5_0)
 *
 * isum_b the exact int32 dot of block b's 32 weight values (Q4_1: the nibble q, Q5_1: q with its fifth bit,
 * Q5_0: q + 16 with the -16 sum(y) taken off) and activation values, dx_b * dy_b rounded to float once, each
 * fma rounded once: ggml's per-block order (its q4_1 vec_dot adds d * isum + m * s per block), with the min
 * terms in their own serial sum so that the two chains of fmas run side by side. The activations are Q8_1
 * for the _1 types (sy_b = its fp16 s = dy * sum(y)), Q8_0 for Q5_0.
 *
 * Layout x16 (the repacked copy, or built per call from file rows into a per-thread buffer): a group of 16
 * rows, nb blocks: nb blocks of quants, then nb blocks of scales.
 *   quants, 256 bytes (Q4_1) or 320 (Q5_0, Q5_1) a block: chunk c (0..3) at 64c holds row l's qs[4c..4c+3]
 *         at 4l (low nibbles: values 4c..4c+3, high nibbles: 16 + 4c..); Q5_0 / Q5_1 then 64 bytes of fifth
 *         bits: byte 4l + k holds row l's bits of values 4c + k in bit c and of 16 + 4c + k in bit 4 + c
 *         (c = 0..3), so that a chunk's fifth bits are one shift and a mask away
 *   scales, 32 bytes (Q5_0) or 64 (Q4_1, Q5_1) a block: row l's fp16 d at 2l, then row l's fp16 m at 32 + 2l
 * The group has the file's bytes of its rows. A repacked matrix is its whole groups of 16 rows in this form,
 * then its last rows % 16 rows as in the file; a product's row range starts at a multiple of 16. */
#include <immintrin.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x16_common.h"

static inline int x16b_has_min(int kind) { return kind != K_Q5_0; }
static inline int x16b_has_qh(int kind) { return kind != K_Q4_1; }
static inline int x16b_off(int kind) { return kind == K_Q5_0 ? 16 : 0; }
static inline size_t x16b_qbytes(int kind) { return 256 + 64 * (size_t)x16b_has_qh(kind); }
static inline size_t x16b_sbytes(int kind) { return 32 + 32 * (size_t)x16b_has_min(kind); }
/* where a file block's fields sit: d at 0, m at 2 (the _1 types), then qh, then qs */
static inline size_t x16b_qh_at(int kind) { return kind == K_Q5_0 ? 2 : 4; }
static inline size_t x16b_qs_at(int kind) { return kind == K_Q4_1 ? 4 : kind == K_Q5_0 ? 6 : 8; }

/* per activation block: its scale, where its int32 sums start (-off * sum(y)), and (Q8_1) its s */
typedef struct {
    float d;
    int32_t base;
    float s;
} x16b_act;

static inline const int8_t *x16b_act_qs(int kind, const char *y_row, int b) {
    return x16b_has_min(kind) ? ((const block_q8_1 *)(const void *)y_row)[b].qs
                              : ((const block_q8_0 *)(const void *)y_row)[b].qs;
}

static void x16b_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *vA) {
    x16b_act *A = (x16b_act *)vA;
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            const char *yr = y + (size_t)j * y_row;
            float d, s;
            (void)act_block(kind, yr, b, &d, &s);
            A[(size_t)j * nb + b] = (x16b_act){d, -x16b_off(kind) * x16_sum_i8_32(x16b_act_qs(kind, yr, b)), s};
        }
}

/* 16 rows' qh (one dword a row) in the x16 form: byte k of a dword holds the bits 4i + k (i = 0..7) in bits i */
OXL_INLINE __m512i x16b_spread_qh(__m512i h) {
    __m512i out = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) {
        __m512i v = _mm512_and_si512(_mm512_srli_epi32(h, k), _mm512_set1_epi32(0x11111111));   /* bit i at 4i */
        v = _mm512_and_si512(_mm512_or_si512(v, _mm512_srli_epi32(v, 3)), _mm512_set1_epi32(0x03030303));
        v = _mm512_and_si512(_mm512_or_si512(v, _mm512_srli_epi32(v, 6)), _mm512_set1_epi32(0x000F000F));
        v = _mm512_and_si512(_mm512_or_si512(v, _mm512_srli_epi32(v, 12)), _mm512_set1_epi32(0xFF));
        out = _mm512_or_si512(out, _mm512_slli_epi32(v, 8 * k));
    }
    return out;
}

/* Up to 16 file rows (w_row bytes apart) in the x16 form; missing rows are zero, scales too. The rows' qs by
 * x16_rows_dwords, their first dword (d, then m or the low half of qh) and qh by gathers. */
static void x16b_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = kind_block_bytes(kind), qb = x16b_qbytes(kind), sb = x16b_sbytes(kind);
    const __mmask16 live = (__mmask16)((1u << nrows) - 1);
    const __m512i rowoff = x16_rowoff(w_row, nrows);   /* missing rows read row 0, then are zeroed */
    const __m512i halves = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                            30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    uint8_t *sc = dst + (size_t)nb * qb;
    for (int b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * bx;
        uint8_t *q = dst + (size_t)b * qb, *s = sc + (size_t)b * sb;
        __m512i T[4];
        x16_rows_dwords(blk + x16b_qs_at(kind), w_row, nrows, T);
        for (int c = 0; c < 4; c++) _mm512_storeu_si512((void *)(q + 64 * c), T[c]);
        /* the 16 d (the dwords' low halves), then the 16 m (their high halves) */
        const __m512i head = _mm512_permutexvar_epi16(
            halves, _mm512_maskz_mov_epi32(live, _mm512_i32gather_epi32(rowoff, (const void *)blk, 1)));
        if (x16b_has_min(kind)) _mm512_storeu_si512((void *)s, head);
        else _mm256_storeu_si256((__m256i *)(void *)s, _mm512_castsi512_si256(head));
        if (x16b_has_qh(kind)) {
            const __m512i h = _mm512_maskz_mov_epi32(live, _mm512_i32gather_epi32(rowoff, (const void *)(blk + x16b_qh_at(kind)), 1));
            _mm512_storeu_si512((void *)(q + 256), x16b_spread_qh(h));
        }
    }
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void x16b_group(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                           const x16b_act *A, int ahead, __m512 *acc) {
    const size_t qb = x16b_qbytes(kind), sb = x16b_sbytes(kind), bpb = qb + sb;
    const uint8_t *sc = g + (size_t)nb * qb;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m5 = _mm512_set1_epi8(0x10);
    __m512 macc[X16_VG];
    X16_UNROLL for (int j = 0; j < C; j++) acc[j] = macc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * qb;
        if (ahead) x16_ahead(g, bpb, b);   /* a block's share of the group's bytes */
        __m512i x[8];
        for (int c = 0; c < 4; c++) {
            const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * c));
            x[c] = _mm512_and_si512(v, m4);
            x[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        if (x16b_has_qh(kind)) {
            /* bit c of a byte to bit 4 (left by 4 - c), bit 4 + c to bit 4 (right by c): inside the byte */
            const __m512i h = _mm512_loadu_si512((const void *)(q + 256));
            x[0] = _mm512_or_si512(x[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m5));
            x[1] = _mm512_or_si512(x[1], _mm512_and_si512(_mm512_slli_epi16(h, 3), m5));
            x[2] = _mm512_or_si512(x[2], _mm512_and_si512(_mm512_slli_epi16(h, 2), m5));
            x[3] = _mm512_or_si512(x[3], _mm512_and_si512(_mm512_slli_epi16(h, 1), m5));
            x[4] = _mm512_or_si512(x[4], _mm512_and_si512(h, m5));
            x[5] = _mm512_or_si512(x[5], _mm512_and_si512(_mm512_srli_epi16(h, 1), m5));
            x[6] = _mm512_or_si512(x[6], _mm512_and_si512(_mm512_srli_epi16(h, 2), m5));
            x[7] = _mm512_or_si512(x[7], _mm512_and_si512(_mm512_srli_epi16(h, 3), m5));
        }
        const uint8_t *s = sc + (size_t)b * sb;
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)s));
        if (x16b_has_min(kind)) {
            const __m512 mx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(s + 32)));
            X16_UNROLL for (int j = 0; j < C; j++) {
                const x16b_act a = A[(size_t)j * nb + b];
                acc[j] = x16_step(acc[j], dx, a.d, x16_dot32(x, x16b_act_qs(kind, y + (size_t)j * y_row, b), a.base));
                macc[j] = _mm512_fmadd_ps(mx, _mm512_set1_ps(a.s), macc[j]);
            }
        } else {
            X16_UNROLL for (int j = 0; j < C; j++) {
                const x16b_act a = A[(size_t)j * nb + b];
                acc[j] = x16_step(acc[j], dx, a.d, x16_dot32(x, x16b_act_qs(kind, y + (size_t)j * y_row, b), a.base));
            }
        }
    }
    if (x16b_has_min(kind)) X16_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm512_add_ps(acc[j], macc[j]);
}

/* one pass of C activation rows over a group */
OXL_INLINE void x16b_pass(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                          int ahead, float *S, int64_t lds, int nrows) {
    __m512 acc[X16_VG];
    x16b_group(kind, C, nb, g, y, y_row, (const x16b_act *)A, ahead, acc);
    x16_store(C, acc, S, lds, nrows);
}

#define X16B_PASS_FN(name, K)                                                                                  \
    static void name(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,   \
                     int ahead, float *S, int64_t lds, int nrows) {                                          \
        (void)kind;                                                                                            \
        X16_BY_C(C, X16B_PASS_##K)                                                                             \
    }
#define X16B_PASS_Q4_1(C_) x16b_pass(K_Q4_1, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
#define X16B_PASS_Q5_0(C_) x16b_pass(K_Q5_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
#define X16B_PASS_Q5_1(C_) x16b_pass(K_Q5_1, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
X16B_PASS_FN(x16b_pass_q4_1, Q4_1)
X16B_PASS_FN(x16b_pass_q5_0, Q5_0)
X16B_PASS_FN(x16b_pass_q5_1, Q5_1)

/* S[j * lds + r] for nr rows from w (file rows, or with `packed` a repacked matrix's rows from a group start) and
 * nc activation rows; -1 if no memory for the per-thread buffer */
OXL_INLINE int x16b_gemm_kind(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                              const char *y, size_t y_row, int nc) {
    const int nb = n / 32;
    const x16_family f = {kind, nb, (size_t)nb * sizeof(x16b_act), (size_t)nb * (x16b_qbytes(kind) + x16b_sbytes(kind)),
                          1, x16b_prepare, x16b_build,
                          kind == K_Q4_1 ? x16b_pass_q4_1 : kind == K_Q5_0 ? x16b_pass_q5_0 : x16b_pass_q5_1};
    return x16_gemm(&f, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void x16b_vec_dot(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / 32;
    const size_t bx = kind_block_bytes(kind);
    const char *x = (const char *)vx, *y = (const char *)vy;
    float acc = 0.0f, macc = 0.0f;
    for (int b = 0; b < nb; b++) {
        float dx, mx = 0.0f, dy, sy;
        const __m256i u = tile_decode(kind, x + (size_t)b * bx, &dx, &mx);   /* the unsigned weight values */
        const __m256i yq = act_block(kind, y, b, &dy, &sy);
        const int32_t isum = hsum_i32_8(x16_dpbusd256(_mm256_setzero_si256(), u, yq)) -
                             x16b_off(kind) * x16_sum_i8_32(x16b_act_qs(kind, y, b));
        acc = fmaf(dx * dy, (float)isum, acc);
        if (x16b_has_min(kind)) macc = fmaf(mx, sy, macc);
    }
    *s = x16b_has_min(kind) ? acc + macc : acc;
}

/* per type: vec_dot, the file-layout product (x16_common.h's x16_gemm_file), the repacked product (-1: no
 * memory, the caller reads the file rows), the repacked row size (the file's, any width) and the repack
 * (x16_common.h's x16_repack) */
#define X16B_TYPE(t, K)                                                                                          \
    static void vec_dot_##t##_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x,                   \
                                  const void *OXL_RESTRICT y) {                                               \
        x16b_vec_dot(K, n, s, x, y);                                                                           \
    }                                                                                                          \
    static void gemm_##t##_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,    \
                                    size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        x16_gemm_file(x16b_gemm_kind, x16b_vec_dot, K, n, S, lds, w, w_row, nr, y, y_row, nc);                \
    }                                                                                                          \
    static int gemm_##t##_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,          \
                              size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {       \
        return x16b_gemm_kind(K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);        \
    }                                                                                                          \
    static int64_t t##_x16_row_size(int64_t cols) {                                                            \
        return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)kind_block_bytes(K) : -1;                     \
    }                                                                                                          \
    static void repack_##t##_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows,            \
                                 int64_t cols) {                                                              \
        x16_repack(x16b_build, K, (int)(cols / 32), (size_t)(cols / 32) * kind_block_bytes(K), w, dst, rows); \
    }
X16B_TYPE(q4_1, K_Q4_1)
X16B_TYPE(q5_0, K_Q5_0)
X16B_TYPE(q5_1, K_Q5_1)

/* Q4_1, Q5_0 and Q5_1 of this tier: vec_dot, the file-layout products (one row or many) and the repacked
 * layout, all in the order above */
void oxl_register_avx512vnni_x16b(oxl_kernel_table *t) {
#define X16B_REGISTER(T, name)                                                                                 \
    t->type[T].vec_dot = vec_dot_##name##_x16;                                                                 \
    t->type[T].gemm = gemm_##name##_file_x16;                                                                  \
    t->type[T].gemm_one_row = 1;                                                                               \
    t->type[T].repacked =                                                                                      \
        (oxl_repacked_layout){#name "_x16", name##_x16_row_size, repack_##name##_x16, gemm_##name##_x16};
    X16B_REGISTER(OXL_TYPE_Q4_1, q4_1)
    X16B_REGISTER(OXL_TYPE_Q5_0, q5_0)
    X16B_REGISTER(OXL_TYPE_Q5_1, q5_1)
#undef X16B_REGISTER
}
