/* Common definitions for oxillama's C kernels. No Python headers anywhere in csrc/. */
#ifndef OXL_H
#define OXL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OXL_RESTRICT __restrict
#define OXL_INLINE static inline __attribute__((always_inline))
#define OXL_UNUSED(x) (void)(x)
#define OXL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OXL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Status codes returned by kernels that check their arguments. */
enum {
    OXL_OK = 0,
    OXL_ERR_TYPE = -1,      /* unknown or unsupported tensor type */
    OXL_ERR_SHAPE = -2,     /* a length is not a multiple of the block size, or negative */
    OXL_ERR_SIZE = -3,      /* a buffer is smaller than the shape needs */
    OXL_ERR_NOMEM = -4,
    OXL_ERR_ARG = -5,
};

typedef uint16_t oxl_half;   /* IEEE binary16 bits */
typedef uint16_t oxl_bf16;   /* bfloat16 bits */

OXL_INLINE float oxl_fp32_from_bits(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
OXL_INLINE uint32_t oxl_fp32_to_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* binary16 -> binary32, exact for every input incl. subnormals, inf and NaN. */
OXL_INLINE float oxl_fp16_to_fp32(oxl_half h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = oxl_fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = oxl_fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? oxl_fp32_to_bits(denormalized)
                                                                 : oxl_fp32_to_bits(normalized));
    return oxl_fp32_from_bits(result);
}

/* binary32 -> binary16, round to nearest even, like F16C's vcvtps2ph. */
OXL_INLINE oxl_half oxl_fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = oxl_fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = oxl_fp32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = oxl_fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (oxl_half)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

OXL_INLINE float oxl_bf16_to_fp32(oxl_bf16 h) { return oxl_fp32_from_bits((uint32_t)h << 16); }

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (quiet). */
OXL_INLINE oxl_bf16 oxl_fp32_to_bf16(float f) {
    uint32_t u = oxl_fp32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (oxl_bf16)((u >> 16) | 64);
    return (oxl_bf16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#define OXL_FP16_TO_FP32(x) oxl_fp16_to_fp32(x)
#define OXL_FP32_TO_FP16(x) oxl_fp32_to_fp16(x)

#endif /* OXL_H */
