/* The dotprod tier (NEON + ARMv8.2 SDOT/UDOT): overrides of the table below it. */
#include "../../kernels.h"

void oxl_register_dotprod_k(oxl_kernel_table *t);  /* quants_k_dotprod.c */

void oxl_register_dotprod(oxl_kernel_table *t) {
    oxl_register_dotprod_k(t);
}
