/* Read bandwidth of this machine's memory, in C: the rate weights can stream at, decode's limit.
 * bench/membw.py compiles this file (cc -O2 -pthread) and calls it through ctypes.
 *
 * Each thread reads its own contiguous share of a buffer far larger than the caches, with 256-bit loads
 * summed into four independent accumulators (the loads, not the adds, are the limit), as the weight-streaming
 * products read their row ranges. A buffer is written once first so every page is mapped.
 *
 * The threads are plain pthreads, started for each read and joined at its end, not an OpenMP team: an OpenMP
 * runtime keeps its team spinning for a while after a region (libgomp's default wait policy), and this code
 * is loaded beside models whose OpenMP threads (oxillama's, llama.cpp's) would share or meet such a team. A
 * read here leaves no thread behind, and starting two threads (~100 us) is nothing beside a read of a buffer
 * of a GiB (~50 ms). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>

#define MAX_THREADS 256

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

static double now_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    char *buf;
    size_t b, e;
    int write;        /* 1: fill the share (map its pages), 0: read it */
    uint64_t acc;     /* the read's xor, so that the loads are not dropped */
    double cpu;       /* the thread's CPU seconds for its share */
} job;

static void *run_job(void *v) {
    job *j = (job *)v;
    const double c0 = now_seconds(CLOCK_THREAD_CPUTIME_ID);
    if (j->write) memset(j->buf + j->b, 1, j->e - j->b);
    else j->acc = read_range((const __m256i *)(const void *)(j->buf + j->b), (j->e - j->b) / 32);
    j->cpu = now_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

/* the shares of `bytes` of buf among n_threads threads (thread 0 this one); 0 on success */
static int run_team(char *buf, size_t bytes, int n_threads, int write, job *jobs) {
    pthread_t tid[MAX_THREADS];
    int started = 0, rc = 0;
    for (int t = 0; t < n_threads; t++) {
        jobs[t] = (job){.buf = buf, .write = write};
        share(bytes, t, n_threads, &jobs[t].b, &jobs[t].e);
    }
    for (int t = 1; t < n_threads; t++, started++)
        if (pthread_create(&tid[t], NULL, run_job, &jobs[t])) {
            rc = -1;
            break;
        }
    if (!rc) run_job(&jobs[0]);
    for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
    return rc;
}

/* A page-aligned buffer of `bytes` (rounded down to a multiple of 128), written once by n_threads so that every
 * page is mapped; NULL on failure. */
void *oxl_bench_buffer(size_t bytes, int n_threads) {
    void *buf = NULL;
    job jobs[MAX_THREADS];
    bytes &= ~(size_t)127;
    if (bytes == 0 || n_threads < 1 || n_threads > MAX_THREADS || posix_memalign(&buf, 4096, bytes)) return NULL;
    if (run_team((char *)buf, bytes, n_threads, 1, jobs)) {
        free(buf);
        return NULL;
    }
    return buf;
}

void oxl_bench_free(void *buf) { free(buf); }

/* Seconds of one full read of an oxl_bench_buffer of `bytes` by n_threads threads, each its own share; with
 * cpu_rate, also the threads' bytes per second of their own CPU time, summed (on a machine other processes
 * share, a thread that is not running does not count against the memory); < 0 on failure. */
double oxl_bench_read_pass(const void *buf, size_t bytes, int n_threads, uint64_t *sink, double *cpu_rate) {
    job jobs[MAX_THREADS];
    bytes &= ~(size_t)127;
    if (n_threads < 1 || n_threads > MAX_THREADS) return -1.0;
    const double t0 = now_seconds(CLOCK_MONOTONIC);
    if (run_team((char *)(uintptr_t)buf, bytes, n_threads, 0, jobs)) return -1.0;
    const double dt = now_seconds(CLOCK_MONOTONIC) - t0;
    double rate = 0.0;
    for (int t = 0; t < n_threads; t++) {
        *sink ^= jobs[t].acc;
        rate += jobs[t].cpu > 0 ? (double)(jobs[t].e - jobs[t].b) / jobs[t].cpu : 0.0;
    }
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
        if (dt < 0) {
            best = -1.0;
            break;
        }
        if (dt < best) best = dt;
    }
    free(buf);
    return best;
}
