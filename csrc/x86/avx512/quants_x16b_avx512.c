/* Q4_1, Q5_0 and Q5_1 on the AVX-512 tier (no VNNI): the AVX-512 VNNI tier's sixteen-rows-a-register kernels
 * (csrc/x86/avx512vnni/quants_x16b_vnni.c), built here with vpdpbusd emulated (x16_common.h, X16_AVX512BW):
 * that tier's order, repacked layouts and floats. They replace this tier's one-row vec_dots of Q4_1 and Q5_0
 * (quants_legacy_avx512.c, a float sum per 8 values), so the tier's floats for these types change: see the
 * figures at the register. */
#define X16_AVX512BW 1
#define oxl_register_avx512vnni_x16b oxl_register_avx512_x16b
#include "../avx512vnni/quants_x16b_vnni.c"
