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

#define Q1_VG 4                  /* TQ2_0: activation rows per group */
#define Q1X 16                   /* Q1_0: rows per group */
#define Q1X_VG 8                 /* Q1_0: activation rows per pass over a group */
#define Q1X_BITS 256             /* Q1_0: bytes of bits of one block of a group */
#define Q1X_AHEAD 2048           /* Q1_0: prefetch distance in a repacked matrix, bytes */

void *oxl_vnni_panel_memory(size_t bytes);   /* quants_legacy_vnni.c: this thread's 64-byte aligned buffer */

static inline size_t q1x_group_bytes(int nb) { return (size_t)nb * (Q1X_BITS + 2 * Q1X); }

/* Up to 16 file rows (w_row bytes apart) in the q1_0_x16 form; missing rows are zero, scales too.
 * Four blocks at a time: row l's 4 x 16 bytes of bits as 8 64-bit lanes (lane 2i + h: block i's bytes
 * 8h..8h+7, i.e. the 16 nibbles of chunks 16h..16h+15), picked out of the row's 72 bytes by vpermt2w; the 16
 * rows' vectors are then 8 lanes of 16 x 16 nibble matrices, transposed together by delta swaps (halves of 8,
 * 4, 2, 1 nibbles), after which vector c holds word 16h + c of block i in lane 2i + h. A decode reads the
 * file rows through this when the matrix was not repacked: about as much work as the product itself. */
static void q1x_build(const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    uint16_t *sc = (uint16_t *)(void *)(dst + (size_t)nb * Q1X_BITS);
    uint16_t pick[32];
    for (int q = 0; q < 8; q++)
        for (int j = 0; j < 4; j++) pick[4 * q + j] = (uint16_t)(9 * (q / 2) + 1 + 4 * (q % 2) + j);
    const __m512i idx = _mm512_loadu_si512((const void *)pick);
    static const uint64_t keep[4] = {0x00000000FFFFFFFFull, 0x0000FFFF0000FFFFull, 0x00FF00FF00FF00FFull,
                                     0x0F0F0F0F0F0F0F0Full};
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int nbk = OXL_MIN(4, nb - b0);
        const int avail = nbk * (int)sizeof(block_q1_0);   /* bytes of the 4 blocks that exist: never read past */
        const __mmask64 m_lo = avail >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << avail) - 1;
        const __mmask64 m_hi = avail > 64 ? ((__mmask64)1 << (avail - 64)) - 1 : 0;
        __m512i v[Q1X];
        for (int l = 0; l < Q1X; l++) {
            if (l >= nrows) {
                v[l] = _mm512_setzero_si512();
                continue;
            }
            const char *p = w + (size_t)l * w_row + (size_t)b0 * sizeof(block_q1_0);
            v[l] = _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi8(m_lo, p), idx, _mm512_maskz_loadu_epi8(m_hi, p + 64));
        }
        for (int st = 0; st < 4; st++) {
            const int s = 8 >> st;
            const __m512i k = _mm512_set1_epi64((long long)keep[st]);
            for (int i = 0; i < Q1X; i++) {
                if (i & s) continue;
                const __m512i t = _mm512_and_si512(_mm512_xor_si512(_mm512_srli_epi64(v[i], 4 * s), v[i + s]), k);
                v[i + s] = _mm512_xor_si512(v[i + s], t);
                v[i] = _mm512_xor_si512(v[i], _mm512_slli_epi64(t, 4 * s));
            }
        }
        uint64_t word[Q1X][8];
        for (int c = 0; c < Q1X; c++) _mm512_storeu_si512((void *)word[c], v[c]);
        for (int i = 0; i < nbk; i++) {
            uint8_t *out = dst + (size_t)(b0 + i) * Q1X_BITS;
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < Q1X; c++) memcpy(out + 8 * (16 * h + c), &word[c][2 * i + h], 8);
            for (int l = 0; l < Q1X; l++) {
                if (l < nrows) memcpy(&sc[(b0 + i) * Q1X + l], w + (size_t)l * w_row + (size_t)(b0 + i) * sizeof(block_q1_0), 2);
                else sc[(b0 + i) * Q1X + l] = 0;
            }
        }
    }
}

/* per activation block: its scale and where its int32 sums start */
typedef struct {
    float d;
    int32_t base;   /* -sum(y) */
} q1x_act;

static inline int32_t q1x_sum_i8_32(__m256i y) {
    return lb_hsum_i32_8(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), y));
}

/* nk activation blocks of each of nc rows */
static void q1x_prepare(int nk, const char *y, size_t y_row, int nc, q1x_act *A) {
    for (int j = 0; j < nc; j++)
        for (int k = 0; k < nk; k++) {
            const block_q8_0 *yb = (const block_q8_0 *)(const void *)(y + (size_t)j * y_row) + k;
            A[(size_t)j * nk + k] = (q1x_act){_cvtsh_ss(yb->d), -q1x_sum_i8_32(_mm256_loadu_si256((const __m256i *)yb->qs))};
        }
}

static inline __m512i q1x_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void q1x_group(const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const q1x_act *A,
                          int ahead, __m512 *acc) {
    const uint8_t *sc = g + (size_t)nb * Q1X_BITS;
    const __m512i two = _mm512_set1_epi8(2);
    for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
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
            for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[4 * b + k].qs;
                const q1x_act a = A[(size_t)j * 4 * nb + 4 * b + k];
                /* two chains for latency; integer sums, so their split changes nothing */
                __m512i s0 = _mm512_set1_epi32(a.base), s1 = _mm512_setzero_si512();
                for (int c = 0; c < 8; c += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, x[c], q1x_bcast4(yq + 4 * c));
                    s1 = _mm512_dpbusd_epi32(s1, x[c + 1], q1x_bcast4(yq + 4 * c + 4));
                }
                const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(a.d));
                acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[j]);
            }
        }
    }
}

OXL_INLINE void q1x_group_store(const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const q1x_act *A,
                                int ahead, float *S, int64_t lds, int nrows) {
    __m512 acc[Q1X_VG];
    q1x_group(C, nb, g, y, y_row, A, ahead, acc);
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, acc[j]);
}

/* C as a constant per call (the loops over activation rows and chunks unroll) */
static void q1x_group_c(int C, int nb, const uint8_t *g, const char *y, size_t y_row, const q1x_act *A, int ahead,
                        float *S, int64_t lds, int nrows) {
#define Q1X_C(C_) q1x_group_store(C_, nb, g, y, y_row, A, ahead, S, lds, nrows); break;
    switch (C) {
    case 8: Q1X_C(8)
    case 7: Q1X_C(7)
    case 6: Q1X_C(6)
    case 5: Q1X_C(5)
    case 4: Q1X_C(4)
    case 3: Q1X_C(3)
    case 2: Q1X_C(2)
    default: Q1X_C(1)
    }
#undef Q1X_C
}

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or a repacked matrix's rows from a group
 * start) and nc activation rows; -1 if no memory for the per-thread buffer */
static int q1x_gemm(int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr, const char *y,
                    size_t y_row, int nc) {
    const int nb = n / QK1_0;
    const size_t gbytes = q1x_group_bytes(nb), abytes = ((size_t)nc * 4 * nb * sizeof(q1x_act) + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_vnni_panel_memory(abytes + gbytes);
    if (!buf) return -1;
    q1x_act *A = (q1x_act *)(void *)buf;
    uint8_t *tile = buf + abytes;
    q1x_prepare(4 * nb, y, y_row, nc, A);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += Q1X) {
        const int nrows = OXL_MIN(Q1X, nr - r);
        const char *g = w + (size_t)r * w_row;
        int ahead = Q1X_AHEAD;
        if (!packed || nrows < Q1X) {   /* file rows (a repacked matrix's last rows % 16 are too) */
            for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
            q1x_build(g, w_row, nrows, nb, tile);
            g = (const char *)tile, ahead = 0;
        }
        for (int j0 = 0; j0 < nc; j0 += Q1X_VG)
            q1x_group_c(OXL_MIN(Q1X_VG, nc - j0), nb, (const uint8_t *)g, y + (size_t)j0 * y_row, y_row,
                        A + (size_t)j0 * 4 * nb, ahead, S + j0 * lds + r, lds, nrows);
    }
    return 0;
}

/* one row, one activation row: the same steps, one output */
static void vec_dot_q1_0_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const __m256i ones = _mm256_set1_epi8(1);
    float acc = 0.0f;
    for (int i = 0; i < n / QK1_0; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        for (int k = 0; k < 4; k++) {
            uint32_t bits;
            memcpy(&bits, x[i].qs + 4 * k, 4);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[4 * i + k].qs);
            const __m256i sy = _mm256_mask_sub_epi8(qy, (__mmask32)~bits, _mm256_setzero_si256(), qy);
            const int32_t isum = lb_hsum_i32_8(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, sy));
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
    for (; r + Q1X <= rows; r += Q1X) q1x_build((const char *)w + r * row, row, Q1X, nb, (uint8_t *)dst + r * row);
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

#define TQ_VNNI(T, block_t)                                                                                    \
    OXL_INLINE void T##_rows_vnni(const int C, const block_t *x, int nb, const char *y, size_t y_row, float *out,  \
                                  int64_t lds) {                                                               \
        float sum[Q1_VG] = {0};                                                                                \
        for (int i = 0; i < nb; i++) {                                                                         \
            __m512i t[4];                                                                                      \
            T##_decode_512(&x[i], t);                                                                          \
            const float dx = _cvtsh_ss(x[i].d);                                                                \
            for (int j = 0; j < C; j++) {                                                                      \
                const block_q8_K *yb = (const block_q8_K *)(y + j * y_row) + i;                                \
                sum[j] += (float)tq_block_dot_vnni(t, yb) * (dx * yb->d);                                      \
            }                                                                                                  \
        }                                                                                                      \
        for (int j = 0; j < C; j++) out[j * lds] = sum[j];                                                     \
    }                                                                                                          \
    static void vec_dot_##T##_q8_K_vnni(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx,             \
                                        const void *OXL_RESTRICT vy) {                                         \
        T##_rows_vnni(1, (const block_t *)vx, n / QK_K, (const char *)vy, 0, s, 0);                            \
    }                                                                                                          \
    static void gemm_##T##_vnni(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,         \
                                size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {      \
        const char *wc = (const char *)w, *yc = (const char *)y;                                               \
        for (int r = 0; r < nr; r++) {                                                                         \
            oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row);                                    \
            const block_t *x = (const block_t *)(wc + r * w_row);                                              \
            for (int j = 0; j < nc; j += Q1_VG) {                                                              \
                float *out = S + j * lds + r;                                                                  \
                switch (OXL_MIN(Q1_VG, nc - j)) {                                                              \
                case 4: T##_rows_vnni(4, x, n / QK_K, yc + j * y_row, y_row, out, lds); break;                 \
                case 3: T##_rows_vnni(3, x, n / QK_K, yc + j * y_row, y_row, out, lds); break;                 \
                case 2: T##_rows_vnni(2, x, n / QK_K, yc + j * y_row, y_row, out, lds); break;                 \
                default: T##_rows_vnni(1, x, n / QK_K, yc + j * y_row, y_row, out, lds); break;                \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

TQ_VNNI(tq2_0, block_tq2_0)

/* Q1_0 of this tier: vec_dot, the file-layout products (one row or many) and the repacked layout, all in the
 * order above; TQ2_0's vec_dot and multi-row kernel. */
void oxl_register_avx512vnni_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_vnni;
    t->type[OXL_TYPE_TQ2_0].gemm = gemm_tq2_0_vnni;
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_x16;
    t->type[OXL_TYPE_Q1_0].gemm = gemm_q1_0_file_x16;
    t->type[OXL_TYPE_Q1_0].gemm_one_row = 1;
    t->type[OXL_TYPE_Q1_0].repacked = (oxl_repacked_layout){"q1_0_x16", q1_0_x16_row_size, repack_q1_0_x16, gemm_q1_0_x16};
}
