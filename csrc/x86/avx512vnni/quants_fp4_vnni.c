/* MXFP4 on the AVX-512 VNNI tier (gpt-oss's expert type): sixteen weight rows side by side, one int32 lane per
 * row, as quants_x16_vnni.c does for Q4_0.
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row, batched,
 * verify and grouped-expert products), for each output:
 *
 *     out = +0;  for each 32-value block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *
 * isum_b the exact int32 dot of the block's 32 table values (kvalues_mxfp4: twice the E2M1 values, so
 * integers) and activation values, dx_b = 2^(e - 128) (half the E8M0 scale), dx_b * dy_b rounded to float
 * once, the fma rounded once. Where the AVX-512 tier's lane-per-value order (inherited before) cost a convert,
 * a multiply and an fma per 64 values of one row, a register of sixteen rows does one float step per 32
 * values of all sixteen.
 *
 * Tile (built per call from file rows into a per-thread buffer, when more than one pass of 8 activation rows
 * reads it; a decode's one pass decodes the file rows in registers: gpt-oss's experts are read in the file's
 * layout): a group of 16 rows, nb blocks: nb x 512 bytes of weights, then nb x 16 float scales dx (row l's at
 * l). Block b's chunk c (0..7, at 64c) holds row l's values 4c..4c+3 at 4l as kvalues_mxfp4[q] + 12 (0..24,
 * unsigned): vpdpbusd's unsigned operand, the activation's four bytes the broadcast signed one, and each
 * block's sum starts at -12 sum(y). The table is looked up while the tile is built, so a prefill's passes
 * over a group (8 activation rows each) read ready bytes. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "x16_common.h"

#define MX16_OFF 12   /* added to the table values: unsigned 0..24 */
#define MX16_QBYTES 512

static float g_e8m0_half[256];   /* oxl_e8m0_to_fp32_half of every byte */

static inline size_t mx16_group_bytes(int nb) { return (size_t)nb * (MX16_QBYTES + sizeof(float) * X16); }

/* the table + 12 in every 128-bit lane, for vpshufb */
static inline __m512i mx16_table(void) {
    const __m128i kv = _mm_add_epi8(_mm_loadu_si128((const __m128i *)kvalues_mxfp4), _mm_set1_epi8(MX16_OFF));
    return _mm512_broadcast_i32x4(kv);
}

/* Block b of up to 16 file rows (w_row bytes apart) as the tile's 8 chunks and 16 scales; missing rows are
 * zero (value 12, scale 0). x16_rows_dwords gives T_c with row l's qs[4c..4c+3] at dword l; low nibbles are
 * chunk c, high nibbles chunk c + 4. The 16 E8M0 bytes come by one gather (row l's block at l w_row + 17 b; 4 bytes of
 * the 17-byte block) and become 2^(e - 128) in the vector: (e - 1) << 23, or the subnormal 2^21 << e for
 * e < 2, as oxl_e8m0_to_fp32_half. */
OXL_INLINE void mx16_decode(const char *w, size_t w_row, int nrows, const __m512i rowoff, int b, const __m512i kv,
                            __m512i x[8], __m512 *dx) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const char *blk = w + (size_t)b * sizeof(block_mxfp4);
    const __mmask16 live = (__mmask16)((1u << nrows) - 1);
    /* the lanes of missing rows read row 0 (rowoff 0), then count zero */
    const __m512i e = _mm512_and_si512(_mm512_i32gather_epi32(rowoff, blk, 1), _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(_mm512_set1_epi32(2), e), normal, sub);
    *dx = _mm512_maskz_mov_ps(live, _mm512_castsi512_ps(bits));
    __m512i T[4];
    x16_rows_dwords(blk + 1, w_row, nrows, T);   /* the 16 bytes of qs */
    for (int c = 0; c < 4; c++) {
        x[c] = _mm512_shuffle_epi8(kv, _mm512_and_si512(T[c], m4));
        x[c + 4] = _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_srli_epi16(T[c], 4), m4));
    }
}

/* up to 16 file rows in the tile form */
static void mx16_build(const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const __m512i kv = mx16_table(), rowoff = x16_rowoff(w_row, nrows);
    float *sc = (float *)(void *)(dst + (size_t)nb * MX16_QBYTES);
    for (int b = 0; b < nb; b++) {
        __m512i x[8];
        __m512 dx;
        mx16_decode(w, w_row, nrows, rowoff, b, kv, x, &dx);
        uint8_t *q = dst + (size_t)b * MX16_QBYTES;
        for (int c = 0; c < 8; c++) _mm512_storeu_si512((void *)(q + 64 * c), x[c]);
        _mm512_storeu_ps(sc + X16 * b, dx);
    }
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1: from a tile g, or
 * (g NULL: one pass covers every activation row) decoded from the file rows w in registers */
OXL_INLINE void mx16_group(const int C, int nb, const uint8_t *g, const char *w, size_t w_row, int nrows,
                           const char *y, size_t y_row, const x16_act *A, __m512 *acc) {
    const float *sc = g ? (const float *)(const void *)(g + (size_t)nb * MX16_QBYTES) : NULL;
    const __m512i kv = mx16_table(), rowoff = x16_rowoff(w_row, nrows);
    X16_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i x[8];
        __m512 dx;
        if (g) {
            const uint8_t *q = g + (size_t)b * MX16_QBYTES;
            for (int c = 0; c < 8; c++) x[c] = _mm512_loadu_si512((const void *)(q + 64 * c));
            dx = _mm512_loadu_ps(sc + X16 * b);
        } else {
            mx16_decode(w, w_row, nrows, rowoff, b, kv, x, &dx);
        }
        X16_UNROLL for (int j = 0; j < C; j++) {
            const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[b].qs;
            const x16_act a = A[(size_t)j * nb + b];
            acc[j] = x16_step(acc[j], dx, a.d, x16_dot32(x, yq, a.base));
        }
    }
}

OXL_INLINE void mx16_group_store(const int C, int nb, const uint8_t *g, const char *w, size_t w_row, int nrows,
                                 const char *y, size_t y_row, const x16_act *A, float *S, int64_t lds) {
    __m512 acc[X16_VG];
    mx16_group(C, nb, g, w, w_row, nrows, y, y_row, A, acc);
    x16_store(C, acc, S, lds, nrows);
}

/* one pass of C (1..8) activation rows over a group (the tile g, or g NULL: the file rows w) */
static void mx16_pass(int C, int nb, const uint8_t *g, const char *w, size_t w_row, int nrows, const char *y,
                      size_t y_row, const x16_act *A, float *S, int64_t lds) {
#define MX16_PASS(C_) mx16_group_store(C_, nb, g, w, w_row, nrows, y, y_row, A, S, lds)
    X16_BY_C(C, MX16_PASS)
#undef MX16_PASS
}

/* one row, one activation row: the same steps, one output */
static void vec_dot_mxfp4_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_mxfp4 *x = (const block_mxfp4 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const __m256i kv = _mm512_castsi512_si256(mx16_table());
    float acc = 0.0f;
    for (int b = 0; b < n / QK_MXFP4; b++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i u = _mm256_shuffle_epi8(kv, nibbles_32(x[b].qs));
        const int32_t isum = hsum_i32_8(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, yq)) - MX16_OFF * x16_sum_i8_32(y[b].qs);
        acc = fmaf(g_e8m0_half[x[b].e] * fp16(y[b].d), (float)isum, acc);
    }
    *s = acc;
}

/* S[j * lds + r] for nr file rows and nc activation rows; without memory for the per-thread buffer, one
 * output at a time (the same floats) */
static void gemm_mxfp4_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT vw, size_t w_row,
                           int nr, const void *OXL_RESTRICT vy, size_t y_row, int nc) {
    const int nb = n / QK_MXFP4;
    const char *w = (const char *)vw, *y = (const char *)vy;
    uint8_t *tile, *buf = x16_panel((size_t)nc * nb * sizeof(x16_act), mx16_group_bytes(nb), &tile);
    if (!buf) {
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < nc; j++) vec_dot_mxfp4_x16(n, &S[j * lds + r], w + (size_t)r * w_row, y + (size_t)j * y_row);
        return;
    }
    x16_act *A = (x16_act *)(void *)buf;
    x16_prepare_q8_0(MX16_OFF, nb, y, y_row, nc, A);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += X16) {
        const int nrows = OXL_MIN(X16, nr - r);
        const char *g = w + (size_t)r * w_row;
        for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
        if (nc <= X16_VG) {   /* one pass: decoded in registers, no tile */
            mx16_pass(nc, nb, NULL, g, w_row, nrows, y, y_row, A, S + r, lds);
            continue;
        }
        mx16_build(g, w_row, nrows, nb, tile);
        for (int j0 = 0; j0 < nc; j0 += X16_VG)
            mx16_pass(OXL_MIN(X16_VG, nc - j0), nb, tile, NULL, 0, nrows, y + (size_t)j0 * y_row, y_row,
                         A + (size_t)j0 * nb, S + j0 * lds + r, lds);
    }
}

/* MXFP4 of this tier: vec_dot and the multi-row product (one row or many), in the order above */
void oxl_register_avx512vnni_fp4(oxl_kernel_table *t) {
    for (int u = 0; u < 256; u++) g_e8m0_half[u] = oxl_e8m0_to_fp32_half((uint8_t)u);
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_x16;
    t->type[OXL_TYPE_MXFP4].gemm = gemm_mxfp4_x16;
    t->type[OXL_TYPE_MXFP4].gemm_one_row = 1;
}
