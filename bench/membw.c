/* Read bandwidth of this machine's memory, in C: the rate weights can stream at, decode's limit.
 * bench/membw.py compiles this file (cc -O2 -fopenmp) and calls it through ctypes.
 *
 * Each thread reads its own contiguous share of a buffer far larger than the caches, with 256-bit loads
 * summed into four independent accumulators (the loads, not the adds, are the limit), as the weight-streaming
 * products read their row ranges. A buffer is written once first so every page is mapped. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* thread t's share [*b, *e) of `bytes` (a multiple of 128) among nt */
static void share(size_t bytes, int t, int nt, size_t *b, size_t *e) {
    const size_t s = bytes / 128 / nt * 128;
    *b = t * s;
    *e = t == nt - 1 ? bytes : *b + s;
}

/* A page-aligned buffer of `bytes` (rounded down to a multiple of 128), written once by n_threads so that every
 * page is mapped; NULL on failure. */
void *oxl_bench_buffer(size_t bytes, int n_threads) {
    void *buf = NULL;
    bytes &= ~(size_t)127;
    if (bytes == 0 || n_threads < 1 || posix_memalign(&buf, 4096, bytes)) return NULL;
#pragma omp parallel num_threads(n_threads)
    {
        size_t b, e;
        share(bytes, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
        memset((char *)buf + b, omp_get_thread_num() + 1, e - b);
    }
    return buf;
}

void oxl_bench_free(void *buf) { free(buf); }

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds of one full read of an oxl_bench_buffer of `bytes` by n_threads threads, each its own share; with
 * cpu_rate, also the threads' bytes per second of their own CPU time, summed (on a machine other processes
 * share, a thread that is not running does not count against the memory). */
double oxl_bench_read_pass(const void *buf, size_t bytes, int n_threads, uint64_t *sink, double *cpu_rate) {
    uint64_t acc = 0;
    double rate = 0.0;
    bytes &= ~(size_t)127;
    const double t0 = omp_get_wtime();
#pragma omp parallel num_threads(n_threads) reduction(^ : acc) reduction(+ : rate)
    {
        size_t b, e;
        share(bytes, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
        const double c0 = thread_cpu_seconds();
        acc ^= read_range((const __m256i *)(const void *)((const char *)buf + b), (e - b) / 32);
        const double c = thread_cpu_seconds() - c0;
        rate += c > 0 ? (double)(e - b) / c : 0.0;
    }
    const double dt = omp_get_wtime() - t0;
    *sink ^= acc;
    if (cpu_rate) *cpu_rate = rate;
    return dt;
}

/* Best seconds over `passes` full reads of `bytes` (a multiple of 128) with n_threads; < 0 on failure. */
double oxl_bench_read_bw(size_t bytes, int n_threads, int passes, uint64_t *sink) {
    bytes &= ~(size_t)127;
    void *buf = passes < 1 ? NULL : oxl_bench_buffer(bytes, n_threads);
    if (!buf) return -1.0;
    double best = 1e30;
    *sink = 0;
    for (int pass = 0; pass < passes; pass++) {
        const double dt = oxl_bench_read_pass(buf, bytes, n_threads, sink, NULL);
        if (dt < best) best = dt;
    }
    free(buf);
    return best;
}
