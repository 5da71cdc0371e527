/* AVX-512 VNNI kernels for the 1-bit and ternary types: Q1_0 sixteen rows per register (decode, batches,
 * prefill; Bonsai's 1-bit type), and TQ2_0 against Q8_K (below).
 *
 * Q1_0's order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row,
 * batched and verify products, the repacked layout), for each output:
 *
 *     out = +0;  for each 32-value activation block k in order:  out = fma(dx_{k/4} * dy_k, (float)isum_k, out)
 *
 * isum_k the exact int32 sum over the block's 32 values of (bit ? y : -y), dx * dy rounded to float once:
 * the per-block order of quants_x16_vnni.c. A register holds sixteen weight rows, one int32 lane each, so a
 * 32-value block of sixteen rows is eight vpdpbusd (4 values x 16 rows each) and one float step, where the
 * lane-per-value order this tier followed before (the AVX-512 tier's, two blocks of one row per register)
 * cost a convert, a multiply and an fma per 64 weights: at 1.125 bits a weight that float work, not the
 * memory, bounded the decode.
 *
 * Layout q1_0_x16 (the repacked copy, or built per call from file rows into a per-thread buffer):
 *   a group of 16 rows, nb blocks of 128 values: nb x 256 bytes of bits, then nb x 16 fp16 scales (row l's d
 *   at 2l of block b's 32 bytes). Block b's 64-bit word c (0..31, at 8c) holds values 4c..4c+3 of the 16
 *   rows: bit 4l + v = row l's bit of value 4c + v. That word is the byte mask of the 64 bytes (4 per row)
 *   vpdpbusd takes: vmovdqu8 with zero-masking of a vector of 2s gives the weight 2b (0 or 2) per byte as
 *   the unsigned operand, the activation's four bytes the broadcast signed one, and each block's sum starts
 *   at -sum(y): sum((2b - 1) y) = isum. A repacked matrix is its whole groups of 16 rows in this form, then
 *   its last rows % 16 rows as in the file: the file's size. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")   /* the ternary float steps as the scalar tier rounds them */
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../quants_lowbit_x86.h"
#include "x16_common.h"

#define Q1X_BITS 256             /* Q1_0: bytes of bits of one block of a group */
#define Q1X_AHEAD 2048           /* Q1_0: prefetch distance in a repacked matrix, bytes */

static inline size_t q1x_group_bytes(int nb) { return (size_t)nb * (Q1X_BITS + 2 * X16); }

/* Up to 16 file rows (w_row bytes apart) in the q1_0_x16 form; missing rows are zero, scales too.
 * Four blocks at a time: row l's 4 x 16 bytes of bits as 8 64-bit lanes (lane 2i + h: block i's bytes
 * 8h..8h+7, i.e. the 16 nibbles of chunks 16h..16h+15), picked out of the row's 72 bytes by vpermt2w; the 16
 * rows' vectors are then 8 lanes of 16 x 16 nibble matrices, transposed together by delta swaps (halves of 8,
 * 4, 2, 1 nibbles), after which vector c holds word 16h + c of block i in lane 2i + h. A decode reads the
 * file rows through this when the matrix was not repacked: about as much work as the product itself.
 * (kind: unused, x16_family's build signature.) */
static void q1x_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    (void)kind;
    uint16_t *sc = (uint16_t *)(void *)(dst + (size_t)nb * Q1X_BITS);
    uint16_t pick[32];
    for (int q = 0; q < 8; q++)
        for (int j = 0; j < 4; j++) pick[4 * q + j] = (uint16_t)(9 * (q / 2) + 1 + 4 * (q % 2) + j);
    const __m512i idx = _mm512_loadu_si512((const void *)pick);
    static const uint64_t keep[4] = {0x00000000FFFFFFFFull, 0x0000FFFF0000FFFFull, 0x00FF00FF00FF00FFull,
                                     0x0F0F0F0F0F0F0F0Full};
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int nbk = OXL_MIN(4, nb - b0);
        __m512i v[X16];
        for (int l = 0; l < X16; l++) {
            if (l >= nrows) {
                v[l] = _mm512_setzero_si512();
                continue;
            }
            const char *p = w + (size_t)l * w_row + (size_t)b0 * sizeof(block_q1_0);
            /* 128 bytes read where 8 blocks (144) remain in the row; near its end the blocks that exist are
             * copied out first: never a read past the row */
            uint8_t tail[128];
            if (b0 + 8 > nb) {
                memset(tail, 0, sizeof(tail));
                memcpy(tail, p, (size_t)nbk * sizeof(block_q1_0));
                p = (const char *)tail;
            }
            v[l] = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), idx,
                                             _mm512_loadu_si512((const void *)(p + 64)));
        }
        for (int st = 0; st < 4; st++) {
            const int s = 8 >> st;
            const __m512i k = _mm512_set1_epi64((long long)keep[st]);
            for (int i = 0; i < X16; i++) {
                if (i & s) continue;
                const __m512i t = _mm512_and_si512(_mm512_xor_si512(_mm512_srli_epi64(v[i], 4 * s), v[i + s]), k);
                v[i + s] = _mm512_xor_si512(v[i + s], t);
                v[i] = _mm512_xor_si512(v[i], _mm512_slli_epi64(t, 4 * s));
            }
        }
        uint64_t word[X16][8];
        for (int c = 0; c < X16; c++) _mm512_storeu_si512((void *)word[c], v[c]);
        for (int i = 0; i < nbk; i++) {
            uint8_t *out = dst + (size_t)(b0 + i) * Q1X_BITS;
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < X16; c++) memcpy(out + 8 * (16 * h + c), &word[c][2 * i + h], 8);
            for (int l = 0; l < X16; l++) {
                if (l < nrows) memcpy(&sc[(b0 + i) * X16 + l], w + (size_t)l * w_row + (size_t)(b0 + i) * sizeof(block_q1_0), 2);
                else sc[(b0 + i) * X16 + l] = 0;
            }
        }
    }
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1; A: 4 nb activation
 * blocks a row */
OXL_INLINE void q1x_group(const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const x16_act *A,
                          int ahead, __m512 *acc) {
    const uint8_t *sc = g + (size_t)nb * Q1X_BITS;
    const __m512i two = _mm512_set1_epi8(2);
    X16_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * Q1X_BITS;
        if (ahead) {   /* a repacked matrix streams group after group: the bits `ahead` on, the scales too */
            for (int c = 0; c < 4; c++) __builtin_prefetch(q + ahead + 64 * c, 0, 3);
            if (b % 2 == 0) __builtin_prefetch(sc + 32 * b + ahead, 0, 3);
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + 32 * b)));
        for (int k = 0; k < 4; k++) {
            __m512i x[8];
            for (int c = 0; c < 8; c++) {
                uint64_t m;
                memcpy(&m, q + 64 * k + 8 * c, 8);
                x[c] = _mm512_maskz_mov_epi8((__mmask64)m, two);
            }
            X16_UNROLL for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[4 * b + k].qs;
                const x16_act a = A[(size_t)j * 4 * nb + 4 * b + k];
                acc[j] = x16_step(acc[j], dx, a.d, x16_dot32(x, yq, a.base));
            }
        }
    }
}

/* the x16_family functions: the activations' sums start at -sum(y) (weights 2b = (2b - 1) + 1), 4 blocks of
 * 32 activation values per weight block */
static void q1x_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *A) {
    (void)kind;
    x16_prepare_q8_0(1, 4 * nb, y, y_row, nc, (x16_act *)A);
}
OXL_INLINE void q1x_group_store(const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                                int ahead, float *S, int64_t lds, int nrows) {
    __m512 acc[X16_VG];
    q1x_group(C, nb, g, y, y_row, (const x16_act *)A, ahead, acc);
    x16_store(C, acc, S, lds, nrows);
}
static void q1x_pass(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A, int ahead,
                     float *S, int64_t lds, int nrows) {
    (void)kind;
#define Q1X_PASS(C_) q1x_group_store(C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X16_BY_C(C, Q1X_PASS)
#undef Q1X_PASS
}

/* S[j * lds + r] for nr rows from w (file rows, or with `packed` a repacked matrix's rows from a group start) and
 * nc activation rows; -1 if no memory for the per-thread buffer */
static int q1x_gemm(int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr, const char *y,
                    size_t y_row, int nc) {
    const int nb = n / QK1_0;
    const x16_family f = {0, nb, (size_t)4 * nb * sizeof(x16_act), q1x_group_bytes(nb), Q1X_AHEAD,
                          q1x_prepare, q1x_build, q1x_pass};
    return x16_gemm(&f, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* one row, one activation row: the same steps, one output */
static void vec_dot_q1_0_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int i = 0; i < n / QK1_0; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        for (int k = 0; k < 4; k++) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[4 * i + k].qs);
            const int32_t isum = -lb_hsum_i32_8(q1_0_dot(q1_0_neg_signs(x[i].qs + 4 * k), qy));   /* exact */
            acc = fmaf(dx * _cvtsh_ss(y[4 * i + k].d), (float)isum, acc);
        }
    }
    *s = acc;
}

/* the file-layout product; without memory for the per-thread buffer, one output at a time (the same floats) */
static void gemm_q1_0_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    if (!q1x_gemm(0, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc)) return;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++)
            vec_dot_q1_0_x16(n, &S[j * lds + r], (const char *)w + (size_t)r * w_row, (const char *)y + (size_t)j * y_row);
}

/* the repacked product (rows from a group start); -1: no memory, the caller reads the file rows */
static int gemm_q1_0_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return q1x_gemm(1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}

/* the repacked layout has the file's bytes per row */
static int64_t q1_0_x16_row_size(int64_t cols) {
    return cols > 0 && cols % QK1_0 == 0 ? cols / QK1_0 * (int64_t)sizeof(block_q1_0) : -1;
}

/* whole groups of 16 rows repacked, the last rows % 16 copied; per thread over a row range that starts at a
 * group boundary of the whole matrix (matmul.c's oxl_repack splits in multiples of OXL_REPACK_ROW_ALIGN) */
static void repack_q1_0_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    const int nb = (int)(cols / QK1_0);
    const size_t row = (size_t)nb * sizeof(block_q1_0);
    int64_t r = 0;
    for (; r + X16 <= rows; r += X16) q1x_build(0, (const char *)w + r * row, row, X16, nb, (uint8_t *)dst + r * row);
    memcpy((char *)dst + r * row, (const char *)w + r * row, (size_t)(rows - r) * row);
}

/* ---- TQ2_0: the 2-bit ternary type by vpdpbusd ------------------------------------------------------
 * A block's 256 trits (0, 1, 2) as 4 registers of 64 in value order (register k: values 64 k .. 64 k + 63),
 * so activation register k is the plain load of y->qs + 64 k. sum(t y) by vpdpbusd (trits unsigned,
 * activations signed; exact), minus sum(y) from the bsums: the one exact integer per super-block of the
 * scalar tier, and its float step sum += (float)sumi * (d_x * d_y). Every output is the scalar float.
 * (TQ1_0 keeps the AVX2 kernel: its base-3 unpack is 256-bit work, and joining its runs into 512-bit
 * registers made it 1.5x slower, 0.49 against 0.33 ms for 2048 x 4096.) */

/* TQ2_0: value 128 c + 32 l + m is bits 2 l of qs[32 c + m]; register k holds runs (c, l) = (k / 2, 2 (k % 2))
 * and (k / 2, 2 (k % 2) + 1): the 32 bytes of chunk c in both halves, shifted by 2 l per half */
static inline void tq2_0_decode_512(const block_tq2_0 *b, __m512i t[4]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    for (int c = 0; c < 2; c++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * c)));
        t[2 * c] = _mm512_and_si512(_mm512_srlv_epi16(q, sh01), m3);
        t[2 * c + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, sh23), m3);
    }
}

static inline int tq_block_dot_vnni(const __m512i t[4], const block_q8_K *y) {
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) acc = _mm512_dpbusd_epi32(acc, t[k], _mm512_loadu_si512((const void *)(y->qs + 64 * k)));
    const __m256i ys = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
    return _mm512_reduce_add_epi32(_mm512_sub_epi32(acc, _mm512_inserti64x4(_mm512_setzero_si512(), ys, 0)));
}

/* the 16 int32 lanes of each of a0..a3 summed: {sum a0, sum a1, sum a2, sum a3} (exact, wrapping as int32) */
static inline __m128i tq_reduce4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    const __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* TQ2_0's vec_dot: the integer of four super-blocks reduced together (one transpose-and-add instead of four
 * horizontal sums), then the scalar float steps in block order */
static void vec_dot_tq2_0_q8_K_x4(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_tq2_0 *x = (const block_tq2_0 *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    float sum = 0.0f;
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        __m512i a[4];
        for (int k = 0; k < 4; k++) {
            __m512i t[4];
            tq2_0_decode_512(&x[i + k], t);
            __m512i acc = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++)
                acc = _mm512_dpbusd_epi32(acc, t[c], _mm512_loadu_si512((const void *)(y[i + k].qs + 64 * c)));
            const __m256i ys = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i + k].bsums), _mm256_set1_epi16(1));
            a[k] = _mm512_sub_epi32(acc, _mm512_inserti64x4(_mm512_setzero_si512(), ys, 0));
        }
        int32_t isum[4];
        _mm_storeu_si128((__m128i *)isum, tq_reduce4(a[0], a[1], a[2], a[3]));
        for (int k = 0; k < 4; k++) sum += (float)isum[k] * (_cvtsh_ss(x[i + k].d) * y[i + k].d);
    }
    for (; i < nb; i++) {
        __m512i t[4];
        tq2_0_decode_512(&x[i], t);
        sum += (float)tq_block_dot_vnni(t, &y[i]) * (_cvtsh_ss(x[i].d) * y[i].d);
    }
    *s = sum;
}

/* TQ2_0's multi-row product sixteen rows per register, read from the file rows (the same floats as the
 * vec_dot above: one exact integer per super-block, then sum = sum + (float)isum * (dx * dy), the scalar
 * steps, here for 16 rows at once). Lane l of a vector is row l: dword k (0..15) of a block's qs, bytes
 * 32 c + 4 j .. + 3 with k = 8 c + j, holds values 128 c + 32 l' + 4 j + (0..3) at bit pairs 2 l', so each
 * of the 16 dwords gives four vpdpbusd operands ((T >> 2 l') & 3, trits 0..2) against the activation's four
 * bytes broadcast; the sums start at -sum(y) (from the bsums, once per call). The 16 rows' dwords come by
 * x16_rows_dwords (an in-lane 4 x 4 dword transpose), a 16-byte piece at a time, the 16 fp16 scales by one
 * gather (4 bytes from qs[62], the scale in the upper half: never past the block). */
OXL_INLINE void tqx_group(const int C, int nb, const char *w, size_t w_row, int nrows, const char *y, size_t y_row,
                          const x16_act *A, float *S, int64_t lds) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i rowoff = x16_rowoff(w_row, nrows);
    uint16_t hi[32];
    for (int i = 0; i < 32; i++) hi[i] = (uint16_t)(2 * (i % 16) + 1);   /* the upper half of dword i */
    const __m512i pick_hi = _mm512_loadu_si512((const void *)hi);
    __m512 acc[X16_VG];
    for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const char *blk = w + (size_t)b * sizeof(block_tq2_0);
        const __m512i dh = _mm512_i32gather_epi32(rowoff, blk + offsetof(block_tq2_0, d) - 2, 1);
        const __m512 dx = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(dh, pick_hi, dh)));
        __m512i s[X16_VG];
        for (int j = 0; j < C; j++) s[j] = _mm512_set1_epi32(A[(size_t)j * nb + b].base);
        for (int p = 0; p < 4; p++) {   /* qs bytes 16 p .. 16 p + 15: dwords k = 4 p + c */
            __m512i T[4];
            x16_rows_dwords(blk + 16 * p, w_row, nrows, T);
            for (int c4 = 0; c4 < 4; c4++) {
                const int k = 4 * p + c4, off = 128 * (k / 8) + 4 * (k % 8);
                const __m512i x[4] = {_mm512_and_si512(T[c4], m3), _mm512_and_si512(_mm512_srli_epi32(T[c4], 2), m3),
                                      _mm512_and_si512(_mm512_srli_epi32(T[c4], 4), m3),
                                      _mm512_and_si512(_mm512_srli_epi32(T[c4], 6), m3)};
                for (int j = 0; j < C; j++) {
                    const int8_t *yq = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[b].qs + off;
                    for (int l = 0; l < 4; l++) {
                        int32_t v;
                        memcpy(&v, yq + 32 * l, 4);
                        s[j] = _mm512_dpbusd_epi32(s[j], x[l], _mm512_set1_epi32(v));
                    }
                }
            }
        }
        for (int j = 0; j < C; j++) {
            const __m512 c = _mm512_mul_ps(dx, _mm512_set1_ps(A[(size_t)j * nb + b].d));
            acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(s[j]), c));
        }
    }
    x16_store(C, acc, S, lds, nrows);
}

static void tqx_pass(int C, int nb, const char *w, size_t w_row, int nrows, const char *y, size_t y_row,
                     const x16_act *A, float *S, int64_t lds) {
#define TQX_PASS(C_) tqx_group(C_, nb, w, w_row, nrows, y, y_row, A, S, lds)
    X16_BY_C(C, TQX_PASS)
#undef TQX_PASS
}

static void gemm_tq2_0_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT vw, size_t w_row, int nr,
                           const void *OXL_RESTRICT vy, size_t y_row, int nc) {
    const int nb = n / QK_K;
    x16_act *A = (x16_act *)oxl_panel_memory((size_t)nc * nb * sizeof(x16_act));
    if (!A) {   /* no memory for the per-thread buffer: one output at a time (the same floats) */
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < nc; j++)
                vec_dot_tq2_0_q8_K_x4(n, &S[j * lds + r], (const char *)vw + (size_t)r * w_row,
                                      (const char *)vy + (size_t)j * y_row);
        return;
    }
    const char *w = (const char *)vw, *y = (const char *)vy, *end = w + (size_t)nr * w_row;
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            const block_q8_K *yb = (const block_q8_K *)(const void *)(y + (size_t)j * y_row) + b;
            const __m256i ys = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yb->bsums), _mm256_set1_epi16(1));
            A[(size_t)j * nb + b] = (x16_act){yb->d, -lb_hsum_i32_8(ys)};
        }
    for (int r = 0; r < nr; r += X16) {
        const int nrows = OXL_MIN(X16, nr - r);
        const char *g = w + (size_t)r * w_row;
        for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
        for (int j0 = 0; j0 < nc; j0 += X16_VG)
            tqx_pass(OXL_MIN(X16_VG, nc - j0), nb, g, w_row, nrows, y + (size_t)j0 * y_row, y_row, A + (size_t)j0 * nb,
                        S + j0 * lds + r, lds);
    }
}

/* Q1_0 of this tier: vec_dot, the file-layout products (one row or many) and the repacked layout, all in the
 * order above; TQ2_0's vec_dot and multi-row kernel. */
void oxl_register_avx512vnni_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_x4;
    t->type[OXL_TYPE_TQ2_0].gemm = gemm_tq2_0_x16;   /* a decode's one activation row: the vec_dot row by row */
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_x16;
    t->type[OXL_TYPE_Q1_0].gemm = gemm_q1_0_file_x16;
    t->type[OXL_TYPE_Q1_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q1_0].repacked = (oxl_repacked_layout){"q1_0_x16", q1_0_x16_row_size, repack_q1_0_x16, gemm_q1_0_x16};
}
