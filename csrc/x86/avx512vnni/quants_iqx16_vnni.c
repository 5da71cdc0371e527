/* IQ4_NL and IQ4_XS on the AVX-512 VNNI tier: sixteen weight rows side by side, one int32 lane per row, as
 * quants_x16_vnni.c does for Q4_0 and Q8_0.
 *
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row, batched
 * and verify products, the repacked prefill tiles), for each output:
 *
 *   IQ4_NL (blocks of 32, Q8_0 activations), as Q4_0:
 *     out = +0;  for each block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *   IQ4_XS (super-blocks of 256, Q8_K activations: one activation scale per 256 values):
 *     out = +0;  for each super-block b in order:  out = fma(dx_b * dy_b, (float)isum_b, out)
 *     isum_b = sum over its 8 sub-blocks ib of (ls_ib - 32) * (exact int dot of the sub-block's 32 values)
 *
 * isum_b is an exact integer (|isum_b| < 2^28), so how it is summed is free; dx_b * dy_b is rounded to float
 * once, the fma once. One float step per activation scale: in a register of sixteen rows the 6-bit
 * sub-block scale multiplies the sub-block's exact int32 dot s (|s| <= 32 * 127 * 128 < 2^19) without vpmulld
 * (two uops): vpshufb splits s into the words (s & 255, s >> 8) and vpdpwssd adds
 * (s & 255) * ls + (s >> 8) * (256 * ls) = ls * s to the super-block's integer, the pair (ls, 256 ls) of
 * int16 made once per sub-block of a group. A super-block then costs one convert, one multiply and one fma
 * per activation row, where a float step per sub-block would cost eight. (The AVX2 order this tier
 * inherited kept 8 float lanes per row, which a lane-per-row register cannot.)
 *
 * The weight is vpdpbusd's unsigned operand: kvalues_iq4nl + 128 (1..241) looked up from the 4-bit indices
 * by vpshufb once per group and sub-block, the activation's four bytes the broadcast signed operand; each
 * sub-block's int32 sum starts at -128 * sum(y) (Q8_0: from its 32 bytes; Q8_K: its two bsums), computed
 * once per activation block.
 *
 * Layout x16 (the repacked copy, or built per call from file rows into a per-thread buffer); a group of 16
 * rows has the file's bytes of those rows:
 *   iq4_nl: as q4_0_x16: nb blocks of 256 bytes (chunk c (0..3) at 64c holds row l's qs[4c..4c+3] at 4l:
 *           low nibbles values 4c..4c+3, high nibbles 16 + 4c..), then nb x 16 fp16 scales (row l's at 2l)
 *   iq4_xs: per super-block 2176 bytes: 8 sub-blocks of 256 bytes (sub-block ib's qs[16ib..16ib+15] as
 *           iq4_nl's block), then the 16 rows' d | scales_h << 16 (4 bytes each, 64 bytes) and scales_l
 *           (4 bytes each, 64 bytes), row l's at 4l
 * A repacked matrix is its whole groups of 16 rows in this form, then its last rows % 16 rows as in the
 * file, and a product's row range starts at a multiple of 16 (forward_impl.h's matmul_share aligns them).
 *
 * IQ4_XS prefill (more than IX16_VG activation rows) first decodes each group once per call into a panel
 * (ixp_build: the weight bytes, the scale pairs, dx as floats), so that the loop over activation rows does
 * per sub-block and activation row only its 8 vpdpbusd, one vpshufb and one vpdpwssd: the same integers. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   /* the i-quants' float steps are a multiply and an add, as the tiers below */
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdlib.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "../../scalar/quants_k.h"
#include "../avx512/iq_block_avx512.h"
#include "x16_common.h"

#define IX16 16          /* rows per group */
#define IX16_VG 8        /* activation rows per pass over a group */


/* kvalues_iq4nl + 128, the weight as vpdpbusd's unsigned operand */
static const uint8_t kvalues_iq4nl_u8[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};

static inline int ix_is_xs(int type) { return type == OXL_TYPE_IQ4_XS; }
static inline int ix_block(int type) { return ix_is_xs(type) ? QK_K : 32; }
static inline int ix_subs(int type) { return ix_is_xs(type) ? QK_K / 32 : 1; }
static inline size_t ix_block_bytes(int type) { return ix_is_xs(type) ? sizeof(block_iq4_xs) : sizeof(block_iq4_nl); }
static inline size_t ix_group_bytes(int type, int nb) { return (size_t)nb * IX16 * ix_block_bytes(type); }

/* ---- building a group ------------------------------------------------------------------------------ */

/* 16 rows' 16 bytes (row l at p + l * stride) as 4 chunks of 64: chunk c holds row l's bytes 4c..4c+3 at 4l */
static inline void ix_transpose16(const uint8_t *p, size_t stride, uint8_t *out) {
    /* within a register of rows 4k..4k+3 (one per 128-bit lane), dword 4r + c to 4c + r */
    const __m512i t = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i a[4];
    for (int k = 0; k < 4; k++) {
        const uint8_t *r = p + (size_t)4 * k * stride;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)r));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + stride)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + 2 * stride)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + 3 * stride)), 3);
        a[k] = _mm512_permutexvar_epi32(t, v);   /* lane c: rows 4k..4k+3's dword c */
    }
    const __m512i b0 = _mm512_shuffle_i32x4(a[0], a[1], 0x44), b1 = _mm512_shuffle_i32x4(a[0], a[1], 0xEE);
    const __m512i b2 = _mm512_shuffle_i32x4(a[2], a[3], 0x44), b3 = _mm512_shuffle_i32x4(a[2], a[3], 0xEE);
    _mm512_storeu_si512((void *)out, _mm512_shuffle_i32x4(b0, b2, 0x88));
    _mm512_storeu_si512((void *)(out + 64), _mm512_shuffle_i32x4(b0, b2, 0xDD));
    _mm512_storeu_si512((void *)(out + 128), _mm512_shuffle_i32x4(b1, b3, 0x88));
    _mm512_storeu_si512((void *)(out + 192), _mm512_shuffle_i32x4(b1, b3, 0xDD));
}

/* the 4 bytes at p + l * stride of 16 rows, lane l */
static inline __m512i ix_gather16(const uint8_t *p, size_t stride) {
    const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)stride));
    return _mm512_i32gather_epi32(off, (const void *)p, 1);
}

/* the low 16 bits of each dword, packed */
static inline __m256i ix_low_halves(__m512i v) {
    const __m512i even = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30, 28, 26, 24, 22, 20, 18, 16,
                                          14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi16(even, v));
}

/* the same for nrows < 16 rows, missing rows zero */
static inline void ix_transpose_part(const uint8_t *p, size_t stride, int nrows, uint8_t *out) {
    memset(out, 0, 256);
    for (int l = 0; l < nrows; l++)
        for (int c = 0; c < 4; c++) memcpy(out + 64 * c + 4 * l, p + (size_t)l * stride + 4 * c, 4);
}

/* Up to 16 file rows (w_row bytes apart) in the x16 form; missing rows are zero, scales too. */
static void ix_build(int type, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = ix_block_bytes(type);
    const uint8_t *wu = (const uint8_t *)w;
    if (!ix_is_xs(type)) {
        uint16_t *sc = (uint16_t *)(void *)(dst + (size_t)nb * 256);
        for (int b = 0; b < nb; b++) {
            const uint8_t *qs = wu + (size_t)b * bx + 2;
            if (nrows == IX16) ix_transpose16(qs, w_row, dst + (size_t)b * 256);
            else ix_transpose_part(qs, w_row, nrows, dst + (size_t)b * 256);
            if (nrows == IX16)   /* d and the first two quant bytes of each row's block: d is the low half */
                _mm256_storeu_si256((__m256i *)(void *)(sc + b * IX16), ix_low_halves(ix_gather16(wu + (size_t)b * bx, w_row)));
            else
                for (int l = 0; l < IX16; l++) {
                    if (l < nrows) memcpy(&sc[b * IX16 + l], wu + (size_t)l * w_row + (size_t)b * bx, 2);
                    else sc[b * IX16 + l] = 0;
                }
        }
        return;
    }
    for (int b = 0; b < nb; b++) {
        uint8_t *q = dst + (size_t)b * IX16 * bx;
        const uint8_t *blk = wu + (size_t)b * bx;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t *qs = blk + offsetof(block_iq4_xs, qs) + 16 * ib;
            if (nrows == IX16) ix_transpose16(qs, w_row, q + 256 * ib);
            else ix_transpose_part(qs, w_row, nrows, q + 256 * ib);
        }
        uint8_t *s = q + 2048;
        if (nrows == IX16) {   /* d | scales_h << 16, and scales_l, of each row */
            _mm512_storeu_si512((void *)s, ix_gather16(blk, w_row));
            _mm512_storeu_si512((void *)(s + 64), ix_gather16(blk + offsetof(block_iq4_xs, scales_l), w_row));
            continue;
        }
        memset(s, 0, 128);
        for (int l = 0; l < nrows; l++) {
            const block_iq4_xs *x = (const block_iq4_xs *)(const void *)(blk + (size_t)l * w_row);
            memcpy(s + 4 * l, &x->d, 2);
            memcpy(s + 4 * l + 2, &x->scales_h, 2);
            memcpy(s + 64 + 4 * l, x->scales_l, 4);
        }
    }
}

/* ---- the activations ------------------------------------------------------------------------------- */

/* per activation block: its scale and where its sub-blocks' int32 sums start, -128 * sum(y) */
typedef struct {
    float d;
    int32_t base[QK_K / 32];
} ix_act_xs;
typedef struct {
    float d;
    int32_t base;
} ix_act_nl;

static inline size_t ix_act_bytes(int type) { return ix_is_xs(type) ? sizeof(ix_act_xs) : sizeof(ix_act_nl); }

static void ix_prepare(int type, int nb, const char *y, size_t y_row, int nc, void *A) {
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            if (ix_is_xs(type)) {
                const block_q8_K *yb = (const block_q8_K *)(const void *)(y + (size_t)j * y_row) + b;
                ix_act_xs *a = (ix_act_xs *)A + (size_t)j * nb + b;
                a->d = yb->d;
                for (int ib = 0; ib < QK_K / 32; ib++) a->base[ib] = -128 * (yb->bsums[2 * ib] + yb->bsums[2 * ib + 1]);
            } else {
                const block_q8_0 *yb = (const block_q8_0 *)(const void *)(y + (size_t)j * y_row) + b;
                ((ix_act_nl *)A)[(size_t)j * nb + b] = (ix_act_nl){fp16(yb->d), -128 * x16_sum_i8_32(yb->qs)};
            }
        }
}

/* acc + vpdpbusd(x, the 4 bytes at p in every lane), the broadcast a memory operand of the instruction (GCC
 * otherwise loads it with a vpbroadcastd of its own) */
static inline __m512i ix_dpbusd_bcast(__m512i acc, __m512i x, const int8_t *p) {
#if defined(__AVX512VNNI__) && defined(__GNUC__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*(const int32_t *)(const void *)p));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, x, x16_bcast4(p));
#endif
}

/* the 8 unsigned weight registers of one 32-value (sub-)block of 16 rows from its 4 nibble chunks: x[c] values
 * 4c..4c+3, x[c + 4] values 16 + 4c.. */
static inline void ix_weights(const uint8_t *q, __m512i table, __m512i x[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; c++) {
        const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * c));
        x[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
        x[c + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
}

/* the exact int32 dot of one 32-value sub-block for 16 rows against activation bytes yq, from `start` */
static inline __m512i ix_sub_dot(const __m512i x[8], const int8_t *yq, int32_t start) {
    /* two chains for latency; integer sums, so their split changes nothing */
    __m512i s0 = _mm512_set1_epi32(start), s1 = _mm512_setzero_si512();
    for (int c = 0; c < 8; c += 2) {
        s0 = ix_dpbusd_bcast(s0, x[c], yq + 4 * c);
        s1 = ix_dpbusd_bcast(s1, x[c + 1], yq + 4 * c + 4);
    }
    return _mm512_add_epi32(s0, s1);
}

/* vpshufb's pattern that turns each int32 s (|s| < 2^23) into the int16 pair (s & 255, s >> 8) */
static inline __m512i ix_split_pattern(void) {
    return _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 1, 2, 4, -128, 5, 6, 8, -128, 9, 10, 12, -128, 13, 14));
}

/* the sub-block scales of an x16 super-block as vpdpwssd's pairs, one sub-block a call: lane l of the result
 * holds the int16 (ls - 32, 256 (ls - 32)) of row l's next sub-block; *lo and *hi start as the super-block's
 * scales_l and scales_h (its d | scales_h << 16 shifted right by 16) and move on by one sub-block */
static inline __m512i ix_scale_pair_next(__m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    /* ls - 32, per row: low 4 bits from scales_l, high 2 from scales_h */
    const __m512i v = _mm512_sub_epi32(
        _mm512_or_si512(_mm512_and_si512(*lo, m4), _mm512_slli_epi32(_mm512_and_si512(*hi, m2), 4)), k32);
    *lo = _mm512_srli_epi32(*lo, 4);
    *hi = _mm512_srli_epi32(*hi, 2);
    return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(v, 24));
}

/* acc[j] (lane l: row l) over all nb blocks of one group against activation rows 0..C-1 */
OXL_INLINE void ix_group(int type, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, __m512 *acc) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl_u8));
    for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    if (!ix_is_xs(type)) {
        const uint8_t *sc = g + (size_t)nb * 256;
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = g + (size_t)b * 256;
            if (ahead) x16_ahead(g, 256 + 2 * IX16, b);   /* a block's share of the group's bytes */
            __m512i x[8];
            ix_weights(q, table, x);
            const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + 32 * b)));
            for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_0 *)(const void *)(y + (size_t)j * y_row))[b].qs;
                const ix_act_nl a = ((const ix_act_nl *)A)[(size_t)j * nb + b];
                const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(a.d));
                acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(ix_sub_dot(x, yq, a.base)), acc[j]);
            }
        }
        return;
    }
    const __m512i split = ix_split_pattern();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * 2176;
        __m512i lo = _mm512_loadu_si512((const void *)(q + 2048 + 64));
        const __m512i dh = _mm512_loadu_si512((const void *)(q + 2048));
        __m512i hi = _mm512_srli_epi32(dh, 16);
        __m512i isum[IX16_VG];
        for (int j = 0; j < C; j++) isum[j] = _mm512_setzero_si512();
        for (int ib = 0; ib < QK_K / 32; ib++) {
            /* each sub-block its share of the super-block's lines: 34 lines at each level at once, per
             * super-block, streamed the 1.7B IQ4_XS matrices at 89% of a plain read (1 thread), these
             * eighths at 100% (2 threads 87% -> 98%; Xeon, CPU time, load ~9, 2026-11-26) */
            if (ahead) x16_ahead(g, 2176 / 8, 8 * b + ib);
            const __m512i ls = ix_scale_pair_next(&lo, &hi);
            __m512i x[8];
            ix_weights(q + 256 * ib, table, x);
            for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[b].qs + 32 * ib;
                const int32_t start = ((const ix_act_xs *)A)[(size_t)j * nb + b].base[ib];
                isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_shuffle_epi8(ix_sub_dot(x, yq, start), split), ls);
            }
        }
        const __m512 dx = _mm512_cvtph_ps(ix_low_halves(dh));
        for (int j = 0; j < C; j++) {
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(((const ix_act_xs *)A)[(size_t)j * nb + b].d));
            acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[j]), acc[j]);
        }
    }
}

OXL_INLINE void ix_group_store(int type, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                               const void *A, int ahead, float *S, int64_t lds, int nrows) {
    __m512 acc[IX16_VG];
    ix_group(type, C, nb, g, y, y_row, A, ahead, acc);
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, acc[j]);
}

/* C as a constant per call (the loops over activation rows unroll) */
OXL_INLINE void ix_group_c(int type, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                           int ahead, float *S, int64_t lds, int nrows) {
#define IX16_C(C_) ix_group_store(type, C_, nb, g, y, y_row, A, ahead, S, lds, nrows); break;
    switch (C) {
    case 8: IX16_C(8)
    case 7: IX16_C(7)
    case 6: IX16_C(6)
    case 5: IX16_C(5)
    case 4: IX16_C(4)
    case 3: IX16_C(3)
    case 2: IX16_C(2)
    default: IX16_C(1)
    }
#undef IX16_C
}

/* ---- IQ4_XS prefill: a group decoded once per call ------------------------------------------------ */

/* Panel of one group per super-block: 8 sub-blocks x 512 bytes (sub-block ib's weight register c, ix_weights's
 * x[c], at 512 ib + 64 c), its 8 scale pairs (ix_scale_pair_next's, 64 bytes each), then the 16 rows' dx as
 * floats. */
#define IXP_SBYTES (4096 + 512 + 64)
#ifndef IXP_ACT_CHUNK
#define IXP_ACT_CHUNK 512   /* activation rows per pass over the groups (a prefill chunk: one pass) */
#endif

static void ixp_build(int nb, const uint8_t *g, int ahead, uint8_t *P) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl_u8));
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * 2176;
        uint8_t *p = P + (size_t)b * IXP_SBYTES;
        if (ahead) x16_ahead(g, 2176, b);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            __m512i x[8];
            ix_weights(q + 256 * ib, table, x);
            for (int c = 0; c < 8; c++) _mm512_store_si512((void *)(p + 512 * ib + 64 * c), x[c]);
        }
        __m512i lo = _mm512_loadu_si512((const void *)(q + 2048 + 64));
        const __m512i dh = _mm512_loadu_si512((const void *)(q + 2048));
        __m512i hi = _mm512_srli_epi32(dh, 16);
        for (int ib = 0; ib < QK_K / 32; ib++)
            _mm512_store_si512((void *)(p + 4096 + 64 * ib), ix_scale_pair_next(&lo, &hi));
        _mm512_store_ps((void *)(p + 4608), _mm512_cvtph_ps(ix_low_halves(dh)));
    }
}

/* acc[j] (lane l: row l) over all nb super-blocks of one panel group against activation rows 0..C-1: the
 * steps of ix_group, the weights read from the panel */
OXL_INLINE void ixp_group(const int C, int nb, const uint8_t *P, const char *y, size_t y_row, const ix_act_xs *A,
                          __m512 *acc) {
    const __m512i split = ix_split_pattern();
    for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = P + (size_t)b * IXP_SBYTES;
        __m512i isum[IX16_VG];
        for (int j = 0; j < C; j++) isum[j] = _mm512_setzero_si512();
        for (int ib = 0; ib < QK_K / 32; ib++) {
            __m512i x[8];
            for (int c = 0; c < 8; c++) x[c] = _mm512_load_si512((const void *)(p + 512 * ib + 64 * c));
            const __m512i ls = _mm512_load_si512((const void *)(p + 4096 + 64 * ib));
            for (int j = 0; j < C; j++) {
                const int8_t *yq = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[b].qs + 32 * ib;
                __m512i dot = _mm512_set1_epi32(A[(size_t)j * nb + b].base[ib]);
                for (int c = 0; c < 8; c++) dot = ix_dpbusd_bcast(dot, x[c], yq + 4 * c);
                isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_shuffle_epi8(dot, split), ls);
            }
        }
        const __m512 dx = _mm512_load_ps((const void *)(p + 4608));
        for (int j = 0; j < C; j++) {
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(A[(size_t)j * nb + b].d));
            acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[j]), acc[j]);
        }
    }
}

OXL_INLINE void ixp_group_store(const int C, int nb, const uint8_t *P, const char *y, size_t y_row,
                                const ix_act_xs *A, float *S, int64_t lds, int nrows) {
    __m512 acc[IX16_VG];
    ixp_group(C, nb, P, y, y_row, A, acc);
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, acc[j]);
}

OXL_INLINE void ixp_group_c(int C, int nb, const uint8_t *P, const char *y, size_t y_row, const ix_act_xs *A, float *S,
                            int64_t lds, int nrows) {
#define IXP_C(C_) ixp_group_store(C_, nb, P, y, y_row, A, S, lds, nrows)
    X16_BY_C(C, IXP_C)
#undef IXP_C
}

/* ix_gemm's IQ4_XS product over a panel per group; -1 if no memory for the per-thread buffer */
static int ixp_gemm(int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr, const char *y,
                    size_t y_row, int nc) {
    const int nb = n / QK_K;
    const size_t gbytes = ix_group_bytes(OXL_TYPE_IQ4_XS, nb);   /* a multiple of 64 */
    const size_t abytes = ((size_t)nc * nb * sizeof(ix_act_xs) + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_panel_memory(abytes + gbytes + (size_t)nb * IXP_SBYTES);
    if (!buf) return -1;
    ix_act_xs *A = (ix_act_xs *)(void *)buf;
    uint8_t *tile = buf + abytes, *panel = tile + gbytes;
    ix_prepare(OXL_TYPE_IQ4_XS, nb, y, y_row, nc, A);
    const char *end = w + (size_t)nr * w_row;
    /* activation rows a chunk at a time, so that a long batch's stay near while every group passes (each chunk
     * decodes the groups again: 32 or 64 rows a chunk measured 10-15% slower than 512 on 2048 x 8192) */
    for (int jc = 0; jc < nc; jc += IXP_ACT_CHUNK) {
        const int jend = OXL_MIN(nc, jc + IXP_ACT_CHUNK);
        for (int r = 0; r < nr; r += IX16) {
            const int nrows = OXL_MIN(IX16, nr - r);
            const char *g = w + (size_t)r * w_row;
            int ahead = 1;   /* a repacked group: x16_ahead */
            if (!packed || nrows < IX16) {   /* file rows (a repacked matrix's last rows % 16 are too) */
                for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
                ix_build(OXL_TYPE_IQ4_XS, g, w_row, nrows, nb, tile);
                g = (const char *)tile, ahead = 0;
            }
            ixp_build(nb, (const uint8_t *)g, ahead, panel);
            for (int j0 = jc; j0 < jend; j0 += IX16_VG)
                ixp_group_c(OXL_MIN(IX16_VG, jend - j0), nb, panel, y + (size_t)j0 * y_row, y_row, A + (size_t)j0 * nb,
                            S + j0 * lds + r, lds, nrows);
        }
    }
    return 0;
}

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or a repacked matrix's rows from a group
 * start) and nc activation rows; -1 if no memory for the per-thread buffer */
OXL_INLINE int ix_gemm(int type, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                       const char *y, size_t y_row, int nc) {
    if (ix_is_xs(type) && nc > IX16_VG) return ixp_gemm(packed, n, S, lds, w, w_row, nr, y, y_row, nc);
    const int nb = n / ix_block(type);
    const size_t gbytes = ix_group_bytes(type, nb);
    const size_t abytes = ((size_t)nc * nb * ix_act_bytes(type) + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_panel_memory(abytes + gbytes);
    if (!buf) return -1;
    void *A = buf;
    uint8_t *tile = buf + abytes;
    ix_prepare(type, nb, y, y_row, nc, A);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += IX16) {
        const int nrows = OXL_MIN(IX16, nr - r);
        const char *g = w + (size_t)r * w_row;
        int ahead = 1;   /* a repacked group: x16_ahead */
        if (!packed || nrows < IX16) {   /* file rows (a repacked matrix's last rows % 16 are too) */
            for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
            ix_build(type, g, w_row, nrows, nb, tile);
            g = (const char *)tile, ahead = 0;
        }
        for (int j0 = 0; j0 < nc; j0 += IX16_VG)
            ix_group_c(type, OXL_MIN(IX16_VG, nc - j0), nb, (const uint8_t *)g, y + (size_t)j0 * y_row, y_row,
                       (const char *)A + (size_t)j0 * nb * ix_act_bytes(type), ahead, S + j0 * lds + r, lds, nrows);
    }
    return 0;
}

/* ---- one row, one activation row: the same steps, one output ------------------------------------- */

static inline __m256i ix_weights_32(const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl_u8));
    return _mm256_shuffle_epi8(table, nibbles_32(qs));
}

static void vec_dot_iq4_nl_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_iq4_nl *x = (const block_iq4_nl *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int b = 0; b < n / 32; b++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i t = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), yq);   /* 128 y */
        const int32_t isum = hsum_i32_8(
            _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ix_weights_32(x[b].qs), yq), t));
        acc = fmaf(fp16(x[b].d) * fp16(y[b].d), (float)isum, acc);
    }
    *s = acc;
}

static void vec_dot_iq4_xs_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_iq4_xs *x = (const block_iq4_xs *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int b = 0; b < n / QK_K; b++) {
        __m256i lanes = _mm256_setzero_si256();
        int32_t start = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int ls = oxl_iq4xs_scale(&x[b], ib);   /* ls - 32 */
            const __m256i yq = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * ib));
            const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ix_weights_32(x[b].qs + 16 * ib), yq);
            lanes = _mm256_add_epi32(lanes, _mm256_mullo_epi32(d, _mm256_set1_epi32(ls)));
            start += ls * -128 * (y[b].bsums[2 * ib] + y[b].bsums[2 * ib + 1]);
        }
        const int32_t isum = hsum_i32_8(lanes) + start;
        acc = fmaf(fp16(x[b].d) * y[b].d, (float)isum, acc);
    }
    *s = acc;
}

static void ix_vec_dot(int type, int n, float *s, const void *x, const void *y) {
    if (ix_is_xs(type)) vec_dot_iq4_xs_x16(n, s, x, y);
    else vec_dot_iq4_nl_x16(n, s, x, y);
}

/* ---- the products ---------------------------------------------------------------------------------- */

/* the file-layout products (x16_common.h's x16_gemm_file) */
static void gemm_iq4_nl_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                                 int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x16_gemm_file(ix_gemm, ix_vec_dot, OXL_TYPE_IQ4_NL, n, S, lds, w, w_row, nr, y, y_row, nc);
}
static void gemm_iq4_xs_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                                 int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    x16_gemm_file(ix_gemm, ix_vec_dot, OXL_TYPE_IQ4_XS, n, S, lds, w, w_row, nr, y, y_row, nc);
}
/* the repacked products (rows from a group start); -1: no memory, the caller reads the file rows */
static int gemm_iq4_nl_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                           const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return ix_gemm(OXL_TYPE_IQ4_NL, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}
static int gemm_iq4_xs_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                           const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return ix_gemm(OXL_TYPE_IQ4_XS, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}

/* the repacked layout has the file's bytes per row */
static int64_t iq4_nl_x16_row_size(int64_t cols) {
    return cols > 0 && cols % 32 == 0 ? cols / 32 * (int64_t)sizeof(block_iq4_nl) : -1;
}
static int64_t iq4_xs_x16_row_size(int64_t cols) {
    return cols > 0 && cols % QK_K == 0 ? cols / QK_K * (int64_t)sizeof(block_iq4_xs) : -1;
}

/* the repack (x16_common.h's x16_repack) */
static void repack_iq4_nl_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x16_repack(ix_build, OXL_TYPE_IQ4_NL, (int)(cols / 32), (size_t)(cols / 32) * sizeof(block_iq4_nl), w, dst, rows);
}
static void repack_iq4_xs_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    x16_repack(ix_build, OXL_TYPE_IQ4_XS, (int)(cols / QK_K), (size_t)(cols / QK_K) * sizeof(block_iq4_xs), w, dst, rows);
}

/* ---- the 1- to 3-bit i-quants: a per-call int8 panel for prefill ---------------------------------- */

/* Their order is the one every tier keeps (csrc/iq_decode.h): per super-block one exact integer,
 *     sum += (float)bsum * (dx * dy);  result = IQ_FACTOR * sum
 * so a panel that sums each super-block exactly gives the AVX-512 tier's vec_dot and multi-row kernel (which
 * this tier inherits for decode and small batches) bit for bit. A product with at least IQP_MIN_ROWS activation
 * rows decodes each group of 16 weight rows once into the x16 int8 form (w + 128 as u8; the runs' scales as
 * bytes, per 16 values for IQ2_XS / IQ2_S / IQ1_M, per 32 for the others; dx as floats) and then, for every
 * activation row, does per scale span 4 or 8 vpdpbusd of 16 rows from -128 * bsum, one vpmulld by the span's
 * scale and an add: where the AVX-512 kernel pays the decode per 4 activation rows and a reduction per row.
 * Panel of one group per super-block: 8 runs x 512 bytes (run ib, chunk c (0..7) at 512 ib + 64 c: row l's
 * w + 128 of values 4c..4c+3 at 4l), then 256 bytes of scales (span s's at 16 s + l), then 16 floats dx. */
#define IQP_MIN_ROWS 4   /* fewer activation rows: the inherited kernel */
#define IQP_TYPES 7
#define IQP_QBYTES 4096
#define IQP_SBYTES (IQP_QBYTES + 256 + 64)   /* a super-block of a group */

static oxl_gemm_fn g_iq_small[IQP_TYPES];   /* the inherited kernels, index iqp_index(type) */

static inline int iqp_index(int type) {
    switch (type) {
    case OXL_TYPE_IQ2_XXS: return 0;
    case OXL_TYPE_IQ2_XS: return 1;
    case OXL_TYPE_IQ2_S: return 2;
    case OXL_TYPE_IQ3_XXS: return 3;
    case OXL_TYPE_IQ3_S: return 4;
    case OXL_TYPE_IQ1_S: return 5;
    default: return 6;
    }
}
/* a scale per 16 values (else per 32) */
static inline int iqp_per16(int type) {
    return type == OXL_TYPE_IQ2_XS || type == OXL_TYPE_IQ2_S || type == OXL_TYPE_IQ1_M;
}

/* up to 16 file rows (w_row bytes apart) of nb super-blocks as a panel; missing rows are zero */
static void iqp_build(int type, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    const size_t bx = iq_block_bytes(type);
    const int per16 = iqp_per16(type);
    _Alignas(64) uint8_t tmp[IX16 * QK_K];
    _Alignas(64) int16_t ls[IX16][16];
    float dx[IX16];
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int b = 0; b < nb; b++) {
        uint8_t *q = dst + (size_t)b * IQP_SBYTES;
        for (int l = 0; l < IX16; l++) {
            if (l >= nrows) {
                memset(tmp + l * QK_K, 0x80, QK_K);
                memset(ls[l], 0, sizeof(ls[l]));
                dx[l] = 0.0f;
                continue;
            }
            const char *blk = w + (size_t)l * w_row + (size_t)b * bx;
            __m512i mag[4];
            __mmask64 neg[4];
            __m256i ls16;
            iq_block_avx512(type, blk, mag, neg, &ls16);
            for (int p = 0; p < 4; p++)
                _mm512_store_si512((void *)(tmp + l * QK_K + 64 * p),
                                   _mm512_xor_si512(_mm512_mask_sub_epi8(mag[p], neg[p], _mm512_setzero_si512(), mag[p]), flip));
            _mm256_store_si256((__m256i *)(void *)ls[l], ls16);
            dx[l] = _cvtsh_ss(iq_block_d(type, blk));
        }
        for (int k = 0; k < QK_K / 16; k++) ix_transpose16(tmp + 16 * k, QK_K, q + 256 * k);
        uint8_t *sc = q + IQP_QBYTES;
        for (int sp = 0; sp < 16; sp++)
            for (int l = 0; l < IX16; l++) sc[16 * sp + l] = (uint8_t)(per16 ? ls[l][sp] : sp < 8 ? ls[l][2 * sp] : 0);
        memcpy(q + IQP_QBYTES + 256, dx, sizeof(dx));
    }
}

/* per activation super-block: its scale and where each scale span's int32 sums start, -128 * sum(y) */
typedef struct {
    float d;
    int32_t base[16];
} iqp_act;

static void iqp_prepare(int type, int nb, const char *y, size_t y_row, int nc, iqp_act *A) {
    const int per16 = iqp_per16(type);
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nb; b++) {
            const block_q8_K *yb = (const block_q8_K *)(const void *)(y + (size_t)j * y_row) + b;
            iqp_act *a = A + (size_t)j * nb + b;
            a->d = yb->d;
            for (int sp = 0; sp < 16; sp++)
                a->base[sp] = per16 ? -128 * yb->bsums[sp] : sp < 8 ? -128 * (yb->bsums[2 * sp] + yb->bsums[2 * sp + 1]) : 0;
        }
}

/* the int32 dot of chunks c0 .. c0 + nch - 1 of a run for 16 rows against activation bytes yq, from `start` */
static inline __m512i iqp_dot(const uint8_t *q, int c0, int nch, const int8_t *yq, int32_t start) {
    __m512i s0 = _mm512_set1_epi32(start), s1 = _mm512_setzero_si512();
    for (int c = c0; c < c0 + nch; c += 2) {
        s0 = ix_dpbusd_bcast(s0, _mm512_load_si512((const void *)(q + 64 * c)), yq + 4 * c);
        s1 = ix_dpbusd_bcast(s1, _mm512_load_si512((const void *)(q + 64 * c + 64)), yq + 4 * c + 4);
    }
    return _mm512_add_epi32(s0, s1);
}

/* sum[j] (lane l: row l) over all nb super-blocks of one panel group against activation rows 0..C-1 */
OXL_INLINE void iqp_group(int type, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                          const iqp_act *A, __m512 *sum) {
    const int per16 = iqp_per16(type);
    for (int j = 0; j < C; j++) sum[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * IQP_SBYTES, *sc = q + IQP_QBYTES;
        __m512i isum[IX16_VG];
        for (int j = 0; j < C; j++) isum[j] = _mm512_setzero_si512();
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t *qr = q + 512 * ib;
            if (per16) {
                const __m512i ls0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sc + 32 * ib)));
                const __m512i ls1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sc + 32 * ib + 16)));
                for (int j = 0; j < C; j++) {
                    const int8_t *yq = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[b].qs + 32 * ib;
                    const iqp_act *a = A + (size_t)j * nb + b;
                    const __m512i lo = _mm512_mullo_epi32(iqp_dot(qr, 0, 4, yq, a->base[2 * ib]), ls0);
                    const __m512i hi = _mm512_mullo_epi32(iqp_dot(qr, 4, 4, yq, a->base[2 * ib + 1]), ls1);
                    isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(lo, hi));
                }
            } else {
                const __m512i ls = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16 * ib)));
                for (int j = 0; j < C; j++) {
                    const int8_t *yq = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[b].qs + 32 * ib;
                    const iqp_act *a = A + (size_t)j * nb + b;
                    isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(iqp_dot(qr, 0, 8, yq, a->base[ib]), ls));
                }
            }
        }
        const __m512 dx = _mm512_loadu_ps((const void *)(q + IQP_QBYTES + 256));
        for (int j = 0; j < C; j++) {
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(A[(size_t)j * nb + b].d));
            sum[j] = _mm512_add_ps(sum[j], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[j]), d));
        }
    }
}

OXL_INLINE void iqp_group_store(int type, const int C, int nb, const uint8_t *g, const char *y, size_t y_row,
                                const iqp_act *A, float *S, int64_t lds, int nrows) {
    __m512 sum[IX16_VG];
    iqp_group(type, C, nb, g, y, y_row, A, sum);
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    const __m512 f = _mm512_set1_ps(iq_factor(type));
    for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, _mm512_mul_ps(f, sum[j]));
}

OXL_INLINE void iqp_group_c(int type, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const iqp_act *A,
                            float *S, int64_t lds, int nrows) {
#define IQP_C(C_) iqp_group_store(type, C_, nb, g, y, y_row, A, S, lds, nrows)
    X16_BY_C(C, IQP_C)
#undef IQP_C
}

OXL_INLINE void iqp_gemm(int type, int n, float *S, int64_t lds, const void *vw, size_t w_row, int nr, const void *vy,
                         size_t y_row, int nc) {
    const int nb = n / QK_K;
    const char *w = (const char *)vw, *y = (const char *)vy;
    const size_t abytes = ((size_t)nc * nb * sizeof(iqp_act) + 63) & ~(size_t)63;
    uint8_t *buf = nc >= IQP_MIN_ROWS ? (uint8_t *)oxl_panel_memory(abytes + (size_t)nb * IQP_SBYTES) : NULL;
    if (!buf) {   /* few activation rows, or no memory for the panel: the inherited kernel, the same floats */
        g_iq_small[iqp_index(type)](n, S, lds, vw, w_row, nr, vy, y_row, nc);
        return;
    }
    iqp_act *A = (iqp_act *)(void *)buf;
    uint8_t *panel = buf + abytes;
    iqp_prepare(type, nb, y, y_row, nc, A);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += IX16) {
        const int nrows = OXL_MIN(IX16, nr - r);
        const char *g = w + (size_t)r * w_row;
        for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
        iqp_build(type, g, w_row, nrows, nb, panel);
        for (int j0 = 0; j0 < nc; j0 += IX16_VG)
            iqp_group_c(type, OXL_MIN(IX16_VG, nc - j0), nb, panel, y + (size_t)j0 * y_row, y_row, A + (size_t)j0 * nb,
                        S + j0 * lds + r, lds, nrows);
    }
}

#define IQP_GEMM(t, T)                                                                                         \
    static void gemm_##t##_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,          \
                               size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {       \
        iqp_gemm(T, n, S, lds, w, w_row, nr, y, y_row, nc);                                                    \
    }
IQP_GEMM(iq2_xxs, OXL_TYPE_IQ2_XXS)
IQP_GEMM(iq2_xs, OXL_TYPE_IQ2_XS)
IQP_GEMM(iq2_s, OXL_TYPE_IQ2_S)
IQP_GEMM(iq3_xxs, OXL_TYPE_IQ3_XXS)
IQP_GEMM(iq3_s, OXL_TYPE_IQ3_S)
IQP_GEMM(iq1_s, OXL_TYPE_IQ1_S)
IQP_GEMM(iq1_m, OXL_TYPE_IQ1_M)
#undef IQP_GEMM

/* IQ4_NL and IQ4_XS of this tier: vec_dot, the file-layout products (one row or many) and the repacked layout,
 * all in the order above */
void oxl_register_avx512vnni_iqx16(oxl_kernel_table *t) {
    t->type[OXL_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_x16;
    t->type[OXL_TYPE_IQ4_NL].gemm = gemm_iq4_nl_file_x16;
    t->type[OXL_TYPE_IQ4_NL].gemm_one_row = 1;
    t->type[OXL_TYPE_IQ4_NL].repacked =
        (oxl_repacked_layout){"iq4_nl_x16", iq4_nl_x16_row_size, repack_iq4_nl_x16, gemm_iq4_nl_x16};
    t->type[OXL_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_x16;
    t->type[OXL_TYPE_IQ4_XS].gemm = gemm_iq4_xs_file_x16;
    t->type[OXL_TYPE_IQ4_XS].gemm_one_row = 1;
    t->type[OXL_TYPE_IQ4_XS].repacked =
        (oxl_repacked_layout){"iq4_xs_x16", iq4_xs_x16_row_size, repack_iq4_xs_x16, gemm_iq4_xs_x16};
    /* the i-quants: the panel for prefill beside the inherited multi-row kernel (the AVX-512 tier's, whose
     * sums the panel repeats) */
    static const struct { int type; oxl_gemm_fn gemm; } iq[IQP_TYPES] = {
        {OXL_TYPE_IQ2_XXS, gemm_iq2_xxs_x16}, {OXL_TYPE_IQ2_XS, gemm_iq2_xs_x16}, {OXL_TYPE_IQ2_S, gemm_iq2_s_x16},
        {OXL_TYPE_IQ3_XXS, gemm_iq3_xxs_x16}, {OXL_TYPE_IQ3_S, gemm_iq3_s_x16}, {OXL_TYPE_IQ1_S, gemm_iq1_s_x16},
        {OXL_TYPE_IQ1_M, gemm_iq1_m_x16}};
    for (int i = 0; i < IQP_TYPES; i++)
        if (t->type[iq[i].type].gemm) {
            g_iq_small[iqp_index(iq[i].type)] = t->type[iq[i].type].gemm;
            t->type[iq[i].type].gemm = iq[i].gemm;
        }
}
