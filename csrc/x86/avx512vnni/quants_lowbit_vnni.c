/* AVX-512 VNNI kernels for the 1-bit and ternary types: Q1_0's multi-row kernel against Q8_0 (decode, batches,
 * prefill; Bonsai's 1-bit type), and TQ2_0 against Q8_K (below).
 *
 * A Q1_0 block is 128 signs and one scale; its activations are four Q8_0 blocks. A 512-bit register holds
 * two of them (blocks 2k and 2k + 1 of the row, lower and upper 256 bits), and the weight's 64 sign bits for
 * them are used as a mask: the activations negated where a bit is clear (vpsubb with a mask), then summed
 * four at a time into int32 lanes by vpdpbusd against ones (exact; the AVX-512 tier needs vpmaddubsw +
 * vpmaddwd for the same integers). acc = fma(dx * dy, p, acc), lower half for even activation blocks, upper
 * for odd, and hsum8(lower + upper) at the end: the order of csrc/x86/quants_lowbit_x86.h, so every output
 * is the AVX-512 tier's vec_dot float (inherited by this tier) bit for bit.
 *
 * The activations are packed once per call (each pair's 64 bytes, and its two scales broadcast over their
 * halves), in panels as quants_legacy_vnni.c does. Weight rows go R at a time (4 for a decode or a small
 * batch): R x C independent accumulators, so the fused multiply-add latency does not bound a decode's one
 * chain. Nothing of R or C changes a float. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")   /* the ternary float steps as the scalar tier rounds them */
#endif

#include <stddef.h>
#include <stdint.h>

#include "../quants_lowbit_x86.h"

#define Q1_VG 4                  /* activation rows per group */
#define Q1_PANEL_BYTES (256 * 1024)

void *oxl_vnni_panel_memory(size_t bytes);   /* quants_legacy_vnni.c: this thread's 64-byte aligned buffer */

static oxl_gemm_fn g_q1_wide;   /* the inherited kernel (same floats), for rows too wide to pack */

/* pair k (Q8_0 blocks 2k, 2k + 1) of activation row j at [k * nc + j] */
typedef struct {
    __m512i *q;
    __m512 *d;
    int nc;
} q1_packed;

static void q1_pack(int np, const char *y, size_t y_row, int nc, q1_packed *P) {
    for (int j = 0; j < nc; j++) {
        const block_q8_0 *yb = (const block_q8_0 *)(y + j * y_row);
        for (int k = 0; k < np; k++) {
            const __m256i lo = _mm256_loadu_si256((const __m256i *)yb[2 * k].qs);
            const __m256i hi = _mm256_loadu_si256((const __m256i *)yb[2 * k + 1].qs);
            P->q[k * nc + j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            P->d[k * nc + j] = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(yb[2 * k].d)),
                                                  _mm256_set1_ps(_cvtsh_ss(yb[2 * k + 1].d)), 1);
        }
    }
}

/* R weight rows against C packed activation rows j0 .. j0 + C - 1 */
OXL_INLINE void q1_row_group(const int R, const int C, int nb, const char *w, size_t w_row, const q1_packed *P,
                             int j0, float *S, int64_t lds) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc[4][Q1_VG];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) acc[r][j] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __mmask64 neg[4][2];
        __m512 dx[4];
        for (int r = 0; r < R; r++) {
            const block_q1_0 *x = (const block_q1_0 *)(w + r * w_row) + i;
            uint64_t bits[2];
            memcpy(bits, x->qs, 16);
            neg[r][0] = (__mmask64)~bits[0];
            neg[r][1] = (__mmask64)~bits[1];
            dx[r] = _mm512_set1_ps(_cvtsh_ss(x->d));
        }
        for (int h = 0; h < 2; h++) {
            const int k = 2 * i + h;
            for (int j = 0; j < C; j++) {
                const __m512i q = _mm512_load_si512(P->q + k * P->nc + j0 + j);
                const __m512 d = _mm512_load_ps(P->d + k * P->nc + j0 + j);
                for (int r = 0; r < R; r++) {
                    const __m512i sy = _mm512_mask_sub_epi8(q, neg[r][h], _mm512_setzero_si512(), q);
                    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, sy);
                    /* dx * dy rounded once, as the vec_dot's c */
                    acc[r][j] = _mm512_fmadd_ps(_mm512_mul_ps(dx[r], d), _mm512_cvtepi32_ps(p), acc[r][j]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) {
        __m256 v[4];
        for (int c = 0; c < 4; c++) {
            const __m512 a = acc[r][c < C ? c : 0];
            v[c] = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
        }
        float out[4];
        _mm_storeu_ps(out, hsum_f32_8x4(v[0], v[1], v[2], v[3]));
        for (int j = 0; j < C; j++) S[j * lds + r] = out[j];
    }
}

static void q1_rows(int R, int C, int nb, const char *w, size_t w_row, const q1_packed *P, int j0, float *S,
                    int64_t lds) {
#define Q1_C(R_)                                                                        \
    switch (C) {                                                                        \
    case 4: q1_row_group(R_, 4, nb, w, w_row, P, j0, S, lds); break;                    \
    case 3: q1_row_group(R_, 3, nb, w, w_row, P, j0, S, lds); break;                    \
    case 2: q1_row_group(R_, 2, nb, w, w_row, P, j0, S, lds); break;                    \
    default: q1_row_group(R_, 1, nb, w, w_row, P, j0, S, lds); break;                   \
    }
    if (R == 4) {
        Q1_C(4)
    } else {
        Q1_C(1)
    }
#undef Q1_C
}

static void gemm_q1_0_vnni(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT vw, size_t w_row,
                           int nr, const void *OXL_RESTRICT vy, size_t y_row, int nc) {
    const int nb = n / QK1_0, np = 2 * nb;
    const size_t row_pack = (size_t)np * 128;
    int panel = (int)OXL_MIN((size_t)nc, Q1_PANEL_BYTES / row_pack);
    if (panel > Q1_VG) panel -= panel % Q1_VG;
    unsigned char *buf = panel >= 1 ? (unsigned char *)oxl_vnni_panel_memory(row_pack * panel) : NULL;
    if (!buf) {
        g_q1_wide(n, S, lds, vw, w_row, nr, vy, y_row, nc);
        return;
    }
    const char *w = (const char *)vw, *end = w + (size_t)nr * w_row;
    for (int j0 = 0; j0 < nc; j0 += panel) {
        const int pc = OXL_MIN(panel, nc - j0);
        q1_packed P = {.q = (__m512i *)buf, .d = (__m512 *)(buf + (size_t)np * pc * 64), .nc = pc};
        q1_pack(np, (const char *)vy + j0 * y_row, y_row, pc, &P);
        float *Sp = S + j0 * lds;
        int r = 0;
        for (; r + 4 <= nr; r += 4) {
            oxl_stream_row(w + r * w_row, 4 * w_row, end);
            for (int j = 0; j < pc; j += Q1_VG) q1_rows(4, OXL_MIN(Q1_VG, pc - j), nb, w + r * w_row, w_row, &P, j, Sp + j * lds + r, lds);
        }
        for (; r < nr; r++) {
            oxl_stream_row(w + r * w_row, w_row, end);
            for (int j = 0; j < pc; j += Q1_VG) q1_rows(1, OXL_MIN(Q1_VG, pc - j), nb, w + r * w_row, w_row, &P, j, Sp + j * lds + r, lds);
        }
    }
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
    return _mm512_reduce_add_epi32(_mm512_sub_epi32(acc, _mm512_zextsi256_si512(ys)));
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

/* Takes over Q1_0's multi-row kernel (the AVX-512 tier's vec_dot stays: the same floats) and the decode's
 * single rows; TQ2_0's vec_dot and multi-row kernel. */
void oxl_register_avx512vnni_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_vnni;
    t->type[OXL_TYPE_TQ2_0].gemm = gemm_tq2_0_vnni;
    if (!t->type[OXL_TYPE_Q1_0].gemm) return;   /* no inherited kernel to fall back on: keep the parent's */
    g_q1_wide = t->type[OXL_TYPE_Q1_0].gemm;
    t->type[OXL_TYPE_Q1_0].gemm = gemm_q1_0_vnni;
    t->type[OXL_TYPE_Q1_0].gemm_one_row = 1;
}
