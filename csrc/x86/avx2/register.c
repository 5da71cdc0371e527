/* The AVX2 tier (AVX2 + FMA + F16C): overrides of the scalar table. Q4_0, Q8_0 and IQ4_NL (quants_x8_avx2.c),
 * Q4_1, Q5_0 and Q5_1 (quants_x8b_avx2.c), Q4_K, Q5_K, Q6_K and IQ4_XS (quants_kx8_avx2.c) are eight rows a
 * register in the AVX-512 VNNI tier's orders with repacked layouts, registered after the older kernels they
 * replace on this tier (the old Q4_1 / Q5_0 multi-row ones stay for the AVX-512 tier, whose vec_dots sum in
 * their order; that tier inherits the others). */
#include "../../kernels.h"

void oxl_register_avx2_legacy(oxl_kernel_table *t);  /* quants_legacy_avx2.c */
void oxl_register_avx2_k(oxl_kernel_table *t);       /* quants_k_avx2.c */
void oxl_register_avx2_ops(oxl_kernel_table *t);     /* ops_avx2.c */
void oxl_register_avx2_lowbit(oxl_kernel_table *t);  /* quants_lowbit_avx2.c */
void oxl_register_avx2_iq(oxl_kernel_table *t);      /* quants_iq_avx2.c */
void oxl_register_avx2_fp4(oxl_kernel_table *t);     /* quants_fp4_avx2.c (NVFP4; MXFP4 is a 32-value type) */
void oxl_register_avx2_x8(oxl_kernel_table *t);      /* quants_x8_avx2.c */
void oxl_register_avx2_x8b(oxl_kernel_table *t);     /* quants_x8b_avx2.c */
void oxl_register_avx2_kx8(oxl_kernel_table *t);     /* quants_kx8_avx2.c */

void oxl_register_avx2(oxl_kernel_table *t) {
    oxl_register_avx2_legacy(t);
    oxl_register_avx2_k(t);
    oxl_register_avx2_ops(t);
    oxl_register_avx2_lowbit(t);
    oxl_register_avx2_iq(t);
    oxl_register_avx2_fp4(t);
    oxl_register_avx2_x8(t);
    oxl_register_avx2_x8b(t);
    oxl_register_avx2_kx8(t);
}
