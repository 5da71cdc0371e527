/* AVX-512 row ops of the recurrent layers: Mamba-2's scan over the states and the causal conv (kernels.h: the
 * order each sums in). 16 lanes a register, masked last passes instead of a scalar tail; every lane does the
 * same fused operations as the AVX2 tier's lanes, so the two tiers give the same floats. */
#include <immintrin.h>

#include "../../kernels.h"

static inline __mmask16 lanes(int nl) { return (__mmask16)((1u << nl) - 1u); }

/* e^x for 16 lanes, step for step the AVX2 tier's exp8 (ops_avx2.c): x = n ln2 + r, e^r by the degree-6 Taylor
 * polynomial, 2^n in the exponent bits, below -87 zero; so both tiers give the same floats */
static inline __m512 exp16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.3762626647949f), lo = _mm512_set1_ps(-87.3365478515625f);
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps((__mmask16)~underflow, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

/* The scan with y held in registers: 64 dims a pass (four registers, so four independent fma chains over s),
 * then 16 at a time, the last pass masked. */
static void ssm_scan_states_avx512(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                                   int d_state, int n) {
    const __m512 vdA = _mm512_set1_ps(dA);
    int i0 = 0;
    for (; i0 + 64 <= n; i0 += 64) {
        __m512 y0 = _mm512_loadu_ps(y + i0), y1 = _mm512_loadu_ps(y + i0 + 16);
        __m512 y2 = _mm512_loadu_ps(y + i0 + 32), y3 = _mm512_loadu_ps(y + i0 + 48);
        const __m512 x0 = _mm512_loadu_ps(xdt + i0), x1 = _mm512_loadu_ps(xdt + i0 + 16);
        const __m512 x2 = _mm512_loadu_ps(xdt + i0 + 32), x3 = _mm512_loadu_ps(xdt + i0 + 48);
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i0;
            const __m512 b = _mm512_set1_ps(B[s]), c = _mm512_set1_ps(C[s]);
            const __m512 h0 = _mm512_fmadd_ps(_mm512_loadu_ps(hs), vdA, _mm512_mul_ps(b, x0));
            const __m512 h1 = _mm512_fmadd_ps(_mm512_loadu_ps(hs + 16), vdA, _mm512_mul_ps(b, x1));
            const __m512 h2 = _mm512_fmadd_ps(_mm512_loadu_ps(hs + 32), vdA, _mm512_mul_ps(b, x2));
            const __m512 h3 = _mm512_fmadd_ps(_mm512_loadu_ps(hs + 48), vdA, _mm512_mul_ps(b, x3));
            _mm512_storeu_ps(hs, h0);
            _mm512_storeu_ps(hs + 16, h1);
            _mm512_storeu_ps(hs + 32, h2);
            _mm512_storeu_ps(hs + 48, h3);
            y0 = _mm512_fmadd_ps(h0, c, y0);
            y1 = _mm512_fmadd_ps(h1, c, y1);
            y2 = _mm512_fmadd_ps(h2, c, y2);
            y3 = _mm512_fmadd_ps(h3, c, y3);
        }
        _mm512_storeu_ps(y + i0, y0);
        _mm512_storeu_ps(y + i0 + 16, y1);
        _mm512_storeu_ps(y + i0 + 32, y2);
        _mm512_storeu_ps(y + i0 + 48, y3);
    }
    for (; i0 < n; i0 += 16) {
        const __mmask16 m = lanes(n - i0 < 16 ? n - i0 : 16);
        __m512 y0 = _mm512_maskz_loadu_ps(m, y + i0);
        const __m512 x0 = _mm512_maskz_loadu_ps(m, xdt + i0);
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i0;
            const __m512 h0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, hs), vdA,
                                              _mm512_mul_ps(_mm512_set1_ps(B[s]), x0));
            _mm512_mask_storeu_ps(hs, m, h0);
            y0 = _mm512_fmadd_ps(h0, _mm512_set1_ps(C[s]), y0);
        }
        _mm512_mask_storeu_ps(y + i0, m, y0);
    }
}

/* wt[j] = tap j of 16 channels (lanes past the mask 0) from w (channels, L) row-major: for the common L = 4 the 64
 * contiguous floats transposed in registers, else one masked gather per tap (a scalar copy through memory cost
 * ~3x the whole decode conv: every tap's 16 stores stalled the vector load that read them back) */
static inline void conv_taps16(const float *w, int L, __mmask16 m, __m512 *wt) {
    if (L == 4 && m == 0xffff) {
        const __m512 a0 = _mm512_loadu_ps(w), a1 = _mm512_loadu_ps(w + 16);
        const __m512 a2 = _mm512_loadu_ps(w + 32), a3 = _mm512_loadu_ps(w + 48);
        const __m512i every4 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        for (int j = 0; j < 4; j++) {   /* channels 0-7 from a0|a1, 8-15 from a2|a3 */
            const __m512i ij = _mm512_add_epi32(every4, _mm512_set1_epi32(j));
            wt[j] = _mm512_shuffle_f32x4(_mm512_permutex2var_ps(a0, ij, a1), _mm512_permutex2var_ps(a2, ij, a3), 0x44);
        }
        return;
    }
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(L));
    for (int j = 0; j < L; j++) wt[j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, w + j, 4);
}

/* The causal conv, 16 channels a pass with the window of L inputs in registers, the last pass masked: mul,
 * then fma per tap, then + b, then SiLU v / (1 + exp16(-v)) (the AVX2 tier's lane arithmetic) */
static void causal_conv_avx512(const float *x, int64_t ldx, float *y, int64_t ldy, int n, float *state,
                               int64_t ld_state, const float *w, const float *b, int L, int c0, int c1, int silu) {
    const int d = L - 1;
    __m512 win[OXL_CONV_MAX_L], wt[OXL_CONV_MAX_L];
    for (int c = c0; c < c1; c += 16) {
        const int nl = c1 - c < 16 ? c1 - c : 16;
        const __mmask16 m = lanes(nl);
        conv_taps16(w + (int64_t)c * L, L, m, wt);
        const __m512 vb = b ? _mm512_maskz_loadu_ps(m, b + c) : _mm512_setzero_ps();
        for (int j = 0; j < d; j++) win[j] = _mm512_maskz_loadu_ps(m, state + (int64_t)j * ld_state + c);
        for (int t = 0; t < n; t++) {
            win[d] = _mm512_maskz_loadu_ps(m, x + (int64_t)t * ldx + c);
            __m512 acc = _mm512_mul_ps(wt[0], win[0]);
            for (int j = 1; j < L; j++) acc = _mm512_fmadd_ps(wt[j], win[j], acc);
            if (b) acc = _mm512_add_ps(acc, vb);
            if (silu) acc = _mm512_div_ps(acc, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), acc))));
            _mm512_mask_storeu_ps(y + (int64_t)t * ldy + c, m, acc);
            for (int j = 0; j < d; j++) win[j] = win[j + 1];
        }
        for (int j = 0; j < d; j++) _mm512_mask_storeu_ps(state + (int64_t)j * ld_state + c, m, win[j]);
    }
}

void oxl_register_avx512_ops(oxl_kernel_table *t) {
    t->ops.ssm_scan_states = ssm_scan_states_avx512;
    t->ops.causal_conv = causal_conv_avx512;
}
