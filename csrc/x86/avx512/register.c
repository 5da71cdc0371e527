/* The AVX-512 tier (F/BW/VL/DQ on top of AVX2): overrides of the AVX2 table.
 * Tested on machines without AVX-512 too: tests/native/test_simd_tiers.py compiles this folder against
 * SIMDe and runs csrc/selftest.c's checks on the resulting table; `oxillama selftest` runs them natively. */
#include "../../kernels.h"

void oxl_register_avx512_legacy(oxl_kernel_table *t);
void oxl_register_avx512_lowbit(oxl_kernel_table *t);  /* quants_lowbit_avx512.c */
void oxl_register_avx512_iq(oxl_kernel_table *t);      /* quants_iq_avx512.c */
void oxl_register_avx512_ops(oxl_kernel_table *t);     /* ops_avx512.c: the recurrent layers' scan and conv */

void oxl_register_avx512(oxl_kernel_table *t) {
    oxl_register_avx512_legacy(t);
    oxl_register_avx512_lowbit(t);
    oxl_register_avx512_iq(t);
    oxl_register_avx512_ops(t);
}
