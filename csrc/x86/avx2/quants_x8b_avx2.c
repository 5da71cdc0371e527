/* Q4_1, Q5_0 and Q5_1 on the AVX2 tier: eight weight rows side by side, one int32 lane per row, as Q4_0 and
 * Q8_0 (quants_x8_avx2.c), through x8_common.h's x8_gemm.
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
 * fma rounded once: the AVX-512 VNNI tier's order (csrc/x86/avx512vnni/quants_x16b_vnni.c), so the two tiers
 * give the same floats. The activations are Q8_1 for the _1 types (sy_b = its fp16 s), Q8_0 for Q5_0; their
 * values |y| <= 127 (round(x / d), d = amax / 127; 128 below, to be safe). The two serial sums are
 * independent, so a pass runs the min terms' chain after the blocks' (the same fmas in the same order), which
 * keeps its accumulators out of the block loop's registers.
 *
 * AVX2 has no vpdpbusd: vpmaddubsw (the unsigned weight against four broadcast activation bytes, int16 pairs)
 * summed in int16, then vpmaddwd by ones to int32 lanes; exact while every int16 sum fits:
 *   Q4_1: q <= 15, a pair |.| <= 2 * 15 * 128 = 3840, the block's 8 vpmaddubsw (32 values) summed in int16
 *         |.| <= 30720: one vpmaddwd per block and activation row
 *   Q5_0, Q5_1: q <= 31, a pair |.| <= 2 * 31 * 128 = 7936, 4 vpmaddubsw summed |.| <= 31744: two int16 sums
 *         of 16 values each, two vpmaddwd per block and activation row
 *
 * Layout x8 (the repacked copy, or built per call from file rows into a per-thread buffer): a group of 8 rows,
 * nb blocks: nb blocks of quants, then nb blocks of scales (quants_x16b_vnni.c's layout with 8 rows a chunk).
 *   quants, 128 bytes (Q4_1) or 160 (Q5_0, Q5_1) a block: chunk c (0..3) at 32c holds row l's qs[4c..4c+3]
 *         at 4l (low nibbles: values 4c..4c+3, high nibbles: 16 + 4c..); Q5_0 / Q5_1 then 32 bytes of fifth
 *         bits: byte 4l + k holds row l's bits of values 4c + k in bit c and of 16 + 4c + k in bit 4 + c
 *         (c = 0..3), so that a chunk's fifth bits are one shift and a mask away
 *   scales, 16 bytes (Q5_0) or 32 (Q4_1, Q5_1) a block: row l's fp16 d at 2l, then row l's fp16 m at 16 + 2l
 * The group has the file's bytes of its rows. A repacked matrix is its whole groups of 8 rows in this form,
 * then its last rows % 8 rows as in the file; a product's row range starts at a multiple of 8 (forward_impl.h's
 * matmul_share aligns repacked ranges to 16). */
#include <immintrin.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x8_common.h"

static inline int x8b_has_min(int kind) { return kind != K_Q5_0; }
static inline int x8b_has_qh(int kind) { return kind != K_Q4_1; }
static inline int x8b_off(int kind) { return kind == K_Q5_0 ? 16 : 0; }
static inline size_t x8b_qbytes(int kind) { return 128 + 32 * (size_t)x8b_has_qh(kind); }
static inline size_t x8b_sbytes(int kind) { return 16 + 16 * (size_t)x8b_has_min(kind); }
/* where a file block's fields sit: d at 0, m at 2 (the _1 types), then qh, then qs */
static inline size_t x8b_qh_at(int kind) { return kind == K_Q5_0 ? 2 : 4; }
static inline size_t x8b_qs_at(int kind) { return kind == K_Q4_1 ? 4 : kind == K_Q5_0 ? 6 : 8; }

/* per activation block: its scale, where its int32 sums start (-off * sum(y)), and (Q8_1) its s */
typedef struct {
    float d;
    int32_t base;
    float s;
} x8b_act;

static inline const int8_t *x8b_act_qs(int kind, const char *y_row, int b) {
    return x8b_has_min(kind) ? ((const block_q8_1 *)(const void *)y_row)[b].qs
                             : ((const block_q8_0 *)(const void *)y_row)[b].qs;
}

/* the exact sum of 32 int8 values */
static inline int32_t x8b_sum_i8_32(const int8_t *qs) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)qs);
    return hsum_i32_8(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
}

static void x8b_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *vA) {
    x8b_act *A = (x8b_act *)vA;
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            const char *yr = y + (size_t)j * y_row;
            float d, s;
            (void)act_block(kind, yr, b, &d, &s);
            const int32_t base = x8b_off(kind) ? -x8b_off(kind) * x8b_sum_i8_32(x8b_act_qs(kind, yr, b)) : 0;
            A[(size_t)j * nb + b] = (x8b_act){d, base, s};
        }
}

/* 8 rows' qh (one dword a row) in the x8 form: byte k of a dword holds the bits 4i + k (i = 0..7) in bits i */
OXL_INLINE __m256i x8b_spread_qh(__m256i h) {
    __m256i out = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_and_si256(_mm256_srli_epi32(h, k), _mm256_set1_epi32(0x11111111));   /* bit i at 4i */
        v = _mm256_and_si256(_mm256_or_si256(v, _mm256_srli_epi32(v, 3)), _mm256_set1_epi32(0x03030303));
        v = _mm256_and_si256(_mm256_or_si256(v, _mm256_srli_epi32(v, 6)), _mm256_set1_epi32(0x000F000F));
        v = _mm256_and_si256(_mm256_or_si256(v, _mm256_srli_epi32(v, 12)), _mm256_set1_epi32(0xFF));
        out = _mm256_or_si256(out, _mm256_slli_epi32(v, 8 * k));
    }
    return out;
}

/* Up to 8 file rows (w_row bytes apart) in the x8 form; missing rows are zero, scales too. The rows' qs by
 * x8_rows_dwords, their first dword (d, then m or the low half of qh) and qh by masked gathers (one scalar
 * copy a row and field, then a vector load, cost a store-forwarding stall a block: the file-layout one-row
 * product ran at 60% of this). */
static void x8b_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = kind_block_bytes(kind), qb = x8b_qbytes(kind), sb = x8b_sbytes(kind);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nrows), lane);
    const __m256i rowoff = _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)w_row));   /* 8 w_row fits an int32 */
    /* per 128-bit lane: the dwords' low halves to bytes 0..7, their high halves to 8..15 */
    const __m256i halves = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    uint8_t *sc = dst + (size_t)nb * qb;
    for (int b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * bx;
        uint8_t *q = dst + (size_t)b * qb, *s = sc + (size_t)b * sb;
        __m256i T[4];
        x8_rows_dwords(blk + x8b_qs_at(kind), w_row, nrows, T);
        for (int c = 0; c < 4; c++) _mm256_storeu_si256((__m256i *)(void *)(q + 32 * c), T[c]);
        /* the 8 d, then the 8 m (the dwords' high halves; Q5_0's are qh's, not stored) */
        const __m256i head = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)blk,
                                                         rowoff, live, 1);
        const __m256i dm = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(head, halves), 0xD8);
        if (x8b_has_min(kind)) _mm256_storeu_si256((__m256i *)(void *)s, dm);
        else _mm_storeu_si128((__m128i *)(void *)s, _mm256_castsi256_si128(dm));
        if (x8b_has_qh(kind)) {
            const __m256i h = _mm256_mask_i32gather_epi32(
                _mm256_setzero_si256(), (const int *)(const void *)(blk + x8b_qh_at(kind)), rowoff, live, 1);
            _mm256_storeu_si256((__m256i *)(void *)(q + 128), x8b_spread_qh(h));
        }
    }
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void x8b_group(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                          const x8b_act *A, int ahead, __m256 *acc) {
    const size_t qb = x8b_qbytes(kind), sb = x8b_sbytes(kind);
    const uint8_t *sc = g + (size_t)nb * qb;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m5 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * qb;
        if (ahead) x8_ahead(g, qb + sb, b);   /* a block's share of the group's bytes */
        const int8_t *yq[X8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) yq[j] = x8b_act_qs(kind, y + (size_t)j * y_row, b);
        __m256i isum[X8_VG];
        if (!x8b_has_qh(kind)) {   /* Q4_1: the block's 8 products in one int16 sum */
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
            X8_UNROLL for (int j = 0; j < C; j++) isum[j] = _mm256_madd_epi16(s16[j], ones);
        } else {   /* Q5_0, Q5_1: chunks 0, 1 and then 2, 3 (16 values each) in their own int16 sums */
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(q + 128));
            X8_UNROLL for (int j = 0; j < C; j++) isum[j] = _mm256_set1_epi32(A[(size_t)j * nb + b].base);
            for (int c0 = 0; c0 < 4; c0 += 2) {
                __m256i s16[X8_VG];
                X8_UNROLL for (int j = 0; j < C; j++) s16[j] = _mm256_setzero_si256();
                for (int c = c0; c < c0 + 2; c++) {
                    /* bit c of a byte of h to bit 4 (left by 4 - c), bit 4 + c to bit 4 (right by c): the
                     * 16-bit shifts move no bit that the mask keeps across a byte */
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * c));
                    const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(h, 4 - c), m5));
                    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                       _mm256_and_si256(_mm256_srli_epi16(h, c), m5));
                    X8_UNROLL for (int j = 0; j < C; j++) {
                        s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(lo, x8_bcast4(yq[j] + 4 * c)));
                        s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(hi, x8_bcast4(yq[j] + 16 + 4 * c)));
                    }
                }
                X8_UNROLL for (int j = 0; j < C; j++) isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(s16[j], ones));
            }
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sc + (size_t)b * sb)));
        X8_UNROLL for (int j = 0; j < C; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(A[(size_t)j * nb + b].d)),
                                     _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
    if (!x8b_has_min(kind)) return;
    /* the min terms' chain, in block order */
    __m256 macc[X8_VG];
    X8_UNROLL for (int j = 0; j < C; j++) macc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256 mx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sc + (size_t)b * sb + 16)));
        X8_UNROLL for (int j = 0; j < C; j++) macc[j] = _mm256_fmadd_ps(mx, _mm256_set1_ps(A[(size_t)j * nb + b].s), macc[j]);
    }
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_add_ps(acc[j], macc[j]);
}

/* one pass of C activation rows over a group */
OXL_INLINE void x8b_pass(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, float *S, int64_t lds, int nrows) {
    __m256 acc[X8_VG];
    x8b_group(kind, C, nb, g, y, y_row, (const x8b_act *)A, ahead, acc);
    x8_store(C, acc, S, lds, nrows);
}

#define X8B_PASS_FN(name, K)                                                                                   \
    static void name(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,   \
                     int ahead, float *S, int64_t lds, int nrows) {                                          \
        (void)kind;                                                                                            \
        X8_BY_C(C, X8B_PASS_##K)                                                                               \
    }
#define X8B_PASS_Q4_1(C_) x8b_pass(K_Q4_1, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
#define X8B_PASS_Q5_0(C_) x8b_pass(K_Q5_0, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
#define X8B_PASS_Q5_1(C_) x8b_pass(K_Q5_1, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
X8B_PASS_FN(x8b_pass_q4_1, Q4_1)
X8B_PASS_FN(x8b_pass_q5_0, Q5_0)
X8B_PASS_FN(x8b_pass_q5_1, Q5_1)

/* S[j * lds + r] for nr rows from w (file rows, or with `packed` a repacked matrix's rows from a group start) and
 * nc activation rows; -1 if no memory for the per-thread buffer */
OXL_INLINE int x8b_gemm_kind(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                             const char *y, size_t y_row, int nc) {
    const int nb = n / 32;
    const x8_family f = {kind, nb, (size_t)nb * sizeof(x8b_act), (size_t)nb * (x8b_qbytes(kind) + x8b_sbytes(kind)),
                         1, x8b_prepare, x8b_build,
                         kind == K_Q4_1 ? x8b_pass_q4_1 : kind == K_Q5_0 ? x8b_pass_q5_0 : x8b_pass_q5_1};
    return x8_gemm(&f, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void x8b_vec_dot(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / 32;
    const size_t bx = kind_block_bytes(kind);
    const char *x = (const char *)vx, *y = (const char *)vy;
    const __m256i ones = _mm256_set1_epi16(1);
    float acc = 0.0f, macc = 0.0f;
    for (int b = 0; b < nb; b++) {
        float dx, mx = 0.0f, dy, sy;
        const __m256i u = tile_decode(kind, x + (size_t)b * bx, &dx, &mx);   /* the unsigned weight values */
        const __m256i yq = act_block(kind, y, b, &dy, &sy);
        /* a pair |.| <= 2 * 31 * 128: one vpmaddwd */
        int32_t isum = hsum_i32_8(_mm256_madd_epi16(_mm256_maddubs_epi16(u, yq), ones));
        if (x8b_off(kind)) isum -= x8b_off(kind) * x8b_sum_i8_32(x8b_act_qs(kind, y, b));
        acc = fmaf(dx * dy, (float)isum, acc);
        if (x8b_has_min(kind)) macc = fmaf(mx, sy, macc);
    }
    *s = x8b_has_min(kind) ? acc + macc : acc;
}

/* per type: vec_dot, the file-layout product (x8_common.h's x8_gemm_file), the repacked product (-1: no memory,
 * the caller reads the file rows), the repacked row size (the file's, any width) and the repack
 * (x8_common.h's x8_repack) */
#define X8B_TYPE(t, K)                                                                                           \
    static void vec_dot_##t##_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x,                    \
                                 const void *OXL_RESTRICT y) {                                                \
        x8b_vec_dot(K, n, s, x, y);                                                                            \
    }                                                                                                          \
    static void gemm_##t##_file_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,     \
                                   size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {  \
        x8_gemm_file(x8b_gemm_kind, x8b_vec_dot, K, n, S, lds, w, w_row, nr, y, y_row, nc);                    \
    }                                                                                                          \
    static int gemm_##t##_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,           \
                             size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {        \
        return x8b_gemm_kind(K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);         \
    }                                                                                                          \
    static int64_t t##_x8_row_size(int64_t cols) {                                                             \
        return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)kind_block_bytes(K) : -1;                     \
    }                                                                                                          \
    static void repack_##t##_x8(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows,             \
                                int64_t cols) {                                                               \
        x8_repack(x8b_build, K, (int)(cols / 32), (size_t)(cols / 32) * kind_block_bytes(K), w, dst, rows);    \
    }
X8B_TYPE(q4_1, K_Q4_1)
X8B_TYPE(q5_0, K_Q5_0)
X8B_TYPE(q5_1, K_Q5_1)

/* Q4_1, Q5_0 and Q5_1 of this tier: vec_dot, the file-layout products (one row or many) and the repacked
 * layout, all in the order above */
void oxl_register_avx2_x8b(oxl_kernel_table *t) {
#define X8B_REGISTER(T, name)                                                                                  \
    t->type[T].vec_dot = vec_dot_##name##_x8;                                                                  \
    t->type[T].gemm = gemm_##name##_file_x8;                                                                   \
    t->type[T].gemm_one_row = 1;                                                                               \
    t->type[T].repacked =                                                                                      \
        (oxl_repacked_layout){#name "_x8", name##_x8_row_size, repack_##name##_x8, gemm_##name##_x8};
    X8B_REGISTER(OXL_TYPE_Q4_1, q4_1)
    X8B_REGISTER(OXL_TYPE_Q5_0, q5_0)
    X8B_REGISTER(OXL_TYPE_Q5_1, q5_1)
#undef X8B_REGISTER
}
