/* The walk over weight-row groups that the many-row kernels of the x86 tiers share, whatever their width:
 * the AVX2 tier's eight rows a ymm (avx2/x8_common.h), the AVX-512 tiers' sixteen a zmm.
 *
 * A product walks its weight rows a group of `width` at a time (rows_gemm): a repacked matrix's whole groups
 * are read where they stand, file rows are built into a per-thread tile first; then passes of up to `vg`
 * activation rows over the group, each leaving one float register a row. A family (one kernel file's types)
 * brings what differs: how its activations are prepared, how file rows become a group of its tile form, and
 * the pass. rows_gemm_file adds the fallback without memory (one output at a time by the vec_dot, the same
 * floats) and rows_repack the load-time repack; the pass, its store and the dispatch of a pass's row count to
 * a constant stay with the tier (they are its intrinsics).
 *
 * Plain C, no intrinsics: each tier's files include it and compile it with their flags. Every function is
 * always inlined with width, vg and the family constants where it is called, so the family's functions are
 * direct calls that GCC specializes for the kind and `packed`, and the loops have constant strides: the code
 * a copy per width gave (bench/kernel_builds.py, Q4_0 2048 x 2048 on the AVX2 tier, 1 thread, CPU time,
 * before / after the fold: file 1 row 42.3 / 43.1 GOPS, 64 rows 144.6 / 146.5, repacked 1 row 92.5 / 96.3,
 * 64 rows 147.9 / 146.0; Xeon, load ~7 on 2 cores, 2026-11-26). */
#ifndef OXL_X86_ROWS_COMMON_H
#define OXL_X86_ROWS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../kernels.h"

/* up to `width` file rows (w_row bytes apart; missing rows zero) into one group of the family's tile form */
typedef void (*rows_build_fn)(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst);

/* One family of many-row kernels: `kind` is the family's own tag, handed to its functions.
 *   prepare: the nc activation rows' per-block data into A, act_row bytes a row
 *   build:   a group of the tile form from file rows
 *   pass:    S[j * lds + l] for the group's rows l < nrows and activation rows j < C (C <= vg), A the first of
 *            those rows' prepared data; ahead > 0: the group is a repacked matrix's, prefetch on (the pass's
 *            meaning of the number) */
typedef struct {
    int kind;
    int nb;             /* blocks (of the family's size) per weight row */
    size_t act_row;     /* bytes of prepared data per activation row */
    size_t group_bytes; /* bytes of one group in the tile form */
    int ahead;          /* prefetch in a repacked matrix: > 0 (the pass's meaning), 0 none */
    void (*prepare)(int kind, int nb, const char *y, size_t y_row, int nc, void *A);
    rows_build_fn build;
    void (*pass)(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A, int ahead,
                 float *S, int64_t lds, int nrows);
} rows_family;

/* this thread's buffer for a product: the prepared activations (act_bytes, rounded up to 64), then a tile of
 * tile_bytes at *tile; NULL without memory */
static inline uint8_t *rows_panel(size_t act_bytes, size_t tile_bytes, uint8_t **tile) {
    const size_t abytes = (act_bytes + 63) & ~(size_t)63;
    uint8_t *buf = (uint8_t *)oxl_panel_memory(abytes + tile_bytes);
    *tile = buf + abytes;
    return buf;
}

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or with `packed` a repacked matrix's rows from
 * a group start, whose last rows % width are file rows) and nc activation rows; -1 if no memory for this
 * thread's buffer (the prepared activations, then one group's tile). */
OXL_INLINE int rows_gemm(const rows_family *f, const int width, const int vg, int packed, float *S, int64_t lds,
                         const char *w, size_t w_row, int nr, const char *y, size_t y_row, int nc) {
    uint8_t *tile, *buf = rows_panel((size_t)nc * f->act_row, f->group_bytes, &tile);
    if (!buf) return -1;
    f->prepare(f->kind, f->nb, y, y_row, nc, buf);
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += width) {
        const int nrows = OXL_MIN(width, nr - r);
        const char *g = w + (size_t)r * w_row;
        int ahead = f->ahead;
        if (!packed || nrows < width) {   /* file rows, streamed in and built into the tile */
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

/* A family's product of file rows (w_row bytes apart): its product `gemm` (packed 0), which builds each group
 * into the per-thread tile; without memory for that buffer, one output at a time by its vec_dot (the same
 * floats). gemm and vec_dot constants where it is called: direct calls. */
typedef int (*rows_product_fn)(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row,
                               int nr, const char *y, size_t y_row, int nc);
typedef void (*rows_vec_dot_fn)(int kind, int n, float *s, const void *x, const void *y);
OXL_INLINE void rows_gemm_file(rows_product_fn gemm, rows_vec_dot_fn vec_dot, int kind, int n, float *S, int64_t lds,
                               const void *w, size_t w_row, int nr, const void *y, size_t y_row, int nc) {
    if (!gemm(kind, 0, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc)) return;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++)
            vec_dot(kind, n, &S[j * lds + r], (const char *)w + (size_t)r * w_row, (const char *)y + (size_t)j * y_row);
}

/* A family's repack: rows of `row` bytes (nb blocks of its size), whole groups of `width` built into its tile
 * form by `build` (a group has the file's bytes of its rows), the last rows % width copied as they are. Run once
 * at load, per thread over a row range that matmul.c's oxl_repack splits in multiples of OXL_REPACK_ROW_ALIGN,
 * so that each thread's range starts at a group boundary of the whole matrix (width divides that alignment). */
OXL_INLINE void rows_repack(rows_build_fn build, const int width, int kind, int nb, size_t row, const void *w,
                            void *dst, int64_t rows) {
    int64_t r = 0;
    for (; r + width <= rows; r += width) build(kind, (const char *)w + r * row, row, width, nb, (uint8_t *)dst + r * row);
    memcpy((char *)dst + r * row, (const char *)w + r * row, (size_t)(rows - r) * row);
}

#endif
