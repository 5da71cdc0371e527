/* AVX2+FMA kernels for the K-quants: vec_dot of Q2_K..Q6_K, IQ4_XS and Q8_K weights with Q8_K
 * activations, and a fast Q8_K quantizer (bit-identical to quantize_row_q8_K_ref).
 * Each super-block is accumulated in int32 lanes and scaled into a float accumulator once. */
#include <immintrin.h>

#include "../avx2_util.h"

#include "../../blocks.h"
#include "../../kernels.h"
#include "../../scalar/quants_k.h"

#include "../quants_k_x86.h"

void vec_dot_q4_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m128i sm = scales_mins_k4(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            const __m256i q_lo = _mm256_and_si256(q4, m4);
            const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            sumi = dot_k4_pair(sumi, q_lo, q_hi, y[i].qs + 64 * c, scales, BCAST16(2 * c), BCAST16(2 * c + 1));
        }
        acc = k4_accumulate(acc, sumi, sm, y[i].bsums, _cvtsh_ss(x[i].d), _cvtsh_ss(x[i].dmin), y[i].d);
    }
    *s = hsum_f32_8(acc);
}

void vec_dot_q5_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m128i sm = scales_mins_k4(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        /* qh byte l: bit j = 5th bit of value 32j + l */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m1), 4);
            const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), m1), 4);
            const __m256i q_lo = _mm256_or_si256(_mm256_and_si256(q4, m4), h_lo);
            const __m256i q_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), h_hi);
            sumi = dot_k4_pair(sumi, q_lo, q_hi, y[i].qs + 64 * c, scales, BCAST16(2 * c), BCAST16(2 * c + 1));
        }
        acc = k4_accumulate(acc, sumi, sm, y[i].bsums, _cvtsh_ss(x[i].d), _cvtsh_ss(x[i].dmin), y[i].d);
    }
    *s = hsum_f32_8(acc);
}

/* ---------------------------------------------------------------- 16-value scale groups
 * Q2_K, Q3_K and Q6_K have one scale per 16 values. A 32-value vector k of a 128-value half h covers
 * groups 8h+2k (low 128-bit lane of the maddubs result) and 8h+2k+1 (high lane). */

/* sum over the 4 vectors of a half of scale * maddubs(q, q8); scales16: the 8 int16 scales of the half */
static inline __m256i dot_half_g16(const __m256i q[4], const int8_t *q8, __m256i scales16) {
    __m256i sumi = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        const __m256i q8k = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
        const __m256i p = _mm256_maddubs_epi16(q[k], q8k);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales16, BCAST16_PAIR(2 * k)), p));
    }
    return sumi;
}

void vec_dot_q6_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        /* values are stored +32: subtract 32 * sum_g scale_g * bsums_g */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
        sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
            const __m256i scales16 = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(x[i].scales + 8 * h))));
            sumi = _mm256_add_epi32(sumi, dot_half_g16(q, y[i].qs + 128 * h, scales16));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_f32_8(acc);
}

/* Q3_K's 16 signed 6-bit scales (oxl_unpack_scales_q3k), built in a register */
static inline __m128i scales_q3k(const uint8_t *q) {
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    uint32_t a[3];
    memcpy(a, q, 12);
    const uint32_t w0 = (a[0] & lo4) | ((a[2] & hi2) << 4);
    const uint32_t w1 = (a[1] & lo4) | (((a[2] >> 2) & hi2) << 4);
    const uint32_t w2 = ((a[0] >> 4) & lo4) | (((a[2] >> 4) & hi2) << 4);
    const uint32_t w3 = ((a[1] >> 4) & lo4) | (((a[2] >> 6) & hi2) << 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3), _mm_set1_epi8(32));
}

void vec_dot_q3_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        const __m128i sc8 = scales_q3k(x[i].scales);
        /* q = low2 | hbit << 2 in 0..7 stands for q - 4: subtract 4 * sum_g scale_g * bsums_g */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bs), 2);
        sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), m1), 2);
                q[k] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q2, 2 * k), m3), hb);
            }
            const __m128i sc_h = h ? _mm_unpackhi_epi64(sc8, sc8) : sc8;
            const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc_h));
            sumi = _mm256_add_epi32(sumi, dot_half_g16(q, y[i].qs + 128 * h, scales16));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_f32_8(acc);
}

void vec_dot_q2_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        const float dmin = y[i].d * _cvtsh_ss(x[i].dmin);
        const __m128i sc_m = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m128i mins8 = _mm_and_si128(_mm_srli_epi16(sc_m, 4), m4);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m256i summ = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins8), bs);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            __m256i q[4];
            for (int k = 0; k < 4; k++) q[k] = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * k), m3);
            const __m256i scales16 = _mm256_broadcastsi128_si256(
                _mm_cvtepu8_epi16(_mm_and_si128(_mm_loadl_epi64((const __m128i *)(x[i].scales + 8 * h)), m4)));
            sumi = _mm256_add_epi32(sumi, dot_half_g16(q, y[i].qs + 128 * h, scales16));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(summ), acc);
    }
    *s = hsum_f32_8(acc);
}

/* ---------------------------------------------------------------- IQ4_XS */

void vec_dot_iq4_xs_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_iq4_xs *x = (const block_iq4_xs *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i values = iq4_xs_values();
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            const iq4_xs_pair p = iq4_xs_decode_pair(&x[i], ib, values);
            sumi = iq4_xs_dot_pair(sumi, &p, y[i].qs + 32 * ib);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_f32_8(acc);
}

/* ---------------------------------------------------------------- Q8_K */

void vec_dot_q8_K_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const block_q8_K *x = (const block_q8_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int nb = n / QK_K;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < QK_K; j += 32) {
            const __m256i qx = _mm256_loadu_si256((const __m256i *)(x[i].qs + j));
            const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[i].qs + j));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(madd_i8_signed(qx, qy), ones));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x[i].d * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_f32_8(acc);
}

/* Same bytes as quantize_row_q8_K_ref: q = round_half_even(-127/max * x) (cvtps rounds like
 * nearest_int), max = the first value of largest magnitude. */
void quantize_row_q8_K_avx2(const float *OXL_RESTRICT x, void *OXL_RESTRICT vy, int64_t n) {
    block_q8_K *y = (block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i q_max = _mm256_set1_epi32(127);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!(amax > 0)) {
            y[i].d = 0;
            memset(y[i].qs, 0, QK_K);
            memset(y[i].bsums, 0, sizeof(y[i].bsums));
            continue;
        }
        float max = amax;
        const __m256 vamax = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), vamax,
                                                             _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 mul = _mm256_set1_ps(iscale);
        __m256i s32[8];
        for (int j = 0; j < QK_K; j += 32) {
            __m256i v[4];
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(mul, _mm256_loadu_ps(x + j + 8 * k)));
                v[k] = _mm256_min_epi32(v[k], q_max);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            const __m256i q = _mm256_permutevar8x32_epi32(p, perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), q);
            /* int32 lanes 0-3: sums of 4 of bytes 0..15, lanes 4-7: of bytes 16..31 */
            s32[j / 32] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        }
        /* hadd twice: lane-local sums of 16 for groups (0,2,4,6 | 1,3,5,7) of four 32-value vectors */
        __m256i g[2];
        for (int h = 0; h < 2; h++) {
            const __m256i a = _mm256_hadd_epi32(s32[4 * h], s32[4 * h + 1]);
            const __m256i b = _mm256_hadd_epi32(s32[4 * h + 2], s32[4 * h + 3]);
            g[h] = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(a, b), perm);
        }
        const __m256i bs = _mm256_permute4x64_epi64(_mm256_packs_epi32(g[0], g[1]), 0xD8);
        _mm256_storeu_si256((__m256i *)y[i].bsums, bs);
        y[i].d = 1 / iscale;
    }
}

GEMM_ROWS_K(gemm_rows_q4_K_avx2, TILE_Q4_K)
GEMM_ROWS_K(gemm_rows_q5_K_avx2, TILE_Q5_K)
GEMM_ROWS_K(gemm_rows_q6_K_avx2, tile_q6_K)
GEMM_ROWS_K(gemm_rows_iq4_xs_avx2, tile_iq4_xs)

void oxl_register_avx2_k(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K_avx2;
    t->type[OXL_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K_avx2;
    t->type[OXL_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_avx2;
    t->type[OXL_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_avx2;
    t->type[OXL_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_avx2;
    t->type[OXL_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K_avx2;
    t->type[OXL_TYPE_Q8_K].vec_dot = vec_dot_q8_K_q8_K_avx2;
    t->type[OXL_TYPE_Q8_K].from_float = quantize_row_q8_K_avx2;
    t->type[OXL_TYPE_Q4_K].gemm = gemm_rows_q4_K_avx2;
    t->type[OXL_TYPE_Q5_K].gemm = gemm_rows_q5_K_avx2;
    t->type[OXL_TYPE_Q6_K].gemm = gemm_rows_q6_K_avx2;
    t->type[OXL_TYPE_IQ4_XS].gemm = gemm_rows_iq4_xs_avx2;
}
