/* Q4_K, Q5_K and Q6_K on the AVX-512 tier (no VNNI): the AVX-512 VNNI tier's sixteen-rows-a-register kernels
 * (csrc/x86/avx512vnni/quants_kx16_vnni.c), built here with vpdpbusd and vpdpwssd emulated (x16_common.h,
 * X16_AVX512BW; the weights are at most 6 bits, one vpmaddubsw each): that tier's order, repacked layouts
 * and floats, where the AVX2 tier's eight-row kernels (quants_kx8_avx2.c) have the same order too. */
#define X16_AVX512BW 1
#define oxl_register_avx512vnni_kx16 oxl_register_avx512_kx16
#include "../avx512vnni/quants_kx16_vnni.c"
