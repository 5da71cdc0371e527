/* The dotprod tier: overrides of the NEON table. */
#include "../../kernels.h"

void oxl_register_dotprod_legacy(oxl_kernel_table *t);
void oxl_register_dotprod_k(oxl_kernel_table *t);  /* quants_k_dotprod.c */

void oxl_register_dotprod(oxl_kernel_table *t) {
    oxl_register_dotprod_legacy(t);
    oxl_register_dotprod_k(t);
}
