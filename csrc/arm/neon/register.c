/* The NEON tier (AArch64 Advanced SIMD): overrides of the table below it. */
#include "../../kernels.h"

void oxl_register_neon_k(oxl_kernel_table *t);  /* quants_k_neon.c */

void oxl_register_neon(oxl_kernel_table *t) {
    oxl_register_neon_k(t);
}
