/* <immintrin.h> for compiling the AVX-512 tiers on a CPU without AVX-512 (tests/native/test_simd_tiers.py):
 * the compiler's own header for the instructions this machine has (AVX2, FMA, F16C: the AVX-512
 * sources use them too and they run natively), then SIMDe (Debian: libsimde-dev), whose native
 * aliases turn every _mm512_* / __m512* name used afterwards into its portable implementation.
 *
 * SIMDe 0.7.4 lacks a few intrinsics the kernels use (among them the gathers of the i-quant grids); they are modelled below in plain C from the
 * Intel definitions, with the summation order of GCC's own header where the order shows in a float
 * result. Each one names the instruction it stands for. */
#ifndef OXL_TEST_SIMDE_IMMINTRIN_H
#define OXL_TEST_SIMDE_IMMINTRIN_H

#include_next <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <string.h>

/* VCVTDQ2PS zmm: 16 int32 -> float, each rounded to nearest even (exactly what the 256-bit form does) */
static inline simde__m512 oxl_model_mm512_cvtepi32_ps(simde__m512i a) {
    int32_t i[16];
    float f[16];
    memcpy(i, &a, sizeof(i));
    for (int k = 0; k < 16; k++) f[k] = (float)i[k];
    simde__m512 r;
    memcpy(&r, f, sizeof(f));
    return r;
}

/* VCVTPH2PS zmm, ymm: 16 binary16 -> float (exact) through the 256-bit F16C instruction, twice */
static inline simde__m512 oxl_model_mm512_cvtph_ps(simde__m256i a) {
    __m128i h[2];
    memcpy(h, &a, sizeof(h));
    __m256 f[2] = {_mm256_cvtph_ps(h[0]), _mm256_cvtph_ps(h[1])};
    simde__m512 r;
    memcpy(&r, f, sizeof(f));
    return r;
}

/* _mm512_reduce_add_ps (a sequence, not one instruction): GCC's order, upper 256 + lower 256, then
 * upper 128 + lower 128, then lanes {0,1} + {2,3}, then lane 0 + lane 1 */
static inline float oxl_model_mm512_reduce_add_ps(simde__m512 a) {
    float v[16], t3[8], t6[4];
    memcpy(v, &a, sizeof(v));
    for (int k = 0; k < 8; k++) t3[k] = v[8 + k] + v[k];
    for (int k = 0; k < 4; k++) t6[k] = t3[4 + k] + t3[k];
    const float t80 = t6[0] + t6[2], t81 = t6[1] + t6[3];
    return t80 + t81;
}

/* VPMOVZXBD zmm, xmm: 16 bytes zero-extended to int32 */
static inline simde__m512i oxl_model_mm512_cvtepu8_epi32(__m128i a) {
    uint8_t b[16];
    uint32_t r32[16];
    memcpy(b, &a, sizeof(b));
    for (int k = 0; k < 16; k++) r32[k] = b[k];
    simde__m512i r;
    memcpy(&r, r32, sizeof(r32));
    return r;
}

/* VPGATHERDQ zmm: 8 int64 at base + scale * (int32 index k) */
static inline simde__m512i oxl_model_mm512_i32gather_epi64(__m256i idx, const void *base, int scale) {
    int32_t i[8];
    int64_t v[8];
    memcpy(i, &idx, sizeof(i));
    for (int k = 0; k < 8; k++) memcpy(&v[k], (const char *)base + (int64_t)i[k] * scale, 8);
    simde__m512i r;
    memcpy(&r, v, sizeof(v));
    return r;
}

/* VPGATHERDD zmm: 16 int32 at base + scale * (int32 index k) */
static inline simde__m512i oxl_model_mm512_i32gather_epi32(simde__m512i idx, const void *base, int scale) {
    int32_t i[16], v[16];
    memcpy(i, &idx, sizeof(i));
    for (int k = 0; k < 16; k++) memcpy(&v[k], (const char *)base + (int64_t)i[k] * scale, 4);
    simde__m512i r;
    memcpy(&r, v, sizeof(v));
    return r;
}

/* VGATHERDPS zmm{k}: 16 floats at base + scale * (int32 index k) where the mask is set (the others from src,
 * their addresses not read) */
static inline simde__m512 oxl_model_mm512_mask_i32gather_ps(simde__m512 src, simde__mmask16 m, simde__m512i idx,
                                                            const void *base, int scale) {
    int32_t i[16];
    float v[16];
    memcpy(i, &idx, sizeof(i));
    memcpy(v, &src, sizeof(v));
    for (int k = 0; k < 16; k++)
        if ((m >> k) & 1) memcpy(&v[k], (const char *)base + (int64_t)i[k] * scale, 4);
    simde__m512 r;
    memcpy(&r, v, sizeof(v));
    return r;
}

/* VSHUFF32X4 zmm: 128-bit lanes 0, 1 of the result from a (imm bits 0-1, 2-3), lanes 2, 3 from b (4-5, 6-7) */
static inline simde__m512 oxl_model_mm512_shuffle_f32x4(simde__m512 a, simde__m512 b, int imm) {
    float fa[16], fb[16], r[16];
    memcpy(fa, &a, sizeof(fa));
    memcpy(fb, &b, sizeof(fb));
    for (int l = 0; l < 4; l++)
        memcpy(r + 4 * l, (l < 2 ? fa : fb) + 4 * ((imm >> (2 * l)) & 3), 16);
    simde__m512 out;
    memcpy(&out, r, sizeof(r));
    return out;
}

/* VPSRAD zmm, imm8: each int32 shifted right arithmetically (counts above 31 fill with the sign) */
static inline simde__m512i oxl_model_mm512_srai_epi32(simde__m512i a, unsigned imm) {
    int32_t v[16];
    memcpy(v, &a, sizeof(v));
    for (int k = 0; k < 16; k++) v[k] = v[k] >> (imm > 31 ? 31 : imm);
    simde__m512i r;
    memcpy(&r, v, sizeof(v));
    return r;
}

/* _mm512_reduce_add_epi32 (a sequence): the int32 sum of the 16 lanes, wrapping */
static inline int oxl_model_mm512_reduce_add_epi32(simde__m512i a) {
    uint32_t v[16], s = 0;
    memcpy(v, &a, sizeof(v));
    for (int k = 0; k < 16; k++) s += v[k];
    return (int)s;
}

/* VCVTPS2DQ zmm: 16 float -> int32, rounded to nearest even (the default MXCSR mode; the kernels only convert
 * values that are already whole) */
static inline simde__m512i oxl_model_mm512_cvtps_epi32(simde__m512 a) {
    float f[16];
    int32_t i[16];
    memcpy(f, &a, sizeof(f));
    for (int k = 0; k < 16; k++) i[k] = (int32_t)__builtin_lrintf(f[k]);
    simde__m512i r;
    memcpy(&r, i, sizeof(i));
    return r;
}

/* VMOVUPS zmm{k}{z}, m512 / m512{k}, zmm: the masked-off lanes read as zero and are not written (nor touched:
 * the kernels use them for the last, partial pass over a row) */
static inline simde__m512 oxl_model_mm512_maskz_loadu_ps(simde__mmask16 k, const void *p) {
    float f[16];
    for (int i = 0; i < 16; i++) f[i] = (k >> i) & 1 ? ((const float *)p)[i] : 0.0f;
    simde__m512 r;
    memcpy(&r, f, sizeof(f));
    return r;
}

static inline void oxl_model_mm512_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a) {
    float f[16];
    memcpy(f, &a, sizeof(f));
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) ((float *)p)[i] = f[i];
}

/* SIMDe 0.7.4's alias of _mm512_madd_epi16 (VPMADDWD) takes the masked form's four arguments */
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) oxl_model_mm512_cvtepi32_ps(a)
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) oxl_model_mm512_cvtph_ps(a)
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) oxl_model_mm512_reduce_add_ps(a)
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) oxl_model_mm512_cvtepu8_epi32(a)
#undef _mm512_i32gather_epi64
#define _mm512_i32gather_epi64(i, b, s) oxl_model_mm512_i32gather_epi64(i, b, s)
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32(i, b, s) oxl_model_mm512_i32gather_epi32(i, b, s)
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps(src, k, i, b, s) oxl_model_mm512_mask_i32gather_ps(src, k, i, b, s)
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) oxl_model_mm512_shuffle_f32x4(a, b, imm)
#undef _mm512_srai_epi32
#define _mm512_srai_epi32(a, imm) oxl_model_mm512_srai_epi32(a, imm)
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32(a) oxl_model_mm512_reduce_add_epi32(a)
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) oxl_model_mm512_cvtps_epi32(a)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) oxl_model_mm512_maskz_loadu_ps(k, p)
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, a) oxl_model_mm512_mask_storeu_ps(p, k, a)

#endif
