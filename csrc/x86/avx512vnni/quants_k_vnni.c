/* The VNNI tier's multi-row kernels for the K-quants Q4_K, Q5_K, Q6_K and IQ4_XS, which sum as the AVX2 vec_dots
 * this tier inherits (csrc/x86/avx2/quants_k_avx2.c), so every output is that vec_dot's float, bit for bit.
 *
 * Small products (decode, a small batch, a verify: up to K_SMALL_BATCH activation rows) go through the tiles of
 * csrc/x86/quants_k_x86.h with each scale x pair-sum step in one vpdpwssd instead of vpmaddwd + vpaddd (the same
 * integers); they stream the weights one row at a time.
 *
 * Larger ones (a prefill chunk) through 512-bit tiles. The vec_dot's steps per super-block: 8 int32 lanes of
 * scale x (4-value dot) sums, lane l over values 4l..4l+3 of each 32-value vector (integers: exact, whatever the
 * order they are added in), then per lane acc = fma(dx dy, float(sumi), acc) (Q4_K/Q5_K also fma(-dmin dy,
 * float(mins . pair sums), acc)) and at the end hsum_f32_8(acc). A 512-bit register here holds two weight rows'
 * 8 lanes, row A in the lower 256 bits and row B in the upper: the same integers and float steps per lane, while
 * each vpmaddubsw / vpdpwssd does the work of two. A tile is ZP row pairs x ZJ activation rows: each broadcast
 * activation vector serves 4 weight rows, each decoded weight vector 8 activation rows.
 *
 * Kernel alone (Xeon, AVX-512 VNNI, 1 thread, CPU time so that the shared machine's load drops out, 2048 x 2048
 * by 64 activation rows, 2026-11-26): Q4_K 120 -> 155 GOPS against the 256-bit tiles, Q6_K 121 -> 162, IQ4_XS
 * 107 -> 130; 2 x 4 tiles 128 / 143 / 96, 1 x 8 144 / 151 / 113. What did not help: a float path (vpdpbusd,
 * convert, fma by the scale; exact, every partial sum stays below 2^24, so the same floats) ran Q4_K at 135 and
 * IQ4_XS at 126 / 127; skipping the scale decode altogether (what a repacked copy with ready scales could save at
 * most) 147 -> 163 for Q4_K, not worth a second copy of the weights in RAM. The files' layout is read as it is. */
#include <immintrin.h>

#define OXL_K_ACC_MADD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#define K_WIDE_RC 4   /* AVX-512VL: 32 vector registers */
#include "../quants_k_x86.h"

GEMM_ROWS_K(gemm_rows_q4_K_vnni, TILE_Q4_K)
GEMM_ROWS_K(gemm_rows_q5_K_vnni, TILE_Q5_K)
GEMM_ROWS_K(gemm_rows_q6_K_vnni, tile_q6_K)
GEMM_ROWS_K(gemm_rows_iq4_xs_vnni, tile_iq4_xs)

#define ZP 2   /* weight row pairs per tile */
#define ZJ 8   /* activation rows per tile */

/* row a's 32 bytes in the lower half, row b's in the upper */
static inline __m512i z_pair(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}
static inline __m512i z_join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
static inline __m512 z_joinf(float a, float b) { return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1); }
static inline __m512i z_bcast(const int8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* S[j * lds + r] for the tile's rows r < nr (2P or 2P - 1: the last pair then reads its one row twice) */
static inline void z_store(const int P, const int J, const __m512 acc[ZP][ZJ], int nr, float *S, int64_t lds) {
    for (int j = 0; j < J; j++)
        for (int p = 0; p < P; p++) {
            S[j * lds + 2 * p] = hsum_f32_8(_mm512_castps512_ps256(acc[p][j]));
            if (2 * p + 1 < nr)
                S[j * lds + 2 * p + 1] =
                    hsum_f32_8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][j]), 1)));
        }
}

/* ---------------------------------------------------------------- Q4_K */

/* Q4_K (has_qh = 0) and Q5_K (has_qh = 1: the fifth bits in qh, before qs) */
OXL_INLINE void ztile_k4(const int has_qh, const int P, const int J, int nb, float *S, int64_t lds, const char *w,
                         size_t w_row, int nr, const char *y, size_t y_row) {
    const size_t bsize = has_qh ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const __m512i m4 = _mm512_set1_epi8(0xF), m1 = _mm512_set1_epi8(1);
    __m512 acc[ZP][ZJ];
    for (int p = 0; p < P; p++)
        for (int j = 0; j < J; j++) acc[p][j] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_q4_K *xa[ZP], *xb[ZP];   /* Q4_K and Q5_K share d, dmin and scales */
        const uint8_t *qa[ZP], *qb[ZP];
        __m512i sc[ZP], mn[ZP], qh[ZP];
        __m512 dv[ZP], mv[ZP];
        for (int p = 0; p < P; p++) {
            xa[p] = (const block_q4_K *)(w + 2 * p * w_row + i * bsize);
            xb[p] = 2 * p + 1 < nr ? (const block_q4_K *)(w + (2 * p + 1) * w_row + i * bsize) : xa[p];
            qa[p] = has_qh ? ((const block_q5_K *)xa[p])->qs : xa[p]->qs;
            qb[p] = has_qh ? ((const block_q5_K *)xb[p])->qs : xb[p]->qs;
            qh[p] = has_qh ? z_pair(((const block_q5_K *)xa[p])->qh, ((const block_q5_K *)xb[p])->qh)
                           : _mm512_setzero_si512();
            const __m128i sa = scales_mins_k4(xa[p]->scales), sb = scales_mins_k4(xb[p]->scales);
            /* the 8 scales of each row in both 128-bit lanes of its half; its 8 mins, then 8 zeros */
            sc[p] = z_join(_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sa)),
                           _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sb)));
            mn[p] = z_join(_mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sa, 8))),
                           _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sb, 8))));
            dv[p] = z_joinf(_cvtsh_ss(xa[p]->d), _cvtsh_ss(xb[p]->d));
            mv[p] = z_joinf(-_cvtsh_ss(xa[p]->dmin), -_cvtsh_ss(xb[p]->dmin));
        }
        const block_q8_K *yb[ZJ];
        for (int j = 0; j < J; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
        __m512i sumi[ZP][ZJ];
        for (int p = 0; p < P; p++)
            for (int j = 0; j < J; j++) sumi[p][j] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m512i lo[ZP], hi[ZP], slo[ZP], shi[ZP];
            for (int p = 0; p < P; p++) {
                const __m512i q = z_pair(qa[p] + 32 * c, qb[p] + 32 * c);
                lo[p] = _mm512_and_si512(q, m4);
                hi[p] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (has_qh) {
                    lo[p] = _mm512_or_si512(lo[p], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[p], 2 * c), m1), 4));
                    hi[p] = _mm512_or_si512(hi[p],
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[p], 2 * c + 1), m1), 4));
                }
                slo[p] = _mm512_shuffle_epi8(sc[p], _mm512_set1_epi16((short)((4 * c) | ((4 * c + 1) << 8))));
                shi[p] = _mm512_shuffle_epi8(sc[p], _mm512_set1_epi16((short)((4 * c + 2) | ((4 * c + 3) << 8))));
            }
            for (int j = 0; j < J; j++) {
                const __m512i ylo = z_bcast(yb[j]->qs + 64 * c), yhi = z_bcast(yb[j]->qs + 64 * c + 32);
                for (int p = 0; p < P; p++) {
                    sumi[p][j] = _mm512_dpwssd_epi32(sumi[p][j], slo[p], _mm512_maddubs_epi16(lo[p], ylo));
                    sumi[p][j] = _mm512_dpwssd_epi32(sumi[p][j], shi[p], _mm512_maddubs_epi16(hi[p], yhi));
                }
            }
        }
        for (int j = 0; j < J; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)yb[j]->bsums);
            const __m512i pairs = _mm512_broadcast_i32x4(
                _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
            const __m512 dy = _mm512_set1_ps(yb[j]->d);
            for (int p = 0; p < P; p++) {
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(dv[p], dy), _mm512_cvtepi32_ps(sumi[p][j]), acc[p][j]);
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(mv[p], dy),
                                            _mm512_cvtepi32_ps(_mm512_madd_epi16(mn[p], pairs)), acc[p][j]);
            }
        }
    }
    z_store(P, J, acc, nr, S, lds);
}

/* ---------------------------------------------------------------- Q6_K */

OXL_INLINE void ztile_q6_K(const int P, const int J, int nb, float *S, int64_t lds, const char *w, size_t w_row,
                           int nr, const char *y, size_t y_row) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
    __m512 acc[ZP][ZJ];
    for (int p = 0; p < P; p++)
        for (int j = 0; j < J; j++) acc[p][j] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_q6_K *xa[ZP], *xb[ZP];
        __m512i sc16[ZP];
        __m512 dv[ZP];
        for (int p = 0; p < P; p++) {
            xa[p] = (const block_q6_K *)(w + 2 * p * w_row) + i;
            xb[p] = 2 * p + 1 < nr ? (const block_q6_K *)(w + (2 * p + 1) * w_row) + i : xa[p];
            sc16[p] = z_join(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xa[p]->scales)),
                             _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb[p]->scales)));
            dv[p] = z_joinf(_cvtsh_ss(xa[p]->d), _cvtsh_ss(xb[p]->d));
        }
        const block_q8_K *yb[ZJ];
        for (int j = 0; j < J; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
        /* values are stored + 32: each lane starts at -32 sum_g scale_g bsums_g (vec_dot's start) */
        __m512i sumi[ZP][ZJ];
        for (int j = 0; j < J; j++) {
            const __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)yb[j]->bsums));
            for (int p = 0; p < P; p++)
                sumi[p][j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_madd_epi16(sc16[p], bs), 5));
        }
        for (int h = 0; h < 2; h++) {
            __m512i ql0[ZP], ql1[ZP], qh[ZP], s16[ZP];
            for (int p = 0; p < P; p++) {
                ql0[p] = z_pair(xa[p]->ql + 64 * h, xb[p]->ql + 64 * h);
                ql1[p] = z_pair(xa[p]->ql + 64 * h + 32, xb[p]->ql + 64 * h + 32);
                qh[p] = z_pair(xa[p]->qh + 32 * h, xb[p]->qh + 32 * h);
                s16[p] = z_join(
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(xa[p]->scales + 8 * h)))),
                    _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(xb[p]->scales + 8 * h)))));
            }
            for (int k = 0; k < 4; k++) {
                __m512i q[ZP], sck[ZP];
                for (int p = 0; p < P; p++) {
                    const __m512i lo = k % 2 ? ql1[p] : ql0[p];
                    const __m512i nib = k < 2 ? _mm512_and_si512(lo, m4) : _mm512_and_si512(_mm512_srli_epi16(lo, 4), m4);
                    const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[p], 2 * k), m3), 4);
                    q[p] = _mm512_or_si512(nib, top);
                    /* groups 8h + 2k (lower 128 bits of each row) and 8h + 2k + 1 (upper) */
                    sck[p] = _mm512_shuffle_epi8(s16[p], _mm512_broadcast_i64x4(BCAST16_PAIR(2 * k)));
                }
                for (int j = 0; j < J; j++) {
                    const __m512i q8 = z_bcast(yb[j]->qs + 128 * h + 32 * k);
                    for (int p = 0; p < P; p++)
                        sumi[p][j] = _mm512_dpwssd_epi32(sumi[p][j], sck[p], _mm512_maddubs_epi16(q[p], q8));
                }
            }
        }
        for (int j = 0; j < J; j++) {
            const __m512 dy = _mm512_set1_ps(yb[j]->d);
            for (int p = 0; p < P; p++)
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(dy, dv[p]), _mm512_cvtepi32_ps(sumi[p][j]), acc[p][j]);
        }
    }
    z_store(P, J, acc, nr, S, lds);
}

/* ---------------------------------------------------------------- IQ4_XS */

/* vec_dot's pair of sub-blocks ib, ib + 1 (iq4_xs_dot_pair): 16-value halves, the low nibbles' values against
 * activation values 0..15 of each sub-block (q8_lo), the high nibbles' against 16..31 (q8_hi); signed x signed
 * as |v| x (y with v's sign), and AVX-512 has no vpsignb: y is negated under v's sign mask (no value is 0) */
static inline __m512i z_iq4_dot(__m512i sumi, __m512i av, __mmask64 neg, __m512i q8, __m512i sc) {
    const __m512i ys = _mm512_mask_sub_epi8(q8, neg, _mm512_setzero_si512(), q8);
    return _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(av, ys), sc);
}

OXL_INLINE void ztile_iq4_xs(const int P, const int J, int nb, float *S, int64_t lds, const char *w, size_t w_row,
                             int nr, const char *y, size_t y_row) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i values = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    __m512 acc[ZP][ZJ];
    for (int p = 0; p < P; p++)
        for (int j = 0; j < J; j++) acc[p][j] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const block_iq4_xs *xa[ZP], *xb[ZP];
        __m512i sc8[ZP];
        __m512 dv[ZP];
        for (int p = 0; p < P; p++) {
            xa[p] = (const block_iq4_xs *)(w + 2 * p * w_row) + i;
            xb[p] = 2 * p + 1 < nr ? (const block_iq4_xs *)(w + (2 * p + 1) * w_row) + i : xa[p];
            const block_iq4_xs *a = xa[p], *b = xb[p];
            /* each row's 8 sub-block scales in both 128-bit lanes of its half */
            sc8[p] = z_join(_mm256_broadcastsi128_si256(_mm_setr_epi16(
                                (short)oxl_iq4xs_scale(a, 0), (short)oxl_iq4xs_scale(a, 1), (short)oxl_iq4xs_scale(a, 2),
                                (short)oxl_iq4xs_scale(a, 3), (short)oxl_iq4xs_scale(a, 4), (short)oxl_iq4xs_scale(a, 5),
                                (short)oxl_iq4xs_scale(a, 6), (short)oxl_iq4xs_scale(a, 7))),
                            _mm256_broadcastsi128_si256(_mm_setr_epi16(
                                (short)oxl_iq4xs_scale(b, 0), (short)oxl_iq4xs_scale(b, 1), (short)oxl_iq4xs_scale(b, 2),
                                (short)oxl_iq4xs_scale(b, 3), (short)oxl_iq4xs_scale(b, 4), (short)oxl_iq4xs_scale(b, 5),
                                (short)oxl_iq4xs_scale(b, 6), (short)oxl_iq4xs_scale(b, 7))));
            dv[p] = z_joinf(_cvtsh_ss(a->d), _cvtsh_ss(b->d));
        }
        const block_q8_K *yb[ZJ];
        for (int j = 0; j < J; j++) yb[j] = (const block_q8_K *)(y + j * y_row) + i;
        __m512i sumi[ZP][ZJ];
        for (int p = 0; p < P; p++)
            for (int j = 0; j < J; j++) sumi[p][j] = _mm512_setzero_si512();
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            __m512i alo[ZP], ahi[ZP], sc[ZP];
            __mmask64 nlo[ZP], nhi[ZP];
            for (int p = 0; p < P; p++) {
                const __m512i q4 = z_pair(xa[p]->qs + 16 * ib, xb[p]->qs + 16 * ib);
                const __m512i vlo = _mm512_shuffle_epi8(values, _mm512_and_si512(q4, m4));
                const __m512i vhi = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srli_epi16(q4, 4), m4));
                alo[p] = _mm512_abs_epi8(vlo), nlo[p] = _mm512_movepi8_mask(vlo);
                ahi[p] = _mm512_abs_epi8(vhi), nhi[p] = _mm512_movepi8_mask(vhi);
                sc[p] = _mm512_shuffle_epi8(sc8[p], _mm512_broadcast_i64x4(BCAST16_PAIR(ib)));
            }
            for (int j = 0; j < J; j++) {
                /* [values 0..15 of sub-block ib | of ib + 1] and [16..31 | 16..31], in both halves */
                const __m512i q = _mm512_loadu_si512((const void *)(yb[j]->qs + 32 * ib));
                const __m512i q8lo = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 0, 1, 4, 5), q);
                const __m512i q8hi = _mm512_permutexvar_epi64(_mm512_setr_epi64(2, 3, 6, 7, 2, 3, 6, 7), q);
                for (int p = 0; p < P; p++) {
                    sumi[p][j] = z_iq4_dot(sumi[p][j], alo[p], nlo[p], q8lo, sc[p]);
                    sumi[p][j] = z_iq4_dot(sumi[p][j], ahi[p], nhi[p], q8hi, sc[p]);
                }
            }
        }
        for (int j = 0; j < J; j++) {
            const __m512 dy = _mm512_set1_ps(yb[j]->d);
            for (int p = 0; p < P; p++)
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(dy, dv[p]), _mm512_cvtepi32_ps(sumi[p][j]), acc[p][j]);
        }
    }
    z_store(P, J, acc, nr, S, lds);
}

/* ---------------------------------------------------------------- the products */

/* nr x nc outputs in tiles of ZP row pairs x ZJ activation rows (fewer at the edges, as constants) */
#define Z_GEMM(name, tile, small)                                                                              \
    static void name(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT vw, size_t w_row,     \
                     int nr, const void *OXL_RESTRICT vy, size_t y_row, int nc) {                              \
        if (nc <= K_SMALL_BATCH) {                                                                             \
            small(n, S, lds, vw, w_row, nr, vy, y_row, nc);                                                    \
            return;                                                                                            \
        }                                                                                                      \
        const int nb = n / QK_K;                                                                               \
        const char *w = (const char *)vw, *y = (const char *)vy;                                               \
        for (int r = 0; r < nr; r += 2 * ZP) {                                                                 \
            const int rows = OXL_MIN(2 * ZP, nr - r);                                                          \
            const char *wr = w + r * w_row;                                                                    \
            for (int j = 0; j < nc;) {                                                                         \
                float *Sj = S + j * lds + r;                                                                   \
                const char *yj = y + j * y_row;                                                                \
                const int left = nc - j;                                                                       \
                if (rows > 2) {                                                                                \
                    if (left >= 8) tile(2, 8, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 8;                \
                    else if (left >= 4) tile(2, 4, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 4;           \
                    else if (left >= 2) tile(2, 2, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 2;           \
                    else tile(2, 1, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 1;                          \
                } else {                                                                                       \
                    if (left >= 8) tile(1, 8, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 8;                \
                    else if (left >= 4) tile(1, 4, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 4;           \
                    else if (left >= 2) tile(1, 2, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 2;           \
                    else tile(1, 1, nb, Sj, lds, wr, w_row, rows, yj, y_row), j += 1;                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }


#define ZTILE_Q4_K(P, J, ...) ztile_k4(0, P, J, __VA_ARGS__)
#define ZTILE_Q5_K(P, J, ...) ztile_k4(1, P, J, __VA_ARGS__)
Z_GEMM(gemm_q4_K_zmm, ZTILE_Q4_K, gemm_rows_q4_K_vnni)
Z_GEMM(gemm_q5_K_zmm, ZTILE_Q5_K, gemm_rows_q5_K_vnni)
Z_GEMM(gemm_q6_K_zmm, ztile_q6_K, gemm_rows_q6_K_vnni)
Z_GEMM(gemm_iq4_xs_zmm, ztile_iq4_xs, gemm_rows_iq4_xs_vnni)

void oxl_register_avx512vnni_k(oxl_kernel_table *t) {
    /* only where the inherited kernel is the AVX2 one beside the AVX2 vec_dot (the sums these repeat) */
    if (t->type[OXL_TYPE_Q4_K].gemm) t->type[OXL_TYPE_Q4_K].gemm = gemm_q4_K_zmm;
    if (t->type[OXL_TYPE_Q5_K].gemm) t->type[OXL_TYPE_Q5_K].gemm = gemm_q5_K_zmm;
    if (t->type[OXL_TYPE_Q6_K].gemm) t->type[OXL_TYPE_Q6_K].gemm = gemm_q6_K_zmm;
    if (t->type[OXL_TYPE_IQ4_XS].gemm) t->type[OXL_TYPE_IQ4_XS].gemm = gemm_iq4_xs_zmm;
}
