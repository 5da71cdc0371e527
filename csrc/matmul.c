#include "matmul.h"

#include <pthread.h>
#include <stdlib.h>

#if OXL_HAVE_OPENMP
#include <omp.h>
#endif

/* ---- oxl_panel_memory (kernels.h): one buffer per thread, kept under a pthread key */
static pthread_key_t g_panel_key;
static pthread_once_t g_panel_once = PTHREAD_ONCE_INIT;
typedef struct {
    void *p;
    size_t bytes;
} panel_buf;
static void panel_free(void *v) {
    panel_buf *b = (panel_buf *)v;
    free(b->p);
    free(b);
}
static void panel_key_init(void) { (void)pthread_key_create(&g_panel_key, panel_free); }

void *oxl_panel_memory(size_t bytes) {
    (void)pthread_once(&g_panel_once, panel_key_init);
    panel_buf *b = (panel_buf *)pthread_getspecific(g_panel_key);
    if (!b) {
        if (!(b = (panel_buf *)calloc(1, sizeof(*b)))) return NULL;
        if (pthread_setspecific(g_panel_key, b)) {
            free(b);
            return NULL;
        }
    }
    if (b->bytes < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes)) return NULL;
        free(b->p);
        b->p = p, b->bytes = bytes;
    }
    return b->p;
}

int64_t oxl_act_size(const oxl_kernel_table *k, int type, int64_t cols, int64_t n) {
    if (type < 0 || type >= OXL_TYPE_COUNT || !k->type[type].name || !k->type[type].vec_dot) return -1;
    const int64_t row = oxl_row_size(k->type[type].vec_dot_type, cols);
    if (row < 0 || n < 0) return -1;
    return row * n;
}

void oxl_quantize_act(const oxl_kernel_table *k, int type, const float *x, int64_t cols, int64_t n, void *xq) {
    const oxl_type vdt = k->type[type].vec_dot_type;
    const int64_t row = oxl_row_size(vdt, cols);
    for (int64_t j = 0; j < n; j++) k->type[vdt].from_float(x + j * cols, (char *)xq + j * row, cols);
}

/* A matvec streams its weights from memory once per call, so it reads them row after row with the
 * type's vec_dot (oxl_stream_row, kernels.h): one sequential stream per thread, which the hardware
 * prefetcher follows. The 4-row gemm tile was ~15% faster while the weights sat in cache, but its four
 * interleaved row streams (680 bytes apart for Q8_0 x 640) left weights streaming from DRAM at about half
 * the rate (Zen 3, 2026-11-23: decode +13-33% on SmolLM2 and +20-60% on Gemma 3 row by row).
 * The multi-row gemm gives every element exactly the float vec_dot gives (kernels.h), so a token's
 * logits do not depend on how many rows share the product. */

/* the first OXL_STREAM_AHEAD bytes of [p, end) at once: from there on each row asks for what lies ahead */
static inline void stream_start(const char *p, const char *end) {
    for (const char *e = OXL_MIN(p + OXL_STREAM_AHEAD, end); p < e; p += 64) __builtin_prefetch(p, 0, 3);
}

void oxl_gemv_range(const oxl_kernel_table *k, int type, const void *W, int64_t cols, const void *xq,
                    float *y, int64_t r0, int64_t r1) {
    const oxl_vec_dot_fn dot = k->type[type].vec_dot;
    const int64_t row = oxl_row_size(type, cols);
    const char *w = (const char *)W;
    const char *end = w + r1 * row;
    stream_start(w + r0 * row, end);
    for (int64_t r = r0; r < r1; r++) {
        oxl_stream_row(w + r * row, (size_t)row, end);
        dot((int)cols, &y[r], w + r * row, xq);
    }
}

/* Up to this many activation rows (batched decode of several sequences, a speculative verify) a
 * product is bound by streaming the weights, as the matvec is: the kernel walks the range's weight rows
 * one after the other, every decoded block serving all the activation rows, and asks for the row ahead
 * as it goes. */
#define GEMM_SMALL_BATCH 16

void oxl_gemm_range(const oxl_kernel_table *k, int type, const void *W, int64_t cols, const void *xq,
                    int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    const oxl_vec_dot_fn dot = k->type[type].vec_dot;
    const oxl_gemm_fn gemm = k->type[type].gemm;
    const int64_t row = oxl_row_size(type, cols);
    const int64_t xrow = oxl_row_size(k->type[type].vec_dot_type, cols);
    const char *w = (const char *)W;
    if (r1 <= r0) return;
    /* activation rows in chunks: their quantized rows (<= 64 x cols bytes) stay in L2 while the weight
     * rows are multiplied with all of them */
    for (int64_t jb = 0; jb < n; jb += OXL_GEMM_MAX_ACT_ROWS) {
        const int nc = (int)OXL_MIN(OXL_GEMM_MAX_ACT_ROWS, n - jb);
        const char *xc = (const char *)xq + jb * xrow;
        float *Yc = Y + jb * ldy;
        if (!gemm) {
            /* no multi-row kernel: one vec_dot per output */
            for (int64_t r = r0; r < r1; r++)
                for (int j = 0; j < nc; j++) dot((int)cols, &Yc[j * ldy + r], w + r * row, xc + j * xrow);
            continue;
        }
        if (nc <= GEMM_SMALL_BATCH) stream_start(w + r0 * row, w + r1 * row);
        gemm((int)cols, Yc + r0, ldy, w + r0 * row, (size_t)row, (int)(r1 - r0), xc, (size_t)xrow, nc);
    }
}

/* Rows per thread are a multiple of this, so every thread's range is whole tiles. */
#define GEMM_ROW_TILE 16

static int check_args(const oxl_kernel_table *k, int type, int64_t rows, int64_t cols) {
    if (type < 0 || type >= OXL_TYPE_COUNT || !k->type[type].name || !k->type[type].vec_dot) return OXL_ERR_TYPE;
    if (rows < 0 || cols <= 0 || cols > INT32_MAX) return OXL_ERR_SHAPE;
    if (oxl_row_size(type, cols) < 0) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* Chunks per thread in the products' dynamic schedule: a thread that is slowed down (another
 * process on its core, a slower core) takes fewer chunks instead of holding up the others. */
#define CHUNKS_PER_THREAD 4

static int clamp_threads(int n_threads, int64_t work_units) {
    if (n_threads < 1) n_threads = 1;
    if (work_units < n_threads) n_threads = (int)OXL_MAX(work_units, 1);
    return n_threads;
}

int64_t oxl_repacked_row_size(const oxl_kernel_table *k, int type, int64_t cols) {
    if (type < 0 || type >= OXL_TYPE_COUNT || !k->type[type].repacked.name || cols <= 0) return -1;
    if (oxl_row_size(type, cols) < 0) return -1;
    return k->type[type].repacked.row_size(cols);
}

int oxl_repack(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols, void *dst,
               int n_threads) {
    const int64_t prow = oxl_repacked_row_size(k, type, cols), row = oxl_row_size(type, cols);
    if (prow < 0) return OXL_ERR_TYPE;
    if (rows < 0) return OXL_ERR_SHAPE;
    const int nth = clamp_threads(n_threads, rows / 64);
#if OXL_HAVE_OPENMP
#pragma omp parallel for num_threads(nth) schedule(static)
#endif
    for (int t = 0; t < nth; t++) {
        int64_t b, e;   /* in whole groups of a layout that interleaves up to OXL_REPACK_ROW_ALIGN rows */
        oxl_split_range(rows, nth, t, OXL_REPACK_ROW_ALIGN, &b, &e);
        if (b < e) k->type[type].repacked.repack((const char *)W + b * row, (char *)dst + b * prow, e - b, cols);
    }
    return OXL_OK;
}

int oxl_gemm_packed_range(const oxl_kernel_table *k, int type, const void *P, int64_t cols, const void *xq,
                          int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    const oxl_gemm_packed_fn gemm = k->type[type].repacked.gemm;
    const int64_t prow = k->type[type].repacked.row_size(cols);
    const int64_t xrow = oxl_row_size(k->type[type].vec_dot_type, cols);
    const char *p = (const char *)P;
    if (r1 <= r0) return 0;
    if (r0 % OXL_REPACK_ROW_ALIGN) return -1;   /* inside an interleaved group: the caller reads the file rows */
    for (int64_t jb = 0; jb < n; jb += OXL_GEMM_MAX_ACT_ROWS) {
        const int nc = (int)OXL_MIN(OXL_GEMM_MAX_ACT_ROWS, n - jb);
        if (nc <= GEMM_SMALL_BATCH) stream_start(p + r0 * prow, p + r1 * prow);
        if (gemm((int)cols, Y + jb * ldy + r0, ldy, p + r0 * prow, (size_t)prow, (int)(r1 - r0),
                 (const char *)xq + jb * xrow, (size_t)xrow, nc))
            return -1;
    }
    return 0;
}

int oxl_matvec(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
               const float *x, float *y, void *scratch, int n_threads) {
    int rc = check_args(k, type, rows, cols);
    if (rc) return rc;
    const int is_float_act = k->type[type].vec_dot_type == OXL_TYPE_F32;
    const void *xq = is_float_act ? (const void *)x : scratch;
    if (!is_float_act) oxl_quantize_act(k, type, x, cols, 1, scratch);
    const int nth = clamp_threads(n_threads, rows / 8);
#if OXL_HAVE_OPENMP
#pragma omp parallel num_threads(nth)
    {
        const int n_chunks = omp_get_num_threads() * CHUNKS_PER_THREAD;
#pragma omp for schedule(dynamic, 1) nowait
        for (int c = 0; c < n_chunks; c++) {
            int64_t b, e;
            oxl_split_range(rows, n_chunks, c, 8, &b, &e);
            oxl_gemv_range(k, type, W, cols, xq, y, b, e);
        }
    }
#else
    (void)nth;
    oxl_gemv_range(k, type, W, cols, xq, y, 0, rows);
#endif
    return OXL_OK;
}

int oxl_matmul(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
               const float *X, int64_t n, float *Y, void *scratch, int n_threads) {
    int rc = check_args(k, type, rows, cols);
    if (rc) return rc;
    if (n < 0) return OXL_ERR_SHAPE;
    const int is_float_act = k->type[type].vec_dot_type == OXL_TYPE_F32;
    const void *xq = is_float_act ? (const void *)X : scratch;
    const int nth = clamp_threads(n_threads, rows / GEMM_ROW_TILE);
#if OXL_HAVE_OPENMP
#pragma omp parallel num_threads(nth)
    {
        const int nt = omp_get_num_threads(), it = omp_get_thread_num();
        if (!is_float_act) {
            int64_t jb, je;
            oxl_split_range(n, nt, it, 1, &jb, &je);
            const int64_t xrow = oxl_row_size(k->type[type].vec_dot_type, cols);
            oxl_quantize_act(k, type, X + jb * cols, cols, je - jb, (char *)scratch + jb * xrow);
        }
#pragma omp barrier
        const int n_chunks = nt * CHUNKS_PER_THREAD;
#pragma omp for schedule(dynamic, 1) nowait
        for (int c = 0; c < n_chunks; c++) {
            int64_t b, e;
            oxl_split_range(rows, n_chunks, c, GEMM_ROW_TILE, &b, &e);
            oxl_gemm_range(k, type, W, cols, xq, n, Y, rows, b, e);
        }
    }
#else
    (void)nth;
    if (!is_float_act) oxl_quantize_act(k, type, X, cols, n, scratch);
    oxl_gemm_range(k, type, W, cols, xq, n, Y, rows, 0, rows);
#endif
    return OXL_OK;
}
