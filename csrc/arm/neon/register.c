/* The neon tier: overrides of the scalar table. */
#include "../../kernels.h"

void oxl_register_neon_legacy(oxl_kernel_table *t);
void oxl_register_neon_k(oxl_kernel_table *t);  /* quants_k_neon.c */
void oxl_register_neon_lowbit(oxl_kernel_table *t);  /* quants_lowbit_neon.c */

void oxl_register_neon(oxl_kernel_table *t) {
    oxl_register_neon_legacy(t);
    oxl_register_neon_k(t);
    oxl_register_neon_lowbit(t);
}
