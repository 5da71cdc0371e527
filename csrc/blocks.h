/* Quantization block layouts, byte-identical to GGUF/ggml (ggml-common.h).
 * Each struct is followed by a static assert on its size and its bits per weight. */
#ifndef OXL_BLOCKS_H
#define OXL_BLOCKS_H

#include "oxl.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_K 256
#define QK_MXFP4 32
#define QK_NVFP4 64
#define QK_NVFP4_SUB 16
#define QK1_0 128
#define K_SCALE_SIZE 12

/* 4.5 bpw: x = d * (q - 8) */
typedef struct { oxl_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
_Static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");

/* 5.0 bpw: x = d * q + m */
typedef struct { oxl_half d; oxl_half m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
_Static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");

/* 5.5 bpw: x = d * (q - 16), 5th bits in qh */
typedef struct { oxl_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
_Static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");

/* 6.0 bpw: x = d * q + m */
typedef struct { oxl_half d; oxl_half m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
_Static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");

/* 8.5 bpw: x = d * q */
typedef struct { oxl_half d; int8_t qs[QK8_0]; } block_q8_0;
_Static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 size");

/* 9.0 bpw: x = d * q, s = d * sum(q) (activations for the _1 types) */
typedef struct { oxl_half d; oxl_half s; int8_t qs[QK8_1]; } block_q8_1;
_Static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 size");

/* 2.625 bpw: 16 sub-blocks of 16, 4-bit scale and 4-bit min each */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; oxl_half d; oxl_half dmin; } block_q2_K;
_Static_assert(sizeof(block_q2_K) == 2 * 2 + QK_K / 16 + QK_K / 4, "block_q2_K size");

/* 3.4375 bpw: 16 sub-blocks of 16, 6-bit scales, high bit in hmask */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; oxl_half d; } block_q3_K;
_Static_assert(sizeof(block_q3_K) == 2 + QK_K / 4 + QK_K / 8 + 12, "block_q3_K size");

/* 4.5 bpw: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes */
typedef struct { oxl_half d; oxl_half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
_Static_assert(sizeof(block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");

/* 5.5 bpw */
typedef struct {
    oxl_half d; oxl_half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2];
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8, "block_q5_K size");

/* 6.5625 bpw: 16 sub-blocks of 16, 8-bit scales */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; oxl_half d; } block_q6_K;
_Static_assert(sizeof(block_q6_K) == 2 + QK_K / 16 + 3 * QK_K / 4, "block_q6_K size");

/* activations for the K-quants: float scale, bsums = sums of groups of 16 */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
_Static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");

/* 4.5 bpw: non-linear 4-bit codebook kvalues_iq4nl */
typedef struct { oxl_half d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "block_iq4_nl size");

/* 4.25 bpw: 8 sub-blocks of 32 with 6-bit scales (low 4 in scales_l, high 2 in scales_h) */
typedef struct { oxl_half d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 2 + 2 + QK_K / 64 + QK_K / 2, "block_iq4_xs size");

/* 4.25 bpw: OCP MX FP4, 32 E2M1 values and one E8M0 (power of two) scale; x = kvalues_mxfp4[q] * 2^(e-128)
 * (the table holds 2 x the E2M1 values, the scale half of 2^(e-127)) */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "block_mxfp4 size");

/* 4.5 bpw: NVIDIA FP4, 4 sub-blocks of 16 E2M1 values, each with a UE4M3 scale; sub-block s holds
 * qs[8s..8s+8): values 16s+j in the low nibbles, 16s+8+j in the high ones */
typedef struct { uint8_t d[QK_NVFP4 / QK_NVFP4_SUB]; uint8_t qs[QK_NVFP4 / 2]; } block_nvfp4;
_Static_assert(sizeof(block_nvfp4) == QK_NVFP4 / QK_NVFP4_SUB + QK_NVFP4 / 2, "block_nvfp4 size");

/* 1.125 bpw: 128 signs and one scale; x = bit ? d : -d (bit j of the little-endian qs) */
typedef struct { oxl_half d; uint8_t qs[QK1_0 / 8]; } block_q1_0;
_Static_assert(sizeof(block_q1_0) == 2 + QK1_0 / 8, "block_q1_0 size");

/* 1.6875 bpw: ternary, 5 trits a byte in qs (3^5 = 243 < 256, stored as ceil(t * 256 / 243)), 4 in qh */
typedef struct { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; oxl_half d; } block_tq1_0;
_Static_assert(sizeof(block_tq1_0) == 2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5, "block_tq1_0 size");

/* 2.0625 bpw: ternary, 2 bits a value (q - 1 in {-1, 0, 1}) */
typedef struct { uint8_t qs[QK_K / 4]; oxl_half d; } block_tq2_0;
_Static_assert(sizeof(block_tq2_0) == 2 + QK_K / 4, "block_tq2_0 size");

/* 2.0625 bpw: per 32 values two uint32: 4 grid indices (8 bits each, into iq2xxs_grid's 256 points of 8
 * values), then 4 x 7 sign bits and a 4-bit scale */
typedef struct { oxl_half d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;
_Static_assert(sizeof(block_iq2_xxs) == 2 + QK_K / 8 * 2, "block_iq2_xxs size");

/* 2.3125 bpw: 9-bit grid index + 7 sign bits per 8 values, 4-bit scales per 16 */
typedef struct { oxl_half d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
_Static_assert(sizeof(block_iq2_xs) == 2 + QK_K / 8 * 2 + QK_K / 32, "block_iq2_xs size");

/* 2.5625 bpw: 10-bit grid index (8 in qs, 2 in qh) per 8 values, explicit sign bytes, 4-bit scales */
typedef struct { oxl_half d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; } block_iq2_s;
_Static_assert(sizeof(block_iq2_s) == 2 + QK_K / 4 + QK_K / 16, "block_iq2_s size");

/* 3.0625 bpw: 8-bit grid index per 4 values, then per 32 values a uint32 of 4 x 7 sign bits and a 4-bit scale */
typedef struct { oxl_half d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
_Static_assert(sizeof(block_iq3_xxs) == 2 + 3 * (QK_K / 8), "block_iq3_xxs size");

/* 3.4375 bpw: 9-bit grid index per 4 values (8 in qs, 1 in qh), explicit signs, 4-bit scales per 32 */
typedef struct {
    oxl_half d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64];
} block_iq3_s;
_Static_assert(sizeof(block_iq3_s) == 2 + 13 * (QK_K / 32) + QK_K / 64, "block_iq3_s size");

/* 1.5625 bpw: 11-bit grid index per 8 values (8 in qs, 3 in qh), per 32 values a 3-bit scale and a
 * delta sign in qh */
typedef struct { oxl_half d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;
_Static_assert(sizeof(block_iq1_s) == 2 + QK_K / 8 + QK_K / 16, "block_iq1_s size");

/* 1.75 bpw: like IQ1_S with a delta sign per 8 values and 3-bit scales per 16; the fp16 super-block
 * scale is spread over the top 4 bits of the four uint16 of scales */
typedef struct { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; } block_iq1_m;
_Static_assert(sizeof(block_iq1_m) == QK_K / 8 + QK_K / 16 + QK_K / 32, "block_iq1_m size");

/* The IQ4 codebook. */
static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The FP4 (E2M1) codebook, doubled so it is integer; its scales carry the factor 1/2. */
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* E8M0 -> 2^(e - 128), i.e. half the MX scale 2^(e - 127); e = 0 and 1 are float subnormals, 255 gives
 * 2^127 (ggml reads no NaN). */
OXL_INLINE float oxl_e8m0_to_fp32_half(uint8_t e) {
    return oxl_fp32_from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* UE4M3 (unsigned, 4 exponent bits with bias 7, 3 mantissa bits) -> half its value; 0x00 and 0x7F (the
 * NaN code) read as 0, bit 7 is ignored. Every result is exact in float. */
OXL_INLINE float oxl_ue4m3_to_fp32_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 0xF, m = x & 0x7;
    /* subnormal: m * 2^-9; normal: (8 + m) * 2^(e - 10); halved */
    return e == 0 ? (float)m * 0x1.0p-10f : (float)(8 + m) * oxl_fp32_from_bits((uint32_t)(e - 11 + 127) << 23);
}

#endif /* OXL_BLOCKS_H */
