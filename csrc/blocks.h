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

/* The IQ4 codebook. */
static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

#endif /* OXL_BLOCKS_H */
