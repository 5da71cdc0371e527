/* Small AVX2 helpers shared by the x86 tiers' source files (static inline: each tier's objects
 * compile them with their own flags). */
#ifndef OXL_X86_AVX2_UTIL_H
#define OXL_X86_AVX2_UTIL_H

#include <immintrin.h>

/* sum of the 8 floats of v */
static inline float hsum_f32_8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* hsum_f32_8 of 4 vectors at once: lane k of the result is hsum_f32_8(a_k), with the same adds in the same
 * pairings ((lo + hi), then (l0 + l2) + (l1 + l3)), so it gives the same floats */
static inline __m128 hsum_f32_8x4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 x01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
    __m256 x23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
    x01 = _mm256_add_ps(x01, _mm256_permute_ps(x01, 0x4E));
    x23 = _mm256_add_ps(x23, _mm256_permute_ps(x23, 0x4E));
    x01 = _mm256_add_ps(x01, _mm256_permute_ps(x01, 0xB1));
    x23 = _mm256_add_ps(x23, _mm256_permute_ps(x23, 0xB1));
    /* outputs 0..3 are lanes 0 and 4 of x01 and of x23 */
    const __m256 u = _mm256_unpacklo_ps(x01, x23);   /* lanes 0, 1: outputs 0, 2; lanes 4, 5: outputs 1, 3 */
    return _mm_unpacklo_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

#endif
