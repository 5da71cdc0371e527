/* The NEON K-quant kernels compiled with +dotprod (vdotq_s32 in dot_s8): same source, own name. */
#define OXL_K_NEON_REGISTER oxl_register_dotprod_k
#include "../neon/quants_k_neon.c"
