/* The AVX-512 VNNI tier: the AVX-512 tier plus, sixteen rows a register with their own order and repacked
 * layouts, Q4_0 and Q8_0 (quants_x16_vnni.c), Q4_1, Q5_0 and Q5_1 (quants_x16b_vnni.c),
 * Q4_K, Q5_K and Q6_K with their own order and repacked layouts, sixteen rows a register
 * (quants_kx16_vnni.c), IQ4_NL / IQ4_XS in the sixteen-rows form with their own order and repacked layouts
 * (quants_iqx16_vnni.c), Q1_0 (with a repacked layout) and TQ2_0 (quants_lowbit_vnni.c) and MXFP4
 * (quants_fp4_vnni.c), the first and last sixteen rows a register too; x16_common.h holds what the
 * sixteen-row files share.
 * Tested on machines without VNNI too: tests/native/test_simd_tiers.py compiles this folder against
 * SIMDe and runs csrc/selftest.c's checks on the resulting table. */
#include "../../kernels.h"

void oxl_register_avx512vnni_x16(oxl_kernel_table *t);
void oxl_register_avx512vnni_x16b(oxl_kernel_table *t);   /* quants_x16b_vnni.c */
void oxl_register_avx512vnni_kx16(oxl_kernel_table *t);   /* quants_kx16_vnni.c */
void oxl_register_avx512vnni_lowbit(oxl_kernel_table *t);   /* quants_lowbit_vnni.c */
void oxl_register_avx512vnni_fp4(oxl_kernel_table *t);      /* quants_fp4_vnni.c */
void oxl_register_avx512vnni_iqx16(oxl_kernel_table *t);    /* quants_iqx16_vnni.c */

void oxl_register_avx512vnni(oxl_kernel_table *t) {
    oxl_register_avx512vnni_x16(t);
    oxl_register_avx512vnni_x16b(t);
    oxl_register_avx512vnni_kx16(t);
    oxl_register_avx512vnni_lowbit(t);
    oxl_register_avx512vnni_fp4(t);
    oxl_register_avx512vnni_iqx16(t);
}
