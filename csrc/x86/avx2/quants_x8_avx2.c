/* Q4_0, Q8_0 and IQ4_NL on the AVX2 tier: eight weight rows side by side, one int32 lane per row (x8_common.h).
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row,
 * batched and verify products, the repacked prefill tiles), for each output:
 *
 *     out = +0;  for each 32-value block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *
 * isum_b the exact int32 dot of block b's 32 weight and activation values, dx_b * dy_b rounded to float
 * once, the fma rounded once: the AVX-512 VNNI tier's order (csrc/x86/avx512vnni/quants_x16_vnni.c, and
 * quants_iqx16_vnni.c for IQ4_NL), so the two tiers give the same floats. A register of eight rows computes
 * eight such serial sums at once. The activations are Q8_0, |y| <= 127 (round(x / d), d = amax / 127).
 *   Q4_0: per block and activation row eight vpmaddubsw (the file's unsigned nibbles q + 8 against four
 *         broadcast activation bytes; a pair's sum |.| <= 2 * 15 * 128 and the eight summed in int16
 *         |.| <= 30720, exact), one vpmaddwd by ones, the int32 sum starting at -8 sum(y) (computed once
 *         per activation block), a convert, a multiply and an fma.
 *   Q8_0: the sign trick, |x| against y with x's sign (|x| <= 128, |y| <= 127: a pair |.| <= 32512), a
 *         vpmaddwd by ones and an int32 add per four values.
 *   IQ4_NL: the value kvalues_iq4nl[q] (-127..113) and its magnitude looked up by vpshufb from the 4-bit
 *         index once per group and four values, then Q8_0's sign trick (a pair |.| <= 2 * 127 * 127 = 32258;
 *         two pairs could not share an int16, so a vpmaddwd per four values). The offset form the VNNI tier
 *         takes (value + 128, up to 241) would overflow vpmaddubsw's pairs.
 * The order the AVX2 tier had before (quants_legacy_avx2.c: float lanes per 4 values, blocks in even / odd
 * pairs) stays for the AVX-512 tier, whose vec_dots sum in it.
 *
 * Layout x8 (the repacked copy, or built per call from file rows into a per-thread buffer):
 *   a group of 8 rows, nb blocks: nb blocks of quants, then nb x 8 fp16 scales (row l's d at 2l)
 *   q4_0: 128 bytes a block: chunk c (0..3) at 32c holds row l's qs[4c..4c+3] at 4l (low nibbles: values
 *         4c..4c+3, high nibbles: 16 + 4c..), as in the file
 *   q8_0: 256 bytes a block: chunk c (0..7) at 32c holds row l's qs[4c..4c+3] at 4l
 *   iq4_nl: q4_0's (the same block bytes: d, then 16 bytes of 4-bit indices)
 * A repacked matrix is its whole groups of 8 rows in this form, then its last rows % 8 rows as in the
 * file: the file's size, and a product's row range starts at a multiple of 8 (forward_impl.h's
 * matmul_share aligns repacked ranges to 16). */
#include <stdlib.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x8_common.h"

/* per activation block: its scale and where its int32 sums start */
typedef struct {
    float d;
    int32_t base;   /* Q4_0: -8 * sum(y); Q8_0, IQ4_NL: 0 */
} x8_act;

static inline int x8_chunks(int kind) { return kind == K_Q8_0 ? 8 : 4; }
static inline size_t x8_qbytes(int kind) { return kind == K_Q8_0 ? 256 : 128; }
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
        const char *blk = w + (size_t)b * bx;   /* d, then qs: all three block types */
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

/* kvalues_iq4nl and their magnitudes, in both 128-bit lanes (vpshufb tables) */
static inline __m256i x8_iq4nl_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)kvalues_iq4nl));
}
static inline __m256i x8_iq4nl_abs_table(void) {
    const __m256i t = x8_iq4nl_table();
    return _mm256_sign_epi8(t, t);
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void x8_group(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                         const x8_act *A, int ahead, __m256 *acc) {
    const uint8_t *sc = g + (size_t)nb * x8_qbytes(kind);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * x8_qbytes(kind);
        if (ahead) x8_ahead(g, x8_qbytes(kind) + 2 * X8, b);   /* a block's share of the group's bytes */
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
        } else if (kind == K_IQ4_NL) {
            const __m256i table = x8_iq4nl_table(), atable = x8_iq4nl_abs_table();
            X8_UNROLL for (int j = 0; j < C; j++) isum[j] = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * c));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                const __m256i xl = _mm256_shuffle_epi8(table, lo), axl = _mm256_shuffle_epi8(atable, lo);
                const __m256i xh = _mm256_shuffle_epi8(table, hi), axh = _mm256_shuffle_epi8(atable, hi);
                X8_UNROLL for (int j = 0; j < C; j++) {
                    const __m256i pl = _mm256_maddubs_epi16(axl, _mm256_sign_epi8(x8_bcast4(yq[j] + 4 * c), xl));
                    const __m256i ph = _mm256_maddubs_epi16(axh, _mm256_sign_epi8(x8_bcast4(yq[j] + 16 + 4 * c), xh));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
                }
            }
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
static void x8_pass_iq4_nl(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                           int ahead, float *S, int64_t lds, int nrows) {
    (void)kind;
#define X8_PASS(C_) x8_pass(K_IQ4_NL, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
    X8_BY_C(C, X8_PASS)
#undef X8_PASS
}

OXL_INLINE int x8_gemm_kind(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                            const char *y, size_t y_row, int nc) {
    const x8_family f = {kind, n / 32, (size_t)(n / 32) * sizeof(x8_act), x8_group_bytes(kind, n / 32), 1,
                         x8_prepare, x8_build,
                         kind == K_Q4_0 ? x8_pass_q4_0 : kind == K_Q8_0 ? x8_pass_q8_0 : x8_pass_iq4_nl};
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
        } else if (kind == K_IQ4_NL) {
            float d_unused, m_unused;
            const __m256i xq = decode(K_IQ4_NL, blk, &d_unused, &m_unused);
            p = _mm256_maddubs_epi16(_mm256_sign_epi8(xq, xq), _mm256_sign_epi8(yq, xq));
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

/* per type: vec_dot, the file-layout product (without memory for the per-thread buffer, one output at a time
 * by the vec_dot: the same floats), the repacked product (rows from a group start; -1: no memory, the caller
 * reads the file rows), the repacked row size (the file's, any width) and the repack (whole groups of 8 rows
 * built, the last rows % 8 copied; x8_common.h's) */
#define X8_TYPE(t, K)                                                                                            \
    static void vec_dot_##t##_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x,                    \
                                 const void *OXL_RESTRICT y) {                                                \
        x8_vec_dot(K, n, s, x, y);                                                                             \
    }                                                                                                          \
    static void gemm_##t##_file_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,     \
                                   size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {  \
        x8_gemm_file(x8_gemm_kind, x8_vec_dot, K, n, S, lds, w, w_row, nr, y, y_row, nc);                      \
    }                                                                                                          \
    static int gemm_##t##_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,           \
                             size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {        \
        return x8_gemm_kind(K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);          \
    }                                                                                                          \
    static int64_t t##_x8_row_size(int64_t cols) {                                                             \
        return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)kind_block_bytes(K) : -1;                     \
    }                                                                                                          \
    static void repack_##t##_x8(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows,             \
                                int64_t cols) {                                                               \
        x8_repack(x8_build, K, (int)(cols / 32), (size_t)(cols / 32) * kind_block_bytes(K), w, dst, rows);     \
    }
X8_TYPE(q4_0, K_Q4_0)
X8_TYPE(q8_0, K_Q8_0)
X8_TYPE(iq4_nl, K_IQ4_NL)

/* Q4_0, Q8_0 and IQ4_NL of this tier: vec_dot, the file-layout products (one row or many) and the repacked
 * layout, all in the order above */
void oxl_register_avx2_x8(oxl_kernel_table *t) {
#define X8_REGISTER(T, name)                                                                                   \
    t->type[T].vec_dot = vec_dot_##name##_x8;                                                                  \
    t->type[T].gemm = gemm_##name##_file_x8;                                                                   \
    t->type[T].gemm_one_row = 1;                                                                               \
    t->type[T].repacked = (oxl_repacked_layout){#name "_x8", name##_x8_row_size, repack_##name##_x8, gemm_##name##_x8};
    X8_REGISTER(OXL_TYPE_Q4_0, q4_0)
    X8_REGISTER(OXL_TYPE_Q8_0, q8_0)
    X8_REGISTER(OXL_TYPE_IQ4_NL, iq4_nl)
#undef X8_REGISTER
}
