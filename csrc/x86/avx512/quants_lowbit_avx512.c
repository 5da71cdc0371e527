/* AVX-512 Q1_0 vec_dot: two Q8_0 activation blocks per 512-bit register, the weight's 64 sign bits
 * used directly as a mask (negate the activations where the bit is clear). Low half = even activation
 * block, high half = odd: the order of csrc/x86/quants_lowbit_x86.h, so the AVX2 multi-row kernel is
 * exact for it (registered by oxl_register_avx512_gemm). */
#include "../quants_lowbit_x86.h"

static void vec_dot_q1_0_q8_0_avx512(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx,
                                     const void *OXL_RESTRICT vy) {
    const block_q1_0 *x = (const block_q1_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n / QK1_0; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        for (int k = 0; k < 4; k += 2) {
            uint64_t bits;
            memcpy(&bits, x[i].qs + 4 * k, 8);
            const block_q8_0 *yb = y + 4 * i + k;
            const __m512i qy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)yb[0].qs)),
                                                  _mm256_loadu_si256((const __m256i *)yb[1].qs), 1);
            const __m512i sy = _mm512_mask_sub_epi8(qy, (__mmask64)~bits, _mm512_setzero_si512(), qy);
            const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_set1_epi8(1), sy), _mm512_set1_epi16(1));
            const __m512 c = _mm512_insertf32x8(_mm512_set1_ps(dx * _cvtsh_ss(yb[0].d)), _mm256_set1_ps(dx * _cvtsh_ss(yb[1].d)), 1);
            acc = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(p), acc);
        }
    }
    *s = hsum_f32_8(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
}

void oxl_register_avx512_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_avx512;
}
