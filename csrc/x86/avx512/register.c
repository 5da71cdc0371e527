/* The AVX-512 tier (F/BW/VL/DQ on top of AVX2): overrides of the AVX2 table.
 * Not runnable on the development machine (no AVX-512): compiled and linked, untested there. */
#include "../../kernels.h"

void oxl_register_avx512_legacy(oxl_kernel_table *t);

void oxl_register_avx512(oxl_kernel_table *t) {
    oxl_register_avx512_legacy(t);
}
