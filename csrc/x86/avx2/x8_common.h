/* What the eight-row kernels of the AVX2 tier share (quants_x8_avx2.c, quants_x8b_avx2.c, quants_kx8_avx2.c).
 *
 * A ymm register holds one int32 (or float) lane per weight row, eight rows side by side, as the AVX-512 VNNI
 * tier's sixteen-row kernels hold sixteen (csrc/x86/avx512vnni/x16_common.h, whose scheme this follows; the
 * byte layouts are that tier's with 8 rows a chunk instead of 16). AVX2 has no vpdpbusd: four weight bytes of
 * a row against four broadcast activation bytes go through vpmaddubsw (unsigned weight x signed activation,
 * int16 pairs) and vpmaddwd by ones (int32 lanes), exact while a pair's sum fits int16 (each kernel says why
 * its values do). A product walks its weight rows a group of 8 at a time (x8_gemm, the walk of
 * ../rows_common.h that the sixteen-row tiers' x16_gemm is too): a repacked matrix's whole groups are read
 * where they stand, file rows are built into a per-thread tile first; then passes of up to X8_VG activation
 * rows over the group, each leaving one float register a row (x8_store).
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
#include "../rows_common.h"

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

/* A repacked matrix streams group after group: each step of a group's walk (a block: `step` bytes of the group
 * in its order, its quants and scales counted in proportion) asks for its exact share of the lines
 * X8_AHEAD_L2 bytes on into L2 (T1) and X8_AHEAD_L1 bytes on into L1 (T0), so that every line of the stream
 * is asked for once at each level (x16_common.h's x16_ahead, whose figures chose the distances). The 1.7B
 * files' matrices repacked and cycled from DRAM, one activation row, 1 thread, share of a plain read in the
 * same interleaved rounds (bench/stream_kinds.py, AVX2 tier, Xeon, CPU time, load ~7, 2026-11-26), T0 2048
 * bytes on alone -> these two levels: Q4_0 79%, 78% -> 86%, 90%; Q5_0 77%, 78% -> 84%, 85%. In cache
 * (kernel_builds.py, Q4_0 2048 x 2048) the same GOPS: 1 row 106.2 -> 106.5, 64 rows 145.5 -> 147.4. */
#ifndef X8_AHEAD_L2
#define X8_AHEAD_L2 4096
#endif
#ifndef X8_AHEAD_L1
#define X8_AHEAD_L1 2048
#endif
OXL_INLINE void x8_ahead(const uint8_t *g, size_t step, int i) {
    for (size_t o = ((size_t)i * step + 63) & ~(size_t)63; o < (size_t)(i + 1) * step; o += 64) {
        if (X8_AHEAD_L2) __builtin_prefetch(g + X8_AHEAD_L2 + o, 0, 2);
        if (X8_AHEAD_L1) __builtin_prefetch(g + X8_AHEAD_L1 + o, 0, 3);
    }
}

/* PASS(c) with the run-time count C (1..X8_VG) of a pass's activation rows as the constant c */
#define X8_BY_C(C, PASS)                                                                                       \
    switch (C) {                                                                                               \
    case 4: PASS(4); break;                                                                                    \
    case 3: PASS(3); break;                                                                                    \
    case 2: PASS(2); break;                                                                                    \
    default: PASS(1); break;                                                                                   \
    }

/* One eight-row kernel family (../rows_common.h's rows_family: prepare, build, pass; a group is 8 rows) */
typedef rows_family x8_family;

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or with `packed` a repacked matrix's rows from
 * a group start, whose last rows % 8 are file rows) and nc activation rows, passes of up to X8_VG of them; -1
 * if no memory for this thread's buffer. Always inlined, with f a constant where it is called. */
OXL_INLINE int x8_gemm(const x8_family *f, int packed, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                       const char *y, size_t y_row, int nc) {
    return rows_gemm(f, X8, X8_VG, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* a family's product of file rows, and its repack (8-row groups): rows_common.h's */
OXL_INLINE void x8_gemm_file(rows_product_fn gemm, rows_vec_dot_fn vec_dot, int kind, int n, float *S, int64_t lds,
                             const void *w, size_t w_row, int nr, const void *y, size_t y_row, int nc) {
    rows_gemm_file(gemm, vec_dot, kind, n, S, lds, w, w_row, nr, y, y_row, nc);
}
OXL_INLINE void x8_repack(rows_build_fn build, int kind, int nb, size_t row, const void *w, void *dst, int64_t rows) {
    rows_repack(build, X8, kind, nb, row, w, dst, rows);
}

#endif
