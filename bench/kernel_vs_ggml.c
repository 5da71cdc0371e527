/* The kernel alone against ggml's: one weight matrix times one activation row through ggml-cpu's vec_dot,
 * row by row as its mul_mat calls it for a decode (nrc = 1 on x86). bench/kernel_vs_ggml.py compiles this
 * file and hands it the vec_dot pointer from ggml_get_type_traits_cpu. Returns the CPU seconds of one pass (this
 * thread's: a pass preempted by another process is not charged for the wait). */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by,
                                int nrc);

double oxl_bench_ggml_rows(void *fn, int n, int64_t rows, const void *w, size_t row_bytes, const void *y,
                           float *out) {
    const ggml_vec_dot_fn dot = (ggml_vec_dot_fn)fn;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (int64_t r = 0; r < rows; r++) dot(n, out + r, 0, (const char *)w + r * row_bytes, 0, y, 0, 1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    return (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
}
