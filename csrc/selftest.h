/* Kernel self-check: every kernel of a tier's table against the scalar tier's, on random blocks,
 * random quant bytes (every level and sub-scale, incl. the -128 the quantizers never produce), edge
 * lengths and odd row counts. One implementation serves `oxillama selftest` (through _core, on the
 * tiers this CPU runs) and the harnesses of tests/native/ (AVX-512 through SIMDe, NEON and dotprod
 * under qemu), so what CI checks is what a user's selftest checks.
 *
 * Rules, as in the Python tests of the AVX2 tier (tests/quant/, tests/kernels/): dequantize and
 * quantize are bit for bit; vec_dot, gemm_tile, matvec and matmul may differ from the scalar result by
 * a relative tolerance of sum |w_i a_i| (float summation order); row and attention ops elementwise,
 * fp32_to_fp16 bit for bit. */
#ifndef OXL_SELFTEST_H
#define OXL_SELFTEST_H

#include "kernels.h"

typedef struct {
    const char *subject;  /* a type name ("Q4_0"), or "ops" */
    const char *kernel;   /* "to_float", "from_float", "vec_dot", "gemm_tile", "matvec", "matmul", or an op */
    char owner[32];       /* tier whose code this is: the lowest usable tier whose table holds this function;
                           * for matmul "<gemm_tile's>/<vec_dot's>" when they differ (the last rows run vec_dot) */
    int cases;            /* comparisons made (0: the kernel is the scalar one, nothing to compare) */
    int failures;
    double worst;         /* largest |error| / tolerance over the cases; <= 1 passes (0 for exact checks) */
    char detail[200];     /* the first failure: sizes and values, or "" */
} oxl_check_result;

typedef void (*oxl_check_sink)(void *ctx, const oxl_check_result *r);

/* Check every kernel of `tier` against the scalar tier; calls `sink` once per (subject, kernel).
 * thorough = 0: a few sizes per kernel (about a second for a tier); 1: more sizes and rounds.
 * Returns the number of failing kernels, or -1 if the tier is not usable here. */
int oxl_check_tier(int tier, int thorough, uint64_t seed, oxl_check_sink sink, void *ctx);

#endif /* OXL_SELFTEST_H */
