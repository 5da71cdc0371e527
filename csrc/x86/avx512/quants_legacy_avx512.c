/* AVX-512 (F/BW/VL/DQ) kernels for 32-value block types (MXFP4; Q4_1, Q5_0 and Q5_1 are the sixteen-row
 * kernels of quants_x16b_avx512.c) and F16.
 * Same scheme as the AVX2 tier (csrc/x86/avx2/quants_legacy_avx2.c): two blocks per 512-bit register,
 * the lower 256 bits block i and the upper block i + 1, each decoded by the shared AVX2 decoder.
 * AVX-512 has no vpsignb, so the sign trick is |x| * (y negated where x < 0) with a mask. An odd last
 * block goes through the AVX2 path. The gemm tiles are the AVX2 ones (inherited from that table),
 * compiled there; with 32 vector registers here they would spill less, a later improvement. */
#include "../quants_legacy_x86.h"

static inline float hsum_f32_16(__m512 v) { return _mm512_reduce_add_ps(v); }

/* signed x * signed y over 64 lanes -> 16 int32 lanes (|y| <= 127; x may be -128) */
static inline __m512i dot_i8_512(__m512i x, __m512i y) {
    const __mmask64 neg = _mm512_movepi8_mask(x);
    const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    const __m512i ax = _mm512_abs_epi8(x);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1));
}

static inline __m512i dot_u8_512(__m512i ux, __m512i y) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ux, y), _mm512_set1_epi16(1));
}

static inline __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* lanes 0..7 = a, lanes 8..15 = b */
static inline __m512 join_scale(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

OXL_INLINE void vec_dot_512(int kind, int n, float *s, const void *vx, const void *vy) {
    const char *x = (const char *)vx, *y = (const char *)vy;
    const size_t bx = kind_block_bytes(kind);
    const int nb = n / 32;
    __m512 acc = _mm512_setzero_ps();
    float summs = 0.0f;
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        float dx0, dx1, mx0 = 0, mx1 = 0, dy0, dy1, sy0, sy1;
        const __m512i qx = join(decode(kind, x + i * bx, &dx0, &mx0), decode(kind, x + (i + 1) * bx, &dx1, &mx1));
        const __m512i qy = join(act_block(kind, y, i, &dy0, &sy0), act_block(kind, y, i + 1, &dy1, &sy1));
        const __m512i p = kind_unsigned(kind) ? dot_u8_512(qx, qy) : dot_i8_512(qx, qy);
        acc = _mm512_fmadd_ps(join_scale(dx0 * dy0, dx1 * dy1), _mm512_cvtepi32_ps(p), acc);
        if (kind_unsigned(kind)) summs += mx0 * sy0 + mx1 * sy1;
    }
    /* the tail block, as the AVX2 tier does it */
    __m256 acc256 = _mm256_setzero_ps();
    for (; i < nb; i++) {
        float dx, mx = 0, dy, sy;
        const __m256i qx = decode(kind, x + i * bx, &dx, &mx);
        const __m256i qy = act_block(kind, y, i, &dy, &sy);
        const __m256 p = kind_unsigned(kind) ? dot_u8_f(qx, qy) : dot_i8_f(qx, qy);
        acc256 = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), p, acc256);
        if (kind_unsigned(kind)) summs += mx * sy;
    }
    *s = hsum_f32_16(acc) + hsum_f32_8(acc256) + summs;
}

#define VEC_DOT(name, kind) \
    static void name(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) { \
        vec_dot_512(kind, n, s, x, y); \
    }

VEC_DOT(vec_dot_mxfp4_q8_0_avx512, K_MXFP4)

static void vec_dot_f16_f32_avx512(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const oxl_half *x = (const oxl_half *)vx;
    const float *y = (const float *)vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16))),
                             _mm512_loadu_ps(y + i + 16), a1);
    }
    float sum = hsum_f32_16(_mm512_add_ps(a0, a1));
    for (; i < n; i++) sum += oxl_fp16_to_fp32(x[i]) * y[i];
    *s = sum;
}

/* Q4_0, Q8_0, Q4_1, Q5_0 and Q5_1 are the VNNI tier's sixteen-row kernels built for this tier
 * (quants_x16_avx512.c, quants_x16b_avx512.c), registered after these */
void oxl_register_avx512_legacy(oxl_kernel_table *t) {
    t->type[OXL_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_avx512;
    t->type[OXL_TYPE_F16].vec_dot = vec_dot_f16_f32_avx512;
}
