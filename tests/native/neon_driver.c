/* Cross-checks the ARM tiers against the scalar tier; built with aarch64-linux-gnu-gcc and run under
 * qemu-aarch64 by tests/native/test_arm_tiers.py. Prints one line per check, exits 1 on a mismatch.
 * The NEON and dotprod vec_dots replay the scalar float steps, so they must match bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "matmul.h"

static float frand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return ((int)(*state >> 8) - (1 << 23)) / (float)(1 << 23);
}

int main(void) {
    oxl_dispatch_init("");
    const oxl_kernel_table *scalar = oxl_tier_table(OXL_TIER_SCALAR);
    const int tiers[] = {OXL_TIER_NEON, OXL_TIER_DOTPROD};
    const int types[] = {OXL_TYPE_Q4_0, OXL_TYPE_Q4_1, OXL_TYPE_Q5_0, OXL_TYPE_Q5_1, OXL_TYPE_Q8_0,
                         OXL_TYPE_Q8_1, OXL_TYPE_IQ4_NL, OXL_TYPE_F16, OXL_TYPE_BF16, OXL_TYPE_F32};
    const int sizes[] = {32, 96, 640, 4096 + 32};
    int failures = 0, checks = 0;
    unsigned st = 12345;
    for (size_t ti = 0; ti < sizeof(tiers) / sizeof(tiers[0]); ti++) {
        const oxl_kernel_table *k = oxl_tier_table(tiers[ti]);
        if (!k) {
            printf("tier %s not usable\n", oxl_tier_name(tiers[ti]));
            failures++;
            continue;
        }
        for (size_t yi = 0; yi < sizeof(types) / sizeof(types[0]); yi++) {
            const int type = types[yi];
            const oxl_type_traits *t = &scalar->type[type];
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
                const int n = sizes[si], rows = 7;
                float *w = malloc(sizeof(float) * n * rows), *x = malloc(sizeof(float) * n);
                for (int i = 0; i < n * rows; i++) w[i] = frand(&st) * (1 + (i % 97 == 0) * 8);
                for (int i = 0; i < n; i++) x[i] = frand(&st);
                const int64_t row = oxl_row_size(type, n);
                char *wq = malloc(row * rows);
                for (int r = 0; r < rows; r++) t->from_float_ref(w + (int64_t)r * n, wq + r * row, n);
                char *xq = malloc(oxl_act_size(scalar, type, n, 1) + 4 * n);
                const int float_act = t->vec_dot_type == OXL_TYPE_F32;
                if (!float_act) scalar->type[t->vec_dot_type].from_float_ref(x, xq, n);
                const void *act = float_act ? (const void *)x : xq;
                float s0, s1;
                scalar->type[type].vec_dot(n, &s0, wq, act);
                k->type[type].vec_dot(n, &s1, wq, act);
                const int exact = !float_act;
                const int ok = exact ? s0 == s1 : fabsf(s0 - s1) <= 1e-5f * (fabsf(s0) + 1);
                checks++;
                if (!ok) {
                    failures++;
                    printf("MISMATCH %s %s n=%d scalar=%.9g tier=%.9g\n", oxl_tier_name(tiers[ti]), t->name, n, s0, s1);
                }
                /* matvec through the engine, 1 thread */
                float y0[7], y1[7];
                void *scratch = malloc(oxl_act_size(scalar, type, n, 1) + 1);
                if (oxl_matvec(scalar, type, wq, rows, n, x, y0, scratch, 1) != OXL_OK ||
                    oxl_matvec(k, type, wq, rows, n, x, y1, scratch, 1) != OXL_OK) {
                    failures++;
                    printf("MATVEC ERROR %s %s\n", oxl_tier_name(tiers[ti]), t->name);
                }
                for (int r = 0; r < rows; r++) {
                    checks++;
                    if (exact ? y0[r] != y1[r] : fabsf(y0[r] - y1[r]) > 1e-5f * (fabsf(y0[r]) + 1)) {
                        failures++;
                        printf("MATVEC MISMATCH %s %s n=%d row %d: %.9g vs %.9g\n", oxl_tier_name(tiers[ti]), t->name,
                               n, r, y0[r], y1[r]);
                    }
                }
                free(scratch);
                free(w);
                free(x);
                free(wq);
                free(xq);
            }
            printf("%s %s: vec_dot by %s\n", oxl_tier_name(tiers[ti]), t->name, k->type[type].tier);
        }
    }
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
