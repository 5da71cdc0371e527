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

#endif
