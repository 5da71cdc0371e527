/* The K-quants' multi-row kernels (csrc/x86/quants_k_x86.h) with each scale x pair-sum step in one vpdpwssd
 * instead of vpmaddwd + vpaddd: the same integers, so the same floats as the AVX2 vec_dots this tier
 * inherits for Q4_K, Q5_K, Q6_K and IQ4_XS. */
#include <immintrin.h>

#define OXL_K_ACC_MADD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#define K_WIDE_RC 4   /* AVX-512VL: 32 vector registers */
#include "../quants_k_x86.h"

GEMM_ROWS_K(gemm_rows_q4_K_vnni, TILE_Q4_K)
GEMM_ROWS_K(gemm_rows_q5_K_vnni, TILE_Q5_K)
GEMM_ROWS_K(gemm_rows_q6_K_vnni, tile_q6_K)
GEMM_ROWS_K(gemm_rows_iq4_xs_vnni, tile_iq4_xs)

void oxl_register_avx512vnni_k(oxl_kernel_table *t) {
    /* only where the inherited kernel is the AVX2 one beside the AVX2 vec_dot (the sums these repeat) */
    if (t->type[OXL_TYPE_Q4_K].gemm) t->type[OXL_TYPE_Q4_K].gemm = gemm_rows_q4_K_vnni;
    if (t->type[OXL_TYPE_Q5_K].gemm) t->type[OXL_TYPE_Q5_K].gemm = gemm_rows_q5_K_vnni;
    if (t->type[OXL_TYPE_Q6_K].gemm) t->type[OXL_TYPE_Q6_K].gemm = gemm_rows_q6_K_vnni;
    if (t->type[OXL_TYPE_IQ4_XS].gemm) t->type[OXL_TYPE_IQ4_XS].gemm = gemm_rows_iq4_xs_vnni;
}
