/* The AVX-512 tier (F/BW/VL/DQ on top of AVX2): overrides of the AVX2 table.
 * Tested on machines without AVX-512 too: tests/native/test_simd_tiers.py compiles this folder against
 * SIMDe and runs csrc/selftest.c's checks on the resulting table; `oxillama selftest` runs them natively. */
#include "../../kernels.h"

void oxl_register_avx512_legacy(oxl_kernel_table *t);
void oxl_register_avx512_lowbit(oxl_kernel_table *t);  /* quants_lowbit_avx512.c */
void oxl_register_avx512_iq(oxl_kernel_table *t);      /* quants_iq_avx512.c */
void oxl_register_avx512_ops(oxl_kernel_table *t);     /* ops_avx512.c: the recurrent layers' scan and conv */
/* the AVX-512 VNNI tier's sixteen-rows-a-register kernels built for this tier (vpdpbusd emulated) */
void oxl_register_avx512_x16(oxl_kernel_table *t);     /* quants_x16_avx512.c: Q4_0, Q8_0 */
void oxl_register_avx512_x16b(oxl_kernel_table *t);    /* quants_x16b_avx512.c: Q4_1, Q5_0, Q5_1 */
void oxl_register_avx512_kx16(oxl_kernel_table *t);    /* quants_kx16_avx512.c: Q4_K, Q5_K, Q6_K */

void oxl_register_avx512(oxl_kernel_table *t) {
    oxl_register_avx512_legacy(t);
    oxl_register_avx512_lowbit(t);
    oxl_register_avx512_iq(t);
    oxl_register_avx512_ops(t);
    oxl_register_avx512_x16(t);
    oxl_register_avx512_x16b(t);
    oxl_register_avx512_kx16(t);
}
