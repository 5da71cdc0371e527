/* Q4_0 and Q8_0 on the AVX-512 tier (no VNNI): the AVX-512 VNNI tier's sixteen-rows-a-register kernels
 * (csrc/x86/avx512vnni/quants_x16_vnni.c), built here with vpdpbusd emulated (x16_common.h, X16_AVX512BW):
 * the same order, repacked layouts and floats as that tier. Against the AVX2 tier's eight-row kernels that
 * this tier ran before (csrc/x86/avx2/quants_x8_avx2.c, the same order): see the figures at the register. */
#define X16_AVX512BW 1
#define oxl_register_avx512vnni_x16 oxl_register_avx512_x16
#include "../avx512vnni/quants_x16_vnni.c"
