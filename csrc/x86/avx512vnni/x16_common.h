/* What the sixteen-row kernels of the AVX-512 VNNI tier share (quants_x16_vnni.c, quants_lowbit_vnni.c,
 * quants_fp4_vnni.c, quants_kx16_vnni.c, quants_iqx16_vnni.c).
 *
 * A register holds one int32 lane per weight row, sixteen rows side by side; the weight is vpdpbusd's unsigned
 * operand (the file's values plus an offset), an activation's four bytes the broadcast signed one, and each
 * block's int32 sum starts at -offset * sum(y) of its activation values, which is computed once per activation
 * block (x16_act). A product walks its weight rows a group of 16 at a time (x16_gemm): a repacked matrix's
 * whole groups are read where they stand, file rows are built into a per-thread tile first; then passes of up
 * to X16_VG activation rows over the group, each leaving one float register a row (x16_store).
 *
 * Static inline: included by the tier's files only, compiled with the tier's flags. */
#ifndef OXL_X86_AVX512VNNI_X16_COMMON_H
#define OXL_X86_AVX512VNNI_X16_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../blocks.h"
#include "../../kernels.h"

#define X16 16      /* weight rows per group: one int32 lane each */
#define X16_VG 8    /* activation rows per pass over a group (X16_BY_C spells out 1..8) */
/* before a loop over a pass's C activation rows: unrolled whole, so that its accumulators stay in registers
 * (GCC may not see that by itself where the pass is not inlined into the product) */
#define X16_UNROLL _Pragma("GCC unroll 8")


/* per activation block: its scale and where its int32 sums start */
typedef struct {
    float d;
    int32_t base;   /* -offset * sum(y) */
} x16_act;

/* vpdpbusd: acc + the four u8 x s8 products of each int32 lane. On this tier the instruction. The AVX-512 tier
 * (no VNNI) builds these files too, with X16_AVX512BW defined (csrc/x86/avx512/quants_*x16*_avx512.c): there
 * vpmaddubsw (pairs of products into int16, saturating) + vpmaddwd by ones + vpaddd, split so that every
 * int16 is exact, and the integer sums, so the floats, are this tier's:
 *   x16_dpbusd / x16_dpbusd256: any u8 weight: its low seven bits and its top bit apart (a pair of the
 *       first |.| <= 2 * 127 * 128, of the second 128 (s0 + s1) in [-32768, 32512]), three uops more
 *   x16_dpbusd_u7: weights u <= 127 (a pair |.| <= 2 * 127 * 128 = 32512), one vpmaddubsw */
#ifdef X16_AVX512BW
OXL_INLINE __m512i x16_madd_ones(__m512i p16) { return _mm512_madd_epi16(p16, _mm512_set1_epi16(1)); }
OXL_INLINE __m512i x16_dpbusd_u7(__m512i acc, __m512i u, __m512i s) {
    return _mm512_add_epi32(acc, x16_madd_ones(_mm512_maddubs_epi16(u, s)));
}
OXL_INLINE __m512i x16_dpbusd(__m512i acc, __m512i u, __m512i s) {
    const __m512i lo = _mm512_and_si512(u, _mm512_set1_epi8(0x7F)), hi = _mm512_and_si512(u, _mm512_set1_epi8((char)0x80));
    return _mm512_add_epi32(_mm512_add_epi32(acc, x16_madd_ones(_mm512_maddubs_epi16(lo, s))),
                            x16_madd_ones(_mm512_maddubs_epi16(hi, s)));
}
OXL_INLINE __m256i x16_dpbusd256(__m256i acc, __m256i u, __m256i s) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i lo = _mm256_and_si256(u, _mm256_set1_epi8(0x7F)), hi = _mm256_and_si256(u, _mm256_set1_epi8((char)0x80));
    return _mm256_add_epi32(_mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, s), ones)),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(hi, s), ones));
}
/* vpdpwssd: acc + the two int16 x int16 products of each lane (vpmaddwd's sum wraps as vpdpwssd's does) */
OXL_INLINE __m512i x16_dpwssd(__m512i acc, __m512i a, __m512i b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
#else
#define x16_dpwssd _mm512_dpwssd_epi32
#define x16_dpbusd_u7 _mm512_dpbusd_epi32
#define x16_dpbusd _mm512_dpbusd_epi32
#define x16_dpbusd256 _mm256_dpbusd_epi32
#endif

/* the exact sum of 32 int8 values */
static inline int32_t x16_sum_i8_32(const int8_t *qs) {
    const __m256i s = x16_dpbusd256(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                    _mm256_loadu_si256((const __m256i *)(const void *)qs));
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* nblk Q8_0 activation blocks of each of nc rows (y_row bytes apart), against weights stored as value + off */
static inline void x16_prepare_q8_0(int off, int nblk, const char *y, size_t y_row, int nc, x16_act *A) {
    for (int j = 0; j < nc; j++)
        for (int b = 0; b < nblk; b++) {
            const block_q8_0 *yb = (const block_q8_0 *)(const void *)(y + (size_t)j * y_row) + b;
            A[(size_t)j * nblk + b] = (x16_act){_cvtsh_ss(yb->d), -off * x16_sum_i8_32(yb->qs)};
        }
}

/* four activation bytes in every lane */
OXL_INLINE __m512i x16_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* the exact int32 dot of one 32-value block of 16 rows (x[c]: values 4c..4c+3 of every row) with activation
 * bytes yq, from `start`; on the AVX-512 tier for weights u <= 31 only (the 4- and 5-bit types): there the
 * products of four chunks summed in int16 (|.| <= 4 * 2 * 31 * 128 = 31744), one vpmaddwd per four chunks */
OXL_INLINE __m512i x16_dot32(const __m512i x[8], const int8_t *yq, int32_t start) {
#ifdef X16_AVX512BW
    __m512i h0 = _mm512_maddubs_epi16(x[0], x16_bcast4(yq)), h1 = _mm512_maddubs_epi16(x[4], x16_bcast4(yq + 16));
    for (int c = 1; c < 4; c++) {
        h0 = _mm512_add_epi16(h0, _mm512_maddubs_epi16(x[c], x16_bcast4(yq + 4 * c)));
        h1 = _mm512_add_epi16(h1, _mm512_maddubs_epi16(x[c + 4], x16_bcast4(yq + 16 + 4 * c)));
    }
    return _mm512_add_epi32(_mm512_add_epi32(x16_madd_ones(h0), x16_madd_ones(h1)), _mm512_set1_epi32(start));
#else
    /* two chains for latency; integer sums, so their split changes nothing */
    __m512i s0 = _mm512_set1_epi32(start), s1 = _mm512_setzero_si512();
    for (int c = 0; c < 8; c += 2) {
        s0 = _mm512_dpbusd_epi32(s0, x[c], x16_bcast4(yq + 4 * c));
        s1 = _mm512_dpbusd_epi32(s1, x[c + 1], x16_bcast4(yq + 4 * c + 4));
    }
    return _mm512_add_epi32(s0, s1);
#endif
}

/* one block's float step for 16 rows: acc = fma(dx * dy, (float)isum, acc), dx * dy rounded once */
OXL_INLINE __m512 x16_step(__m512 acc, __m512 dx, float dy, __m512i isum) {
    return _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dy)), _mm512_cvtepi32_ps(isum), acc);
}

/* the first nrows lanes of acc[j] to S + j * lds, for activation rows j < C */
OXL_INLINE void x16_store(int C, const __m512 *acc, float *S, int64_t lds, int nrows) {
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    X16_UNROLL for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, acc[j]);
}

/* row l's byte offset l w_row in lane l, 0 for the missing rows l >= nrows (for gathers of one field of each
 * of 16 file rows; 16 w_row fits an int32 for any real width) */
OXL_INLINE __m512i x16_rowoff(size_t w_row, int nrows) {
    return _mm512_maskz_mov_epi32((__mmask16)((1u << nrows) - 1),
                                  _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                     _mm512_set1_epi32((int)w_row)));
}

/* 16 bytes of each of up to 16 file rows (row l's at p + l w_row; rows l >= nrows zero) as T[c] (c = 0..3) with
 * row l's dword c at dword l: rows g, g + 4, g + 8, g + 12 into the four 128-bit lanes of Z_g, then the in-lane
 * 4 x 4 dword transpose */
OXL_INLINE void x16_rows_dwords(const char *p, size_t w_row, int nrows, __m512i T[4]) {
    __m128i r[X16];
    for (int l = 0; l < X16; l++)
        r[l] = l < nrows ? _mm_loadu_si128((const __m128i *)(const void *)(p + (size_t)l * w_row)) : _mm_setzero_si128();
    __m512i z[4];
    for (int g = 0; g < 4; g++)
        z[g] = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(r[g]), r[g + 4], 1),
                                                     r[g + 8], 2), r[g + 12], 3);
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    T[0] = _mm512_unpacklo_epi64(t0, t2);
    T[1] = _mm512_unpackhi_epi64(t0, t2);
    T[2] = _mm512_unpacklo_epi64(t1, t3);
    T[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* A repacked matrix streams group after group. Each step of a group's walk (a block, a super-block: `step`
 * bytes of the group in its order, the quants and scales of the group counted in proportion) asks for its
 * exact share of the lines X16_AHEAD_L2 bytes on into L2 (T1) and X16_AHEAD_L1 bytes on into L1 (T0), so
 * that every line of the stream is asked for once at each level. A T0 prefetch from DRAM holds one of the
 * core's few L1 fill buffers until its line arrives, an L2 one does not; the near T0 then takes lines from
 * L2 (quants_kx16_vnni.c's scheme for the K-quants). The 1.7B files' matrices of each type repacked and
 * cycled (DRAM), one activation row, GB/s and share of a plain read in the same interleaved rounds (Xeon,
 * CPU time per thread, load ~8 on 2 cores, 2026-11-26), T0 2048 bytes on alone -> these two levels:
 *     1 thread: Q4_0 11.7 -> 12.8 (94% -> 99%), Q8_0 13.0 -> 14.0 (106% -> 113%), Q4_1 11.5 -> 12.8 (91% -> 101%),
 *               Q5_0 11.4 -> 12.5 (89% -> 97%), IQ4_XS 10.2 -> 11.2 (81% -> 93%)
 *     2 threads: Q4_0 22.9 -> 24.6 (89% -> 95%), Q8_0 24.9 -> 26.3 (102% -> 109%), Q4_1 22.9 -> 24.7 (90% -> 98%),
 *               Q5_0 20.8 -> 23.1 (88% -> 95%), IQ4_XS 18.8 -> 20.1 (80% -> 86%)
 * L2 at 3072, 6144 or 8192 (the K-quants') bytes gained less; L1 at 1024 (L2 4096) or 4096 (L2 8192) no more. */
#ifndef X16_AHEAD_L2
#define X16_AHEAD_L2 4096
#endif
#ifndef X16_AHEAD_L1
#define X16_AHEAD_L1 2048
#endif
OXL_INLINE void x16_ahead(const uint8_t *g, size_t step, int i) {
    for (size_t o = ((size_t)i * step + 63) & ~(size_t)63; o < (size_t)(i + 1) * step; o += 64) {
        if (X16_AHEAD_L2) __builtin_prefetch(g + X16_AHEAD_L2 + o, 0, 2);
        if (X16_AHEAD_L1) __builtin_prefetch(g + X16_AHEAD_L1 + o, 0, 3);
    }
}

/* this thread's buffer for a product: the prepared activations (act_bytes, rounded up to 64), then a tile of
 * tile_bytes at *tile; NULL without memory */
static inline uint8_t *x16_panel(size_t act_bytes, size_t tile_bytes, uint8_t **tile) {
    const size_t abytes = (act_bytes + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_panel_memory(abytes + tile_bytes);
    *tile = buf + abytes;
    return buf;
}

/* PASS(c) with the run-time count C (1..X16_VG) of a pass's activation rows as the constant c, so that the
 * loops over activation rows unroll */
#define X16_BY_C(C, PASS)                                                                                      \
    switch (C) {                                                                                               \
    case 8: PASS(8); break;                                                                                    \
    case 7: PASS(7); break;                                                                                    \
    case 6: PASS(6); break;                                                                                    \
    case 5: PASS(5); break;                                                                                    \
    case 4: PASS(4); break;                                                                                    \
    case 3: PASS(3); break;                                                                                    \
    case 2: PASS(2); break;                                                                                    \
    default: PASS(1); break;                                                                                   \
    }

/* One sixteen-row kernel family, for x16_gemm: `kind` is the family's own tag, handed to its functions.
 *   prepare: the nc activation rows' per-block data into A, act_row bytes a row
 *   build:   up to 16 file rows (w_row bytes apart; missing rows zero) into a group of the tile form
 *   pass:    S[j * lds + l] for the group's rows l < nrows and activation rows j < C (C <= X16_VG), A the
 *            first of those rows' prepared data; ahead > 0: the group is a repacked matrix's, prefetch on
 *            (x16_ahead's two levels, or a family's own distance in bytes) */
typedef void (*x16_build_fn)(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst);
typedef struct {
    int kind;
    int nb;             /* blocks (of the family's size) per weight row */
    size_t act_row;     /* bytes of prepared data per activation row */
    size_t group_bytes; /* bytes of one group of 16 rows in the tile form */
    int ahead;          /* prefetch in a repacked matrix: > 0 (the pass's meaning), 0 none */
    void (*prepare)(int kind, int nb, const char *y, size_t y_row, int nc, void *A);
    x16_build_fn build;
    void (*pass)(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A, int ahead,
                 float *S, int64_t lds, int nrows);
} x16_family;

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or with `packed` a repacked matrix's rows from
 * a group start, whose last rows % 16 are file rows) and nc activation rows; -1 if no memory for this thread's
 * buffer (the prepared activations, then one group's tile). Always inlined, with f a constant where it is
 * called: the family's functions are then direct calls, which GCC specializes for the kind and `packed`. */
OXL_INLINE int x16_gemm(const x16_family *f, int packed, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                        const char *y, size_t y_row, int nc) {
    uint8_t *tile, *buf = x16_panel((size_t)nc * f->act_row, f->group_bytes, &tile);
    if (!buf) return -1;
    f->prepare(f->kind, f->nb, y, y_row, nc, buf);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += X16) {
        const int nrows = OXL_MIN(X16, nr - r);
        const char *g = w + (size_t)r * w_row;
        int ahead = f->ahead;
        if (!packed || nrows < X16) {   /* file rows, streamed in and built into the tile */
            for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
            f->build(f->kind, g, w_row, nrows, f->nb, tile);
            g = (const char *)tile, ahead = 0;
        }
        for (int j0 = 0; j0 < nc; j0 += X16_VG)
            f->pass(f->kind, OXL_MIN(X16_VG, nc - j0), f->nb, (const uint8_t *)g, y + (size_t)j0 * y_row, y_row,
                    buf + (size_t)j0 * f->act_row, ahead, S + j0 * lds + r, lds, nrows);
    }
    return 0;
}

/* A family's product of file rows (w_row bytes apart): its x16 product `gemm` (packed 0), which builds each
 * group into the per-thread tile; without memory for that buffer, one output at a time by its vec_dot (the
 * same floats). Always inlined, gemm and vec_dot constants where it is called: direct calls. */
typedef int (*x16_product_fn)(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                              const char *y, size_t y_row, int nc);
typedef void (*x16_vec_dot_fn)(int kind, int n, float *s, const void *x, const void *y);
OXL_INLINE void x16_gemm_file(x16_product_fn gemm, x16_vec_dot_fn vec_dot, int kind, int n, float *S, int64_t lds,
                              const void *w, size_t w_row, int nr, const void *y, size_t y_row, int nc) {
    if (!gemm(kind, 0, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc)) return;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++)
            vec_dot(kind, n, &S[j * lds + r], (const char *)w + (size_t)r * w_row, (const char *)y + (size_t)j * y_row);
}

/* A family's repack: rows of `row` bytes (nb blocks of its size), whole groups of 16 built into its x16 form
 * by `build`, the last rows % 16 copied as they are. Run once at load, per thread over a row range that
 * matmul.c's oxl_repack splits: each thread's range must start at a group boundary of the whole matrix, so
 * the split there is in multiples of 16 rows. */
OXL_INLINE void x16_repack(x16_build_fn build, int kind, int nb, size_t row, const void *w, void *dst, int64_t rows) {
    int64_t r = 0;
    for (; r + X16 <= rows; r += X16) build(kind, (const char *)w + r * row, row, X16, nb, (uint8_t *)dst + r * row);
    memcpy((char *)dst + r * row, (const char *)w + r * row, (size_t)(rows - r) * row);
}

#endif
