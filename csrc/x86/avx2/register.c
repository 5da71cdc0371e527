/* The AVX2 tier (AVX2 + FMA + F16C): overrides of the scalar table. */
#include "../../kernels.h"

void vec_dot_q8_0_q8_0_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy);

void oxl_register_avx2_k(oxl_kernel_table *t);  /* quants_k_avx2.c */

void oxl_register_avx2(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx2;
    oxl_register_avx2_k(t);
}
