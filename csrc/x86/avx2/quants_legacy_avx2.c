/* AVX2+FMA+F16C kernels for the 32-value block types and F32/F16/BF16 (layouts in blocks.h).
 *
 * Every weight block is decoded to 32 int8 lanes in the same order as the activation block's qs
 * (lanes 0..15 = low nibbles / first half, 16..31 = high nibbles / second half), then multiplied
 * with vpmaddubsw. Signed weights (Q4_0, Q5_0, Q8_0, IQ4_NL) use the sign trick
 * |x| * (y * sign(x)); unsigned ones (Q4_1, Q5_1) go straight in and add m * s per block.
 *
 * gemm_tile_* computes a 4 x nc block of outputs (4 weight rows, nc activation rows), TILE_C
 * activation rows per pass, so that each decoded weight block is used for TILE_C activation rows
 * and each activation block for 4 weight rows. */
#include "../quants_legacy_x86.h"

/* ---- vec_dot: one weight row with one activation row ------------------------------------- */

OXL_INLINE void vec_dot_generic(int kind, int n, float *s, const void *vx, const void *vy) {
    const char *x = (const char *)vx, *y = (const char *)vy;
    const size_t bx = kind_block_bytes(kind);
    const int nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float summs = 0.0f;
    int i = 0;
    /* two blocks per step, two accumulators: hides the FMA latency */
    for (; i + 1 < nb; i += 2) {
        float dx0, dx1, mx0 = 0, mx1 = 0, dy0, dy1, sy0, sy1;
        const __m256i qx0 = decode(kind, x + i * bx, &dx0, &mx0);
        const __m256i qx1 = decode(kind, x + (i + 1) * bx, &dx1, &mx1);
        const __m256i qy0 = act_block(kind, y, i, &dy0, &sy0);
        const __m256i qy1 = act_block(kind, y, i + 1, &dy1, &sy1);
        const __m256 p0 = kind_unsigned(kind) ? dot_u8_f(qx0, qy0) : dot_i8_f(qx0, qy0);
        const __m256 p1 = kind_unsigned(kind) ? dot_u8_f(qx1, qy1) : dot_i8_f(qx1, qy1);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dx0 * dy0), p0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dx1 * dy1), p1, acc1);
        if (kind_unsigned(kind)) summs += mx0 * sy0 + mx1 * sy1;
    }
    for (; i < nb; i++) {
        float dx, mx = 0, dy, sy;
        const __m256i qx = decode(kind, x + i * bx, &dx, &mx);
        const __m256i qy = act_block(kind, y, i, &dy, &sy);
        const __m256 p = kind_unsigned(kind) ? dot_u8_f(qx, qy) : dot_i8_f(qx, qy);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, acc0);
        if (kind_unsigned(kind)) summs += mx * sy;
    }
    *s = hsum_f32_8(_mm256_add_ps(acc0, acc1)) + summs;
}

#define VEC_DOT(name, kind) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) { \
        vec_dot_generic(kind, n, s, x, y); \
    }

VEC_DOT(vec_dot_q4_0_q8_0_avx2, K_Q4_0)
VEC_DOT(vec_dot_q4_1_q8_1_avx2, K_Q4_1)
VEC_DOT(vec_dot_q5_0_q8_0_avx2, K_Q5_0)
VEC_DOT(vec_dot_q5_1_q8_1_avx2, K_Q5_1)
VEC_DOT(vec_dot_q8_0_q8_0_avx2, K_Q8_0)
VEC_DOT(vec_dot_q8_1_q8_1_avx2, K_Q8_1)
VEC_DOT(vec_dot_iq4_nl_q8_0_avx2, K_IQ4_NL)

/* ---- gemm tile: 4 weight rows x nc activation rows ---------------------------------------- */

#define TILE_R 4

/* Activation rows per tile pass. 4 x 3 accumulators spill a few of the 16 ymm registers, yet
 * measured a little faster than 4 x 2 and 4 x 1 (each decoded weight block serves more rows). */
#define TILE_C 3

/* Q4_0 and Q5_0 go in as unsigned q + off (off = 8, 16): sum((q + off) y) - off sum(y), with off sum(y)
 * computed once per activation block; saves the sign ops on every weight block */
static inline int tile_off(int kind) { return kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0; }

/* one weight block in the form the tile dot takes: q + off for Q4_0/Q5_0, else as decode() gives it */
OXL_INLINE __m256i tile_decode(int kind, const char *blk, float *d, float *m) {
    *m = 0.0f;
    if (kind == K_Q4_0) {
        *d = fp16(((const block_q4_0 *)blk)->d);
        return nibbles_32(((const block_q4_0 *)blk)->qs);
    }
    if (kind == K_Q5_0) {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        *d = fp16(b->d);
        return _mm256_or_si256(nibbles_32(b->qs), _mm256_and_si256(bits_32(b->qh), _mm256_set1_epi8(0x10)));
    }
    return decode(kind, blk, d, m);
}

/* block i of RC activation rows: int8 lanes, scale, sum (the _1 kinds) and off * sum of the lanes */
typedef struct {
    __m256i q[TILE_C], ysum_off[TILE_C];
    __m256 d[TILE_C];
    float s[TILE_C];
} act_blocks;

OXL_INLINE void load_act_blocks(int kind, const int RC, const char *y, size_t y_row, int i, act_blocks *A) {
    const int off = tile_off(kind);
    for (int j = 0; j < RC; j++) {
        float dy;
        A->q[j] = act_block(kind, y + j * y_row, i, &dy, &A->s[j]);
        A->d[j] = _mm256_set1_ps(dy);
        if (off) A->ysum_off[j] = dot_u8_i8(_mm256_set1_epi8((char)off), A->q[j]);
    }
}

/* acc[j] += dx dy_j (qx . qy_j) and summs[j] += mx sy_j for the RC activation rows of A */
OXL_INLINE void block_dot_rows(int kind, const int RC, __m256i qx, float dx, float mx, const act_blocks *A,
                               __m256 *acc, float *summs) {
    const int off = tile_off(kind), as_unsigned = kind_unsigned(kind) || off;
    const __m256 dxv = _mm256_set1_ps(dx);
    /* |x| * (y * sign(x)): exact even for x = -128 */
    const __m256i ax = as_unsigned ? qx : _mm256_sign_epi8(qx, qx);
    for (int j = 0; j < RC; j++) {
        const __m256i sy_j = as_unsigned ? A->q[j] : _mm256_sign_epi8(A->q[j], qx);
        __m256i d32 = dot_u8_i8(ax, sy_j);
        if (off) d32 = _mm256_sub_epi32(d32, A->ysum_off[j]);
        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dxv, A->d[j]), _mm256_cvtepi32_ps(d32), acc[j]);
        if (kind_unsigned(kind)) summs[j] += mx * A->s[j];
    }
}

/* RC (<= TILE_C) activation rows against TILE_R weight rows; S[j * lds + r] */
OXL_INLINE void tile_generic(int kind, const int RC, int nb, float *S, int64_t lds, const char *w, size_t w_row,
                             const char *y, size_t y_row) {
    const size_t bx = kind_block_bytes(kind);
    __m256 acc[TILE_R][TILE_C];
    float summs[TILE_R][TILE_C] = {{0}};
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < RC; j++) acc[r][j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        act_blocks A;
        load_act_blocks(kind, RC, y, y_row, i, &A);
#pragma GCC unroll 4
        for (int r = 0; r < TILE_R; r++) {
            float dx, mx;
            const __m256i qx = tile_decode(kind, w + r * w_row + i * bx, &dx, &mx);
            block_dot_rows(kind, RC, qx, dx, mx, &A, acc[r], summs[r]);
        }
    }
    for (int j = 0; j < RC; j++)
        for (int r = 0; r < TILE_R; r++) S[j * lds + r] = hsum_f32_8(acc[r][j]) + summs[r][j];
}

/* Prefill: a panel of PANEL_BLOCKS blocks of the TILE_R weight rows is decoded once into L1 (int8 lanes
 * in the form the dot takes, scales as floats) and then used by every activation row of the call,
 * instead of being decoded again for each TILE_C of them (decoding is most of the work for Q5_0). */
#define PANEL_BLOCKS 64

typedef struct {
    __m256i q[TILE_R][PANEL_BLOCKS];   /* unsigned (q + off) for the offset/unsigned kinds, else signed */
    float d[TILE_R][PANEL_BLOCKS], m[TILE_R][PANEL_BLOCKS];
} tile_panel;

OXL_INLINE void panel_decode(int kind, tile_panel *P, const char *w, size_t w_row, int i0, int pb) {
    const size_t bx = kind_block_bytes(kind);
    for (int r = 0; r < TILE_R; r++)
        for (int i = 0; i < pb; i++)
            P->q[r][i] = tile_decode(kind, w + r * w_row + (size_t)(i0 + i) * bx, &P->d[r][i], &P->m[r][i]);
}

/* RC activation rows against the panel's blocks [i0, i0 + pb); S = (first ? 0 : S) + result */
OXL_INLINE void tile_panel_rows(int kind, const int RC, const tile_panel *P, int i0, int pb, float *S, int64_t lds,
                                int first, const char *y, size_t y_row) {
    __m256 acc[TILE_R][TILE_C];
    float summs[TILE_R][TILE_C] = {{0}};
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < RC; j++) acc[r][j] = _mm256_setzero_ps();
    for (int i = 0; i < pb; i++) {
        act_blocks A;
        load_act_blocks(kind, RC, y, y_row, i0 + i, &A);
#pragma GCC unroll 4
        for (int r = 0; r < TILE_R; r++)
            block_dot_rows(kind, RC, _mm256_load_si256(&P->q[r][i]), P->d[r][i], P->m[r][i], &A, acc[r], summs[r]);
    }
    for (int j = 0; j < RC; j++)
        for (int r = 0; r < TILE_R; r++) {
            const float v = hsum_f32_8(acc[r][j]) + summs[r][j];
            S[j * lds + r] = first ? v : S[j * lds + r] + v;
        }
}

OXL_INLINE void gemm_tile_generic(int kind, int n, float *S, int64_t lds, const void *w, size_t w_row,
                                  const void *y, size_t y_row, int nc) {
    const int nb = n / 32;
    const char *wc = (const char *)w, *yc = (const char *)y;
    if (nc > TILE_C) {
        tile_panel P __attribute__((aligned(32)));
        for (int i0 = 0; i0 < nb; i0 += PANEL_BLOCKS) {
            const int pb = OXL_MIN(PANEL_BLOCKS, nb - i0);
            panel_decode(kind, &P, wc, w_row, i0, pb);
            int j = 0;
            for (; j + TILE_C <= nc; j += TILE_C)
                tile_panel_rows(kind, TILE_C, &P, i0, pb, S + j * lds, lds, i0 == 0, yc + j * y_row, y_row);
            switch (nc - j) {
            case 1: tile_panel_rows(kind, 1, &P, i0, pb, S + j * lds, lds, i0 == 0, yc + j * y_row, y_row); break;
#if TILE_C > 2
            case 2: tile_panel_rows(kind, 2, &P, i0, pb, S + j * lds, lds, i0 == 0, yc + j * y_row, y_row); break;
#endif
            default: break;
            }
        }
        return;
    }
    int j = 0;
    for (; j + TILE_C <= nc; j += TILE_C) tile_generic(kind, TILE_C, nb, S + j * lds, lds, wc, w_row, yc + j * y_row, y_row);
    switch (nc - j) {   /* the last < TILE_C activation rows */
    case 1: tile_generic(kind, 1, nb, S + j * lds, lds, wc, w_row, yc + j * y_row, y_row); break;
#if TILE_C > 2
    case 2: tile_generic(kind, 2, nb, S + j * lds, lds, wc, w_row, yc + j * y_row, y_row); break;
#endif
    default: break;
    }
}

#define GEMM_TILE(name, kind) \
    static void name(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, \
                     const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        gemm_tile_generic(kind, n, S, lds, w, w_row, y, y_row, nc); \
    }

GEMM_TILE(gemm_tile_q4_0_avx2, K_Q4_0)
GEMM_TILE(gemm_tile_q4_1_avx2, K_Q4_1)
GEMM_TILE(gemm_tile_q5_0_avx2, K_Q5_0)
GEMM_TILE(gemm_tile_q5_1_avx2, K_Q5_1)
GEMM_TILE(gemm_tile_q8_0_avx2, K_Q8_0)
GEMM_TILE(gemm_tile_q8_1_avx2, K_Q8_1)
GEMM_TILE(gemm_tile_iq4_nl_avx2, K_IQ4_NL)

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

void oxl_register_avx2_legacy(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx2;
    t->type[OXL_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_avx2;
    t->type[OXL_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx2;
    t->type[OXL_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_avx2;
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx2;
    t->type[OXL_TYPE_Q8_1].vec_dot = vec_dot_q8_1_q8_1_avx2;
    t->type[OXL_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_avx2;
    t->type[OXL_TYPE_Q4_0].gemm_tile = gemm_tile_q4_0_avx2;
    t->type[OXL_TYPE_Q4_1].gemm_tile = gemm_tile_q4_1_avx2;
    t->type[OXL_TYPE_Q5_0].gemm_tile = gemm_tile_q5_0_avx2;
    t->type[OXL_TYPE_Q5_1].gemm_tile = gemm_tile_q5_1_avx2;
    t->type[OXL_TYPE_Q8_0].gemm_tile = gemm_tile_q8_0_avx2;
    t->type[OXL_TYPE_Q8_1].gemm_tile = gemm_tile_q8_1_avx2;
    t->type[OXL_TYPE_IQ4_NL].gemm_tile = gemm_tile_iq4_nl_avx2;
    t->type[OXL_TYPE_Q8_0].from_float = quantize_row_q8_0_avx2;
    t->type[OXL_TYPE_Q8_1].from_float = quantize_row_q8_1_avx2;
    t->type[OXL_TYPE_F32].vec_dot = vec_dot_f32_f32_avx2;
    t->type[OXL_TYPE_F16].vec_dot = vec_dot_f16_f32_avx2;
    t->type[OXL_TYPE_BF16].vec_dot = vec_dot_bf16_f32_avx2;
}
