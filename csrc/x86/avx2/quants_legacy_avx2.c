/* AVX2+FMA+F16C kernels for 32-value block types in the older per-row order, F32/F16/BF16 (layouts in blocks.h)
 * and the activation quantizers. Of the block types this tier runs Q8_1 and MXFP4 here; the Q4_1 and Q5_0
 * multi-row kernels serve the AVX-512 tier, whose vec_dots sum in this order (this tier's own Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 and IQ4_NL are eight rows a register in the VNNI tier's order: quants_x8_avx2.c,
 * quants_x8b_avx2.c).
 *
 * Every weight block is decoded to 32 int8 lanes in the same order as the activation block's qs
 * (lanes 0..15 = low nibbles / first half, 16..31 = high nibbles / second half), then multiplied
 * with vpmaddubsw. Signed weights (Q5_0, Q8_1, MXFP4) use the sign trick |x| * (y * sign(x)) (Q5_0 in the
 * multi-row kernel as q + 16, see tile_decode); unsigned ones (Q4_1) go straight in and add m * s per block.
 *
 * gemm_rows_* is the multi-row product (matmul): several weight rows x up to 64 activation rows, each
 * output summed in the same order as vec_dot (the canonical order below). */
#include <stddef.h>

#include "../quants_legacy_x86.h"

/* ---- the canonical summation order --------------------------------------------------------
 * Every output of these types (weight row . activation row) is summed in one order, whoever computes
 * it: vec_dot here, the multi-row kernels below, and the AVX-512 tier's vec_dot (quants_legacy_avx512.c,
 * which this order was taken from: two blocks per 512-bit register). With p_i the block's integer
 * products as 8 int32 lanes (lane k = values 4k..4k+3; exact however they are computed) and
 * c_i = dx_i * dy_i:
 *   blocks in pairs (i, i + 1), i even:  even = fma(c_i, p_i, even);  odd = fma(c_i+1, p_i+1, odd)
 *                                        summs = summs + fma(m_i, s_i, m_i+1 * s_i+1)     (_1 types)
 *   an odd last block:                   tail = fma(c, p, 0);  summs = fma(m, s, summs)
 *   result = (hsum8(even + odd) + hsum8(tail)) + summs
 * so a token's logits are the same bits in a one-row decode, a k-token verify, a batch of sequences
 * and a 512-row prefill (the engine's invariant; tests/quant/test_invariance.py). */

OXL_INLINE __m256 block_dot(int kind, __m256i qx, __m256i qy) {
    return kind_unsigned(kind) ? dot_u8_f(qx, qy) : dot_i8_f(qx, qy);
}

/* block_dot of a tile_decode()d block; yo: off * sum of the activation lanes (offset kinds) */
OXL_INLINE __m256 tile_dot(int kind, __m256i qx, __m256i qy, const __m256i *yo) {
    if (tile_off(kind)) return _mm256_cvtepi32_ps(_mm256_sub_epi32(dot_u8_i8(qx, qy), _mm256_load_si256(yo)));
    return block_dot(kind, qx, qy);
}

/* the last step of the order above. Without a tail block hsum8(tail) is +0.0, and adding it is
 * skipped: x + 0.0 differs from x only for x = -0.0, and then (+0.0) + summs == (-0.0) + summs as summs
 * is never -0.0 (it starts at +0.0 and only has values added to it). */
OXL_INLINE float finish(__m256 even, __m256 odd, __m256 tail, int has_tail, float summs) {
    const float h = hsum_f32_8(_mm256_add_ps(even, odd));
    return (has_tail ? h + hsum_f32_8(tail) : h) + summs;
}

/* finish() for C <= 4 outputs of one weight row, summs in the lanes of sm */
OXL_INLINE void finish4(const int C, const __m256 *even, const __m256 *odd, const __m256 *tail, int has_tail, __m128 sm,
                        float *out) {
    __m256 v[4], t[4];
    for (int j = 0; j < 4; j++) {
        v[j] = j < C ? _mm256_add_ps(even[j], odd[j]) : _mm256_setzero_ps();
        t[j] = j < C && has_tail ? tail[j] : _mm256_setzero_ps();
    }
    __m128 h = hsum_f32_8x4(v[0], v[1], v[2], v[3]);
    if (has_tail) h = _mm_add_ps(h, hsum_f32_8x4(t[0], t[1], t[2], t[3]));
    _mm_storeu_ps(out, _mm_add_ps(h, sm));
}

/* ---- vec_dot: one weight row with one activation row ------------------------------------- */

OXL_INLINE void vec_dot_generic(int kind, int n, float *s, const void *vx, const void *vy) {
    const char *x = (const char *)vx, *y = (const char *)vy;
    const size_t bx = kind_block_bytes(kind);
    const int nb = n / 32;
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps(), tail = _mm256_setzero_ps();
    float summs = 0.0f;
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        float dx0, dx1, mx0 = 0, mx1 = 0, dy0, dy1, sy0, sy1;
        const __m256i qx0 = decode(kind, x + i * bx, &dx0, &mx0);
        const __m256i qx1 = decode(kind, x + (i + 1) * bx, &dx1, &mx1);
        const __m256i qy0 = act_block(kind, y, i, &dy0, &sy0);
        const __m256i qy1 = act_block(kind, y, i + 1, &dy1, &sy1);
        even = _mm256_fmadd_ps(_mm256_set1_ps(dx0 * dy0), block_dot(kind, qx0, qy0), even);
        odd = _mm256_fmadd_ps(_mm256_set1_ps(dx1 * dy1), block_dot(kind, qx1, qy1), odd);
        if (kind_unsigned(kind)) summs += fmaf(mx0, sy0, mx1 * sy1);
    }
    if (i < nb) {
        float dx, mx = 0, dy, sy;
        const __m256i qx = decode(kind, x + i * bx, &dx, &mx);
        const __m256i qy = act_block(kind, y, i, &dy, &sy);
        tail = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), block_dot(kind, qx, qy), tail);
        if (kind_unsigned(kind)) summs = fmaf(mx, sy, summs);
    }
    *s = finish(even, odd, tail, nb & 1, summs);
}

#define VEC_DOT(name, kind) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) { \
        vec_dot_generic(kind, n, s, x, y); \
    }

VEC_DOT(vec_dot_q8_1_q8_1_avx2, K_Q8_1)
VEC_DOT(vec_dot_mxfp4_q8_0_avx2, K_MXFP4)

/* ---- multi-row product: nr weight rows x nc (<= 64) activation rows ----------------------
 * The activation rows go in groups of ROW_GROUP; a group's blocks are packed once per call (int8
 * lanes 32-byte aligned, as 34/36-byte blocks split cache lines on loads; scales as floats; off * lane
 * sums for Q4_0/Q5_0) and every weight row of the call is dotted with it, one row after the other
 * (one sequential weight stream, which the hardware prefetcher follows). With more than ROW_GROUP
 * activation rows a weight row is first decoded into a panel in L1 that all groups read. Every
 * (weight row, activation row) has its own even/odd accumulators, tail and summs, and follows the
 * canonical order: the outputs are vec_dot's, bit for bit. Rows too wide for one span (more than
 * PACK_ALL_BLOCKS activation blocks, or PANEL_BLOCKS per row) go 4 weight rows at a time through
 * spans, their running sums kept in memory between spans (exact). */

#define ROW_GROUP 4
#define PANEL_BLOCKS 64    /* span blocks when each weight row's blocks are decoded into a panel */
#define SPAN_DIRECT 256     /* span blocks when the blocks are decoded straight from the weights */

typedef struct {
    __m256 even[OXL_GEMM_MAX_W_ROWS][OXL_GEMM_MAX_ACT_ROWS], odd[OXL_GEMM_MAX_W_ROWS][OXL_GEMM_MAX_ACT_ROWS];
    float summs[OXL_GEMM_MAX_W_ROWS][OXL_GEMM_MAX_ACT_ROWS + ROW_GROUP];
} out_accs;

/* decoded weight blocks of up to OXL_GEMM_MAX_W_ROWS rows for one span */
typedef struct {
    __m256i q[OXL_GEMM_MAX_W_ROWS][PANEL_BLOCKS];   /* as decode() gives them */
    float d[OXL_GEMM_MAX_W_ROWS][PANEL_BLOCKS], m[OXL_GEMM_MAX_W_ROWS][PANEL_BLOCKS];
} rows_panel;

/* one group's packed activation blocks: block s0 + k, row c at [k * ROW_GROUP + c] */
typedef struct {
    __m256i *q, *yo;   /* yo: off * lane sums, for the offset kinds */
    float *d, *s;
} act_pack;

/* R weight rows (row r's block k at w + r * w_row + k * bx, or decoded in P row pr + r from block s0)
 * against the C packed activation rows of G over blocks [s0, s1); the running sums of output (r, j)
 * at A->even[pr + r][j0 + j] etc. `last`: s1 is the row's end, and the outputs are finished into
 * S[j * lds + r] instead of going back to A. */
OXL_INLINE void rows_group(int kind, const int R, const int C, const char *w, size_t w_row, const rows_panel *P,
                           int pr, int s0, int s1, const act_pack *G, out_accs *A, int j0, int last, float *S,
                           int64_t lds) {
    const size_t bx = kind_block_bytes(kind);
    __m256 even[2][ROW_GROUP], odd[2][ROW_GROUP];
    __m128 summs[2];
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < C; j++) {
            even[r][j] = s0 ? A->even[pr + r][j0 + j] : _mm256_setzero_ps();
            odd[r][j] = s0 ? A->odd[pr + r][j0 + j] : _mm256_setzero_ps();
        }
        summs[r] = s0 ? _mm_loadu_ps(&A->summs[pr + r][j0]) : _mm_setzero_ps();
    }
    int i = s0;
    for (; i + 1 < s1; i += 2) {
        const int k = i - s0;
        const __m256i *qy0 = G->q + k * ROW_GROUP, *qy1 = qy0 + ROW_GROUP;
        const float *dy0 = G->d + k * ROW_GROUP, *dy1 = dy0 + ROW_GROUP;
        for (int r = 0; r < R; r++) {
            float dx0, dx1, mx0 = 0, mx1 = 0;
            __m256i qx0, qx1;
            if (P) {
                qx0 = _mm256_load_si256(&P->q[pr + r][k]);
                qx1 = _mm256_load_si256(&P->q[pr + r][k + 1]);
                dx0 = P->d[pr + r][k], dx1 = P->d[pr + r][k + 1], mx0 = P->m[pr + r][k], mx1 = P->m[pr + r][k + 1];
            } else {
                qx0 = tile_decode(kind, w + r * w_row + i * bx, &dx0, &mx0);
                qx1 = tile_decode(kind, w + r * w_row + (i + 1) * bx, &dx1, &mx1);
            }
            /* dx * dy rounded once, as vec_dot's scalar product: the group's 4 products in one multiply,
             * each then broadcast from memory (a load, not a vector-pipe op) */
            float c[2][ROW_GROUP] __attribute__((aligned(16)));
            _mm_store_ps(c[0], _mm_mul_ps(_mm_set1_ps(dx0), _mm_load_ps(dy0)));
            _mm_store_ps(c[1], _mm_mul_ps(_mm_set1_ps(dx1), _mm_load_ps(dy1)));
            for (int j = 0; j < C; j++) {
                even[r][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&c[0][j]),
                                             tile_dot(kind, qx0, _mm256_load_si256(qy0 + j), G->yo + k * ROW_GROUP + j),
                                             even[r][j]);
                odd[r][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&c[1][j]),
                                            tile_dot(kind, qx1, _mm256_load_si256(qy1 + j),
                                                     G->yo + (k + 1) * ROW_GROUP + j), odd[r][j]);
            }
            if (kind_unsigned(kind)) {
                /* per lane j: summs + fma(mx0, sy0_j, mx1 * sy1_j), vec_dot's steps */
                const float *sy0 = G->s + k * ROW_GROUP;
                const __m128 t = _mm_mul_ps(_mm_set1_ps(mx1), _mm_load_ps(sy0 + ROW_GROUP));
                summs[r] = _mm_add_ps(summs[r], _mm_fmadd_ps(_mm_set1_ps(mx0), _mm_load_ps(sy0), t));
            }
        }
    }
    if (!last) {
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < C; j++) {
                A->even[pr + r][j0 + j] = even[r][j];
                A->odd[pr + r][j0 + j] = odd[r][j];
            }
            _mm_storeu_ps(&A->summs[pr + r][j0], summs[r]);
        }
        return;
    }
    const int has_tail = i < s1;   /* the odd last block of the row */
    const int k = i - s0;
    for (int r = 0; r < R; r++) {
        __m256 tail[ROW_GROUP];
        if (has_tail) {
            float dx, mx = 0;
            __m256i qx;
            if (P) {
                qx = _mm256_load_si256(&P->q[pr + r][k]);
                dx = P->d[pr + r][k], mx = P->m[pr + r][k];
            } else {
                qx = tile_decode(kind, w + r * w_row + i * bx, &dx, &mx);
            }
            const __m256 dxv = _mm256_set1_ps(dx);
            for (int j = 0; j < C; j++)
                tail[j] = _mm256_fmadd_ps(_mm256_mul_ps(dxv, _mm256_broadcast_ss(G->d + k * ROW_GROUP + j)),
                                          tile_dot(kind, qx, _mm256_load_si256(G->q + k * ROW_GROUP + j),
                                                   G->yo + k * ROW_GROUP + j),
                                          _mm256_setzero_ps());
            if (kind_unsigned(kind))
                summs[r] = _mm_fmadd_ps(_mm_set1_ps(mx), _mm_load_ps(G->s + k * ROW_GROUP), summs[r]);
        }
        float out[4];
        finish4(C, even[r], odd[r], tail, has_tail, summs[r], out);
        for (int j = 0; j < C; j++) S[j * lds + r] = out[j];
    }
}

#define ROWS_GROUP_ARGS w, w_row, P, pr, s0, s1, G, A, j0, last, S, lds
/* one weight row (R = 1; 2 x 2 measured slower) x C <= ROW_GROUP activation rows */
OXL_INLINE void rows_group_c(int kind, int C, const char *w, size_t w_row, const rows_panel *P, int pr, int s0, int s1,
                             const act_pack *G, out_accs *A, int j0, int last, float *S, int64_t lds) {
    switch (C) {
    case 4: rows_group(kind, 1, 4, ROWS_GROUP_ARGS); break;
    case 3: rows_group(kind, 1, 3, ROWS_GROUP_ARGS); break;
    case 2: rows_group(kind, 1, 2, ROWS_GROUP_ARGS); break;
    default: rows_group(kind, 1, 1, ROWS_GROUP_ARGS); break;
    }
}

/* blocks [s0, s1) of C activation rows into G (rows C..ROW_GROUP-1 of it zero) */
OXL_INLINE void pack_acts(int kind, int C, const char *y, size_t y_row, int s0, int s1, act_pack *G) {
    for (int i = s0; i < s1; i++) {
        const int k = (i - s0) * ROW_GROUP;
        for (int c = 0; c < ROW_GROUP; c++) {
            if (c < C) {
                G->q[k + c] = act_block(kind, y + c * y_row, i, &G->d[k + c], &G->s[k + c]);
                if (tile_off(kind)) G->yo[k + c] = dot_u8_i8(_mm256_set1_epi8((char)tile_off(kind)), G->q[k + c]);
            } else {
                G->q[k + c] = _mm256_setzero_si256();
                if (tile_off(kind)) G->yo[k + c] = _mm256_setzero_si256();
                G->d[k + c] = G->s[k + c] = 0.0f;
            }
        }
    }
}

/* kinds whose decode is more than a load keep a decoded panel when it serves several groups */
static inline int kind_uses_panel(int kind, int nc) { return nc > ROW_GROUP && kind != K_Q8_0 && kind != K_Q8_1; }

/* nr <= OXL_GEMM_MAX_W_ROWS rows, any width: spans with the running sums in memory between them */
OXL_INLINE void gemm_rows_spans(int kind, int n, float *S, int64_t lds, const void *vw, size_t w_row, int nr,
                                const void *vy, size_t y_row, int nc) {
    const int nb = n / 32;
    const size_t bx = kind_block_bytes(kind);
    const char *w = (const char *)vw, *y = (const char *)vy;
    const int use_panel = kind_uses_panel(kind, nc);
    const int span = use_panel ? PANEL_BLOCKS : SPAN_DIRECT;
    out_accs A __attribute__((aligned(32)));
    rows_panel P __attribute__((aligned(32)));
    __m256i gq[SPAN_DIRECT * ROW_GROUP] __attribute__((aligned(32)));
    float gd[SPAN_DIRECT * ROW_GROUP] __attribute__((aligned(16))), gs[SPAN_DIRECT * ROW_GROUP] __attribute__((aligned(16)));
    __m256i gyo[tile_off(kind) ? SPAN_DIRECT * ROW_GROUP : 1] __attribute__((aligned(32)));
    act_pack G = {gq, gyo, gd, gs};
    for (int s0 = 0; s0 < nb; s0 += span) {
        const int s1 = OXL_MIN(s0 + span, nb), last = s1 == nb;
        if (use_panel)
            for (int r = 0; r < nr; r++)
                for (int i = s0; i < s1; i++) {
                    P.m[r][i - s0] = 0.0f;
                    P.q[r][i - s0] = tile_decode(kind, w + r * w_row + i * bx, &P.d[r][i - s0], &P.m[r][i - s0]);
                }
        for (int j = 0; j < nc; j += ROW_GROUP) {
            const int C = OXL_MIN(ROW_GROUP, nc - j);
            pack_acts(kind, C, y + j * y_row, y_row, s0, s1, &G);
            for (int r = 0; r < nr; r++)
                rows_group_c(kind, C, w + r * w_row, w_row, use_panel ? &P : NULL, r, s0, s1, &G, &A, j, last,
                             S + j * lds + r, lds);
        }
    }
}

/* Up to this many (activation row, block) pairs are packed once per call for all its weight rows
 * (40 bytes each, on the stack); wider products go through gemm_rows_spans 4 weight rows at a time. */
#define PACK_ALL_BLOCKS 3072

OXL_INLINE void gemm_rows_generic(int kind, int n, float *S, int64_t lds, const void *vw, size_t w_row, int nr,
                                  const void *vy, size_t y_row, int nc) {
    const int nb = n / 32;
    const int ng = (nc + ROW_GROUP - 1) / ROW_GROUP;
    const char *w = (const char *)vw, *y = (const char *)vy;
    if (ng * ROW_GROUP * nb > PACK_ALL_BLOCKS || nb > PANEL_BLOCKS || nb > SPAN_DIRECT) {
        for (int r = 0; r < nr; r += OXL_GEMM_MAX_W_ROWS) {
            for (int q = r; q < OXL_MIN(r + OXL_GEMM_MAX_W_ROWS, nr); q++)
                oxl_stream_row(w + q * w_row, w_row, w + (size_t)nr * w_row);
            gemm_rows_spans(kind, n, S + r, lds, w + r * w_row, w_row, OXL_MIN(OXL_GEMM_MAX_W_ROWS, nr - r), y, y_row, nc);
        }
        return;
    }
    /* one span covers the rows: every group packed once, then the weight rows one after the other */
    const size_t bx = kind_block_bytes(kind);
    const int use_panel = kind_uses_panel(kind, nc);
    __m256i gq[PACK_ALL_BLOCKS] __attribute__((aligned(32)));
    float gd[PACK_ALL_BLOCKS] __attribute__((aligned(16))), gs[PACK_ALL_BLOCKS] __attribute__((aligned(16)));
    __m256i gyo[tile_off(kind) ? PACK_ALL_BLOCKS : 1] __attribute__((aligned(32)));
    rows_panel P __attribute__((aligned(32)));
    for (int g = 0; g < ng; g++) {
        act_pack G = {gq + g * nb * ROW_GROUP, tile_off(kind) ? gyo + g * nb * ROW_GROUP : gyo, gd + g * nb * ROW_GROUP,
                      gs + g * nb * ROW_GROUP};
        pack_acts(kind, OXL_MIN(ROW_GROUP, nc - g * ROW_GROUP), y + g * ROW_GROUP * y_row, y_row, 0, nb, &G);
    }
    for (int r = 0; r < nr; r++) {
        const char *wr = w + r * w_row;
        oxl_stream_row(wr, w_row, w + (size_t)nr * w_row);
        if (use_panel)
            for (int i = 0; i < nb; i++) {
                P.m[0][i] = 0.0f;
                P.q[0][i] = tile_decode(kind, wr + i * bx, &P.d[0][i], &P.m[0][i]);
            }
        for (int g = 0; g < ng; g++) {
            const act_pack G = {gq + g * nb * ROW_GROUP, tile_off(kind) ? gyo + g * nb * ROW_GROUP : gyo,
                                gd + g * nb * ROW_GROUP, gs + g * nb * ROW_GROUP};
            rows_group_c(kind, OXL_MIN(ROW_GROUP, nc - g * ROW_GROUP), wr, w_row, use_panel ? &P : NULL, 0, 0, nb, &G,
                         NULL, g * ROW_GROUP, 1, S + g * ROW_GROUP * lds + r, lds);
        }
    }
}

#define GEMM_ROWS(name, kind) \
    static void name(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr, \
                     const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        gemm_rows_generic(kind, n, S, lds, w, w_row, nr, y, y_row, nc); \
    }

GEMM_ROWS(gemm_rows_q8_1_avx2, K_Q8_1)
GEMM_ROWS(gemm_rows_mxfp4_avx2, K_MXFP4)

/* ---- activation quantizers, bit-identical to the scalar reference ------------------------ */

/* roundf (half away from zero) of 8 floats, exactly: t = trunc(x); t += sign(x) if |x - t| >= 0.5 */
static inline __m256i round_away_epi32(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_sub_ps(v, t);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 absf = _mm256_andnot_ps(sign, frac);
    const __m256 up = _mm256_cmp_ps(absf, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}

/* one block of 32 floats -> d (returned in *d_f32 and stored as fp16), 32 int8; returns sum(q) */
static inline int quantize_block_q8(const float *x, oxl_half *d_out, float *d_f32, int8_t *qs) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    *d_out = oxl_fp32_to_fp16(d);
    *d_f32 = d;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = round_away_epi32(_mm256_mul_ps(v[k], mul));
    const int sum = hsum_i32_8(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    /* packs work per 128-bit lane; the permute puts the 32 bytes back in order */
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, b);
    return sum;
}

static void quantize_row_q8_0_avx2(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)vy;
    float d;
    for (int64_t i = 0; i < n / QK8_0; i++) quantize_block_q8(x + i * QK8_0, &y[i].d, &d, y[i].qs);
}

static void quantize_row_q8_1_avx2(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        float d;
        const int sum = quantize_block_q8(x + i * QK8_1, &y[i].d, &d, y[i].qs);
        y[i].s = oxl_fp32_to_fp16(sum * d);
    }
}

/* ---- float types against f32 activations -------------------------------------------------- */

static void vec_dot_f32_f32_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const float *x = (const float *)vx, *y = (const float *)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum_f32_8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16_8(const oxl_half *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_bf16_8(const oxl_bf16 *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define VEC_DOT_HALF(name, T, load, to_f32) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) { \
        const T *x = (const T *)vx; \
        const float *y = (const float *)vy; \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps(); \
        int i = 0; \
        for (; i + 32 <= n; i += 32) { \
            a0 = _mm256_fmadd_ps(load(x + i), _mm256_loadu_ps(y + i), a0); \
            a1 = _mm256_fmadd_ps(load(x + i + 8), _mm256_loadu_ps(y + i + 8), a1); \
            a2 = _mm256_fmadd_ps(load(x + i + 16), _mm256_loadu_ps(y + i + 16), a2); \
            a3 = _mm256_fmadd_ps(load(x + i + 24), _mm256_loadu_ps(y + i + 24), a3); \
        } \
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load(x + i), _mm256_loadu_ps(y + i), a0); \
        float sum = hsum_f32_8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++) sum += to_f32(x[i]) * y[i]; \
        *s = sum; \
    }

VEC_DOT_HALF(vec_dot_f16_f32_avx2, oxl_half, load_f16_8, oxl_fp16_to_fp32)
VEC_DOT_HALF(vec_dot_bf16_f32_avx2, oxl_bf16, load_bf16_8, oxl_bf16_to_fp32)

/* ---- registration ------------------------------------------------------------------------- */

/* (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL of this tier are eight rows a register: quants_x8_avx2.c,
 * quants_x8b_avx2.c) */
void oxl_register_avx2_legacy(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q8_1].vec_dot = vec_dot_q8_1_q8_1_avx2;
    t->type[OXL_TYPE_Q8_1].gemm = gemm_rows_q8_1_avx2;
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_avx2;
    t->type[OXL_TYPE_MXFP4].gemm = gemm_rows_mxfp4_avx2;
    t->type[OXL_TYPE_Q8_0].from_float = quantize_row_q8_0_avx2;
    t->type[OXL_TYPE_Q8_1].from_float = quantize_row_q8_1_avx2;
    t->type[OXL_TYPE_F32].vec_dot = vec_dot_f32_f32_avx2;
    t->type[OXL_TYPE_F16].vec_dot = vec_dot_f16_f32_avx2;
    t->type[OXL_TYPE_BF16].vec_dot = vec_dot_bf16_f32_avx2;
}

/* The AVX-512 tier's vec_dot of MXFP4 (quants_legacy_avx512.c) sums in the canonical order above, so this
 * multi-row kernel is exact for it too; dispatch.c registers it for that tier after its own register function
 * (which brings that vec_dot but no gemm). Its Q4_0, Q8_0, Q4_1, Q5_0 and Q5_1 are the VNNI tier's sixteen-row
 * kernels built for it (csrc/x86/avx512/quants_x16*_avx512.c).
 * tests/quant/test_invariance.py checks every usable tier's pairs bit for bit. */
void oxl_register_avx512_gemm_lowbit(oxl_kernel_table *t);  /* quants_lowbit_avx2.c */

void oxl_register_avx512_gemm(oxl_kernel_table *t) {
    oxl_register_avx512_gemm_lowbit(t);
    t->type[OXL_TYPE_MXFP4].gemm = gemm_rows_mxfp4_avx2;
}
