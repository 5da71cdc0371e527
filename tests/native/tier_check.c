/* Driver of the tier harness (tests/native/test_simd_tiers.py): runs csrc/selftest.c's checks of the
 * tiers named on the command line against the scalar tier and prints one tab-separated line per kernel:
 *   RESULT <tier> <subject> <kernel> <owner> <cases> <failures> <worst error/tolerance> <first failure>
 * then "DONE <tier> <failing kernels>" per tier. Exit code 1 if any kernel failed or a tier is not usable.
 * Options: --thorough (more sizes and rounds), --seed N.
 *
 * Built two ways: for AArch64 with the real csrc/cpu.c, run under qemu-aarch64 -cpu max (NEON, dotprod);
 * for x86 with the AVX-512 tier compiled against SIMDe (tests/native/simde/immintrin.h) and linked with
 * -Wl,--wrap=oxl_cpu_detect, so that the dispatcher, seeing the AVX-512 features SIMDe provides, builds
 * the AVX-512 tables exactly as on an AVX-512 CPU (OXL_SIMDE_AVX512 below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "selftest.h"

#if OXL_SIMDE_AVX512
uint32_t __real_oxl_cpu_detect(void);
/* this CPU's features, plus what SIMDe emulates */
uint32_t __wrap_oxl_cpu_detect(void) {
    return __real_oxl_cpu_detect() | OXL_CPU_AVX512F | OXL_CPU_AVX512BW | OXL_CPU_AVX512VL | OXL_CPU_AVX512DQ |
           OXL_CPU_AVX512VNNI;
}
#endif

static void print_result(void *ctx, const oxl_check_result *r) {
    printf("RESULT\t%s\t%s\t%s\t%s\t%d\t%d\t%.4g\t%s\n", (const char *)ctx, r->subject, r->kernel, r->owner,
           r->cases, r->failures, r->worst, r->detail);
}

int main(int argc, char **argv) {
    int thorough = 0, bad = 0;
    uint64_t seed = 19;
    oxl_dispatch_init("");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--thorough") == 0) thorough = 1;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[i + 1], NULL, 10);
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--thorough") == 0) continue;
        if (strcmp(argv[i], "--seed") == 0) { i++; continue; }
        int tier = -1;
        for (int t = 0; t < OXL_TIER_COUNT; t++)
            if (strcmp(argv[i], oxl_tier_name(t)) == 0) tier = t;
        if (tier < 0 || !oxl_tier_compiled(tier)) {
            printf("DONE\t%s\tnot compiled\n", argv[i]);
            bad = 1;
            continue;
        }
        const int failing = oxl_check_tier(tier, thorough, seed, print_result, argv[i]);
        if (failing < 0) printf("DONE\t%s\tnot usable\n", argv[i]);
        else printf("DONE\t%s\t%d\n", argv[i], failing);
        bad |= failing != 0;
        fflush(stdout);
    }
    return bad;
}
