/* What the eight-row kernels of the AVX2 tier share (quants_x8_avx2.c, quants_kx8_avx2.c).
 *
 * A ymm register holds one int32 (or float) lane per weight row, eight rows side by side, as the AVX-512 VNNI
 * tier's sixteen-row kernels hold sixteen (csrc/x86/avx512vnni/x16_common.h, whose scheme this follows; the
 * byte layouts are that tier's with 8 rows a chunk instead of 16). AVX2 has no vpdpbusd: four weight bytes of
 * a row against four broadcast activation bytes go through vpmaddubsw (unsigned weight x signed activation,
 * int16 pairs) and vpmaddwd by ones (int32 lanes), exact while a pair's sum fits int16 (each kernel says why
 * its values do). A product walks its weight rows a group of 8 at a time (x8_gemm): a repacked matrix's whole
 * groups are read where they stand, file rows are built into a per-thread tile first; then passes of up to
 * X8_VG activation rows over the group, each leaving one float register a row (x8_store).
 *
 * Static inline: included by the tier's files only, compiled with the tier's flags. */
#ifndef OXL_X86_AVX2_X8_COMMON_H
#define OXL_X86_AVX2_X8_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../blocks.h"
#include "../../kernels.h"

#define X8 8        /* weight rows per group: one int32 lane each */
#define X8_VG 4     /* activation rows per pass over a group (X8_BY_C spells out 1..4) */
#define X8_UNROLL _Pragma("GCC unroll 8")


/* four activation bytes in every lane (a broadcast load) */
OXL_INLINE __m256i x8_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* the first nrows lanes of acc[j] to S + j * lds, for activation rows j < C */
OXL_INLINE void x8_store(int C, const __m256 *acc, float *S, int64_t lds, int nrows) {
    if (nrows == X8) {
        X8_UNROLL for (int j = 0; j < C; j++) _mm256_storeu_ps(S + j * lds, acc[j]);
        return;
    }
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nrows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    X8_UNROLL for (int j = 0; j < C; j++) _mm256_maskstore_ps(S + j * lds, m, acc[j]);
}

/* 16 bytes of each of up to 8 file rows (row l's at p + l w_row; rows l >= nrows zero) as T[c] (c = 0..3)
 * with row l's dword c at dword l: rows l and l + 4 in the two 128-bit lanes of Z_l, then the in-lane 4 x 4
 * dword transpose */
OXL_INLINE void x8_rows_dwords(const char *p, size_t w_row, int nrows, __m256i T[4]) {
    __m128i r[X8];
    for (int l = 0; l < X8; l++)
        r[l] = l < nrows ? _mm_loadu_si128((const __m128i *)(const void *)(p + (size_t)l * w_row)) : _mm_setzero_si128();
    __m256i z[4];
    for (int g = 0; g < 4; g++) z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(r[g]), r[g + 4], 1);
    const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    T[0] = _mm256_unpacklo_epi64(t0, t2);
    T[1] = _mm256_unpackhi_epi64(t0, t2);
    T[2] = _mm256_unpacklo_epi64(t1, t3);
    T[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* this thread's buffer for a product: the prepared activations (act_bytes, rounded up to 64), then a tile of
 * tile_bytes at *tile; NULL without memory */
static inline uint8_t *x8_panel(size_t act_bytes, size_t tile_bytes, uint8_t **tile) {
    const size_t abytes = (act_bytes + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_panel_memory(abytes + tile_bytes);
    *tile = buf + abytes;
    return buf;
}

/* PASS(c) with the run-time count C (1..X8_VG) of a pass's activation rows as the constant c */
#define X8_BY_C(C, PASS)                                                                                       \
    switch (C) {                                                                                               \
    case 4: PASS(4); break;                                                                                    \
    case 3: PASS(3); break;                                                                                    \
    case 2: PASS(2); break;                                                                                    \
    default: PASS(1); break;                                                                                   \
    }

/* One eight-row kernel family, for x8_gemm (x16_common.h's x16_family with 8 rows a group):
 *   prepare: the nc activation rows' per-block data into A, act_row bytes a row
 *   build:   up to 8 file rows (w_row bytes apart; missing rows zero) into a group of the tile form
 *   pass:    S[j * lds + l] for the group's rows l < nrows and activation rows j < C (C <= vg), A the
 *            first of those rows' prepared data; ahead > 0: the group is a repacked matrix's, prefetch that
 *            many bytes on */
typedef struct {
    int kind;
    int nb;             /* blocks (of the family's size) per weight row */
    size_t act_row;     /* bytes of prepared data per activation row */
    size_t group_bytes; /* bytes of one group of 8 rows in the tile form */
    int ahead;          /* prefetch distance in a repacked matrix, bytes */
    void (*prepare)(int kind, int nb, const char *y, size_t y_row, int nc, void *A);
    void (*build)(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst);
    void (*pass)(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A, int ahead,
                 float *S, int64_t lds, int nrows);
    int vg;             /* activation rows per pass, the pass's C <= vg; 0: X8_VG */
} x8_family;

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or with `packed` a repacked matrix's rows from
 * a group start, whose last rows % 8 are file rows) and nc activation rows; -1 if no memory for this thread's
 * buffer. Always inlined, with f a constant where it is called. */
OXL_INLINE int x8_gemm(const x8_family *f, int packed, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                       const char *y, size_t y_row, int nc) {
    uint8_t *tile, *buf = x8_panel((size_t)nc * f->act_row, f->group_bytes, &tile);
    if (!buf) return -1;
    const int vg = f->vg ? f->vg : X8_VG;
    f->prepare(f->kind, f->nb, y, y_row, nc, buf);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += X8) {
        const int nrows = OXL_MIN(X8, nr - r);
        const char *g = w + (size_t)r * w_row;
        int ahead = f->ahead;
        if (!packed || nrows < X8) {   /* file rows, streamed in and built into the tile */
            for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
            f->build(f->kind, g, w_row, nrows, f->nb, tile);
            g = (const char *)tile, ahead = 0;
        }
        for (int j0 = 0; j0 < nc; j0 += vg)
            f->pass(f->kind, OXL_MIN(vg, nc - j0), f->nb, (const uint8_t *)g, y + (size_t)j0 * y_row, y_row,
                    buf + (size_t)j0 * f->act_row, ahead, S + j0 * lds + r, lds, nrows);
    }
    return 0;
}

#endif
