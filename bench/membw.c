/* Read bandwidth of this machine's memory, in C: the rate weights can stream at, decode's limit.
 * bench/membw.py compiles this file (cc -O2 -fopenmp) and calls oxl_bench_read_bw through ctypes.
 *
 * Each thread reads its own contiguous share of a buffer far larger than the caches, with 256-bit loads
 * summed into four independent accumulators (the loads, not the adds, are the limit), as the weight-streaming
 * products read their row ranges. The buffer is written once first so every page is mapped. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <immintrin.h>

__attribute__((target("avx2"))) static uint64_t read_range(const __m256i *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + i + 3));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}

/* Best seconds over `passes` full reads of `bytes` (a multiple of 128) with n_threads; < 0 on failure. */
double oxl_bench_read_bw(size_t bytes, int n_threads, int passes, uint64_t *sink) {
    void *buf = NULL;
    bytes &= ~(size_t)127;
    if (bytes == 0 || n_threads < 1 || passes < 1 || posix_memalign(&buf, 4096, bytes)) return -1.0;
#pragma omp parallel num_threads(n_threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const size_t share = bytes / 128 / nt * 128, b = t * share, e = t == nt - 1 ? bytes : b + share;
        memset((char *)buf + b, t + 1, e - b);
    }
    double best = 1e30;
    uint64_t acc = 0;
    for (int pass = 0; pass < passes; pass++) {
        const double t0 = omp_get_wtime();
#pragma omp parallel num_threads(n_threads) reduction(^ : acc)
        {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            const size_t share = bytes / 128 / nt * 128, b = t * share, e = t == nt - 1 ? bytes : b + share;
            acc ^= read_range((const __m256i *)((const char *)buf + b), (e - b) / 32);
        }
        const double dt = omp_get_wtime() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    *sink = acc;
    return best;
}
