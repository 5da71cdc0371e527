/* Standalone check of a SIMD tier's K-quant vec_dot against the scalar kernels, for tiers this
 * machine cannot run natively (built with a cross compiler and run under qemu-user by
 * test_kquants.py::test_arm_tiers_under_qemu).
 *
 * Links csrc/scalar/quants_k.c and the tier's quants_k_*.c; REGISTER names the tier's K-quant
 * register function. Prints one line per failure and "checked N" at the end; exit code 1 on failure.
 * With the argument "dump" it instead writes 4096 floats and their reference quantization to every
 * K-quant type (in the order of `dump_types`) to stdout, so the caller can check that the reference
 * quantizers give the same bytes on this target as on the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "scalar/quants.h"

void REGISTER(oxl_kernel_table *t);

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
/* roughly Gaussian: sum of 4 uniforms, centred */
static float next_normal(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)next_u32() / 4294967296.0f;
    return (s - 2.0f) * 1.7f;
}

#define DOT_TOL 1e-5 /* |simd - scalar| <= DOT_TOL * sum |w_i a_i| */

static int dump(const oxl_kernel_table *scalar) {
    const int dump_types[] = {OXL_TYPE_Q2_K, OXL_TYPE_Q3_K, OXL_TYPE_Q4_K, OXL_TYPE_Q5_K, OXL_TYPE_Q6_K,
                              OXL_TYPE_IQ4_XS, OXL_TYPE_Q8_K};
    const size_t type_size[] = {sizeof(block_q2_K), sizeof(block_q3_K), sizeof(block_q4_K), sizeof(block_q5_K),
                                sizeof(block_q6_K), sizeof(block_iq4_xs), sizeof(block_q8_K)};
    enum { N = 4096 };
    static float x[N];
    static unsigned char q[N / QK_K * sizeof(block_q8_K)];
    for (int i = 0; i < N; i++) x[i] = next_normal() * ((i / 512) % 2 ? 3.0f : 0.03f);
    fwrite(x, sizeof(float), N, stdout);
    for (int k = 0; k < 7; k++) {
        scalar->type[dump_types[k]].from_float_ref(x, q, N);
        fwrite(q, 1, N / QK_K * type_size[k], stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    static oxl_kernel_table scalar, simd;
    oxl_register_scalar_k(&scalar);
    if (argc > 1 && strcmp(argv[1], "dump") == 0) return dump(&scalar);
    simd = scalar;
    REGISTER(&simd);
    const int types[] = {OXL_TYPE_Q2_K, OXL_TYPE_Q3_K, OXL_TYPE_Q4_K, OXL_TYPE_Q5_K, OXL_TYPE_Q6_K,
                         OXL_TYPE_IQ4_XS, OXL_TYPE_Q8_K};
    const size_t type_size[] = {sizeof(block_q2_K), sizeof(block_q3_K), sizeof(block_q4_K), sizeof(block_q5_K),
                                sizeof(block_q6_K), sizeof(block_iq4_xs), sizeof(block_q8_K)};
    const int sizes[] = {256, 7 * 256, 2048, 64 * 256};
    int failures = 0, checked = 0, overridden = 0;
    for (int ti = 0; ti < 7; ti++) {
        const int type = types[ti];
        if (simd.type[type].vec_dot == scalar.type[type].vec_dot) continue;
        overridden++;
        for (int si = 0; si < 4; si++) {
            const int n = sizes[si], nb = n / QK_K;
            float *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n);
            float *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
            void *wq = malloc(type_size[ti] * nb);
            block_q8_K *aq = malloc(sizeof(block_q8_K) * nb);
            for (int round = 0; round < 2; round++) {
                for (int i = 0; i < n; i++) {
                    w[i] = next_normal() * 0.05f;
                    a[i] = next_normal();
                }
                scalar.type[type].from_float_ref(w, wq, n);
                if (round == 1) {
                    /* random quant bytes: every level and scale, keeping the fp16 scales as quantized */
                    block_q8_K keep;
                    for (int b = 0; b < nb; b++) {
                        unsigned char *p = (unsigned char *)wq + b * type_size[ti];
                        memcpy(&keep, p, type_size[ti] < sizeof(keep) ? type_size[ti] : sizeof(keep));
                        for (size_t k = 0; k < type_size[ti]; k++) p[k] = (unsigned char)next_u32();
                        /* restore the fp16 d/dmin fields (positions differ per type) */
                        if (type == OXL_TYPE_Q4_K || type == OXL_TYPE_Q5_K || type == OXL_TYPE_IQ4_XS) memcpy(p, &keep, 4);
                        if (type == OXL_TYPE_Q6_K) memcpy(p + 208, (unsigned char *)&keep + 208, 2);
                        if (type == OXL_TYPE_Q2_K) memcpy(p + 80, (unsigned char *)&keep + 80, 4);
                        if (type == OXL_TYPE_Q3_K) memcpy(p + 108, (unsigned char *)&keep + 108, 2);
                        if (type == OXL_TYPE_Q8_K) memcpy(p, &keep, 4);
                    }
                }
                scalar.type[OXL_TYPE_Q8_K].from_float_ref(a, aq, n);
                scalar.type[type].to_float(wq, wd, n);
                scalar.type[OXL_TYPE_Q8_K].to_float(aq, ad, n);
                double ref = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    ref += (double)wd[i] * ad[i];
                    mag += fabs((double)wd[i] * ad[i]);
                }
                float s_scalar = 0, s_simd = 0;
                scalar.type[type].vec_dot(n, &s_scalar, wq, aq);
                simd.type[type].vec_dot(n, &s_simd, wq, aq);
                checked++;
                if (fabs(s_simd - s_scalar) > DOT_TOL * mag || fabs(s_simd - ref) > 2 * DOT_TOL * mag) {
                    printf("FAIL type %d n %d round %d: simd %.9g scalar %.9g float %.9g\n", type, n, round, s_simd,
                           s_scalar, ref);
                    failures++;
                }
            }
            free(w); free(a); free(wd); free(ad); free(wq); free(aq);
        }
    }
    printf("checked %d (%d kernels)\n", checked, overridden);
    return failures || !overridden ? 1 : 0;
}
