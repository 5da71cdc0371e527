/* AVX2+FMA+F16C row ops: norms, softmax, activations, f16 dot/axpy for attention.
 * Each loop does 8 (or 32) lanes at a time and ends in the same scalar tail. */
#include <immintrin.h>
#include <math.h>

#include "../../blocks.h"
#include "../../kernels.h"
#include "../avx2_util.h"

static inline float hmax8(__m256 v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* e^x for 8 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
 * (relative error ~1e-7), 2^n built in the exponent bits. Inputs below -87 give 0, above 88 inf-ish. */
static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365478515625f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(underflow, res);
}

static void rms_norm_avx2(const float *x, const float *w, float *y, int n, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    double ss = hsum_f32_8(acc);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
        for (; i < n; i++) y[i] = x[i] * scale * w[i];
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
        for (; i < n; i++) y[i] = x[i] * scale;
    }
}

static double exp_shift_sum_d_avx2(float *x, int n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 vsum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    double sum = hsum_f32_8(vsum);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

static float exp_shift_sum_avx2(float *x, int n, float m) { return (float)exp_shift_sum_d_avx2(x, n, m); }

/* The causal conv, 8 channels a pass with the window of L inputs in registers and a masked last pass (every lane
 * computes what the scalar tier's order says, fused: mul, then fma per tap, then + b, then SiLU v / (1 + exp8(-v))) */
static void causal_conv_avx2(const float *x, int64_t ldx, float *y, int64_t ldy, int n, float *state,
                             int64_t ld_state, const float *w, const float *b, int L, int c0, int c1, int silu) {
    const int d = L - 1;
    __m256 win[OXL_CONV_MAX_L], wt[OXL_CONV_MAX_L];
    for (int c = c0; c < c1; c += 8) {
        const int nl = c1 - c < 8 ? c1 - c : 8;
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nl), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        /* tap j of the 8 channels: one masked gather (a scalar copy through memory stalls the load reading it) */
        const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(L));
        for (int j = 0; j < L; j++)
            wt[j] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w + (int64_t)c * L + j, idx, _mm256_castsi256_ps(m), 4);
        const __m256 vb = b ? _mm256_maskload_ps(b + c, m) : _mm256_setzero_ps();
        for (int j = 0; j < d; j++) win[j] = _mm256_maskload_ps(state + (int64_t)j * ld_state + c, m);
        for (int t = 0; t < n; t++) {
            win[d] = _mm256_maskload_ps(x + (int64_t)t * ldx + c, m);
            __m256 acc = _mm256_mul_ps(wt[0], win[0]);
            for (int j = 1; j < L; j++) acc = _mm256_fmadd_ps(wt[j], win[j], acc);
            if (b) acc = _mm256_add_ps(acc, vb);
            if (silu) acc = _mm256_div_ps(acc, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), acc))));
            _mm256_maskstore_ps(y + (int64_t)t * ldy + c, m, acc);
            for (int j = 0; j < d; j++) win[j] = win[j + 1];
        }
        for (int j = 0; j < d; j++) _mm256_maskstore_ps(state + (int64_t)j * ld_state + c, m, win[j]);
    }
}

/* The scan over the states with y held in registers: 32 dims at a time (a streamed state prefetched
 * OXL_SSM_PREFETCH_BYTES ahead), then 8, then the scalar tail (fmaf, the
 * same fused operations lane by lane). */
static void ssm_scan_states_avx2(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                                 int d_state, int n, int stream) {
    const __m256 vdA = _mm256_set1_ps(dA);
    const uintptr_t ahead = (uintptr_t)(OXL_SSM_PREFETCH_BYTES / 4 / n * n) * 4;   /* bytes, whole rows */
    int i0 = 0;
    for (; i0 + 32 <= n; i0 += 32) {
        __m256 y0 = _mm256_loadu_ps(y + i0), y1 = _mm256_loadu_ps(y + i0 + 8);
        __m256 y2 = _mm256_loadu_ps(y + i0 + 16), y3 = _mm256_loadu_ps(y + i0 + 24);
        const __m256 x0 = _mm256_loadu_ps(xdt + i0), x1 = _mm256_loadu_ps(xdt + i0 + 8);
        const __m256 x2 = _mm256_loadu_ps(xdt + i0 + 16), x3 = _mm256_loadu_ps(xdt + i0 + 24);
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i0;
            if (stream) {
                const char *pf = (const char *)((uintptr_t)hs + ahead);   /* may lie past h: only a hint */
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
            }
            const __m256 b = _mm256_set1_ps(B[s]), c = _mm256_set1_ps(C[s]);
            const __m256 h0 = _mm256_fmadd_ps(_mm256_loadu_ps(hs), vdA, _mm256_mul_ps(b, x0));
            const __m256 h1 = _mm256_fmadd_ps(_mm256_loadu_ps(hs + 8), vdA, _mm256_mul_ps(b, x1));
            const __m256 h2 = _mm256_fmadd_ps(_mm256_loadu_ps(hs + 16), vdA, _mm256_mul_ps(b, x2));
            const __m256 h3 = _mm256_fmadd_ps(_mm256_loadu_ps(hs + 24), vdA, _mm256_mul_ps(b, x3));
            _mm256_storeu_ps(hs, h0);
            _mm256_storeu_ps(hs + 8, h1);
            _mm256_storeu_ps(hs + 16, h2);
            _mm256_storeu_ps(hs + 24, h3);
            y0 = _mm256_fmadd_ps(h0, c, y0);
            y1 = _mm256_fmadd_ps(h1, c, y1);
            y2 = _mm256_fmadd_ps(h2, c, y2);
            y3 = _mm256_fmadd_ps(h3, c, y3);
        }
        _mm256_storeu_ps(y + i0, y0);
        _mm256_storeu_ps(y + i0 + 8, y1);
        _mm256_storeu_ps(y + i0 + 16, y2);
        _mm256_storeu_ps(y + i0 + 24, y3);
    }
    for (; i0 + 8 <= n; i0 += 8) {
        __m256 y0 = _mm256_loadu_ps(y + i0);
        const __m256 x0 = _mm256_loadu_ps(xdt + i0);
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i0;
            const __m256 h0 = _mm256_fmadd_ps(_mm256_loadu_ps(hs), vdA, _mm256_mul_ps(_mm256_set1_ps(B[s]), x0));
            _mm256_storeu_ps(hs, h0);
            y0 = _mm256_fmadd_ps(h0, _mm256_set1_ps(C[s]), y0);
        }
        _mm256_storeu_ps(y + i0, y0);
    }
    for (int i = i0; i < n; i++)
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i;
            *hs = fmaf(*hs, dA, B[s] * xdt[i]);
            y[i] = fmaf(*hs, C[s], y[i]);
        }
}

static void softmax_avx2(float *x, int n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float m = hmax8(vmax);
    for (; i < n; i++) m = fmaxf(m, x[i]);
    const double sum = exp_shift_sum_d_avx2(x, n, m);
    const float inv = (float)(1.0 / sum);
    const __m256 vi = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
    for (; i < n; i++) x[i] *= inv;
}

/* y = g * sigmoid(k g) * u: k = 1 gives SiLU; gelu_tanh(g) = g * sigmoid(2 c (g + 0.044715 g^3)) */
static void silu_mul_avx2(const float *g, const float *u, float *y, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), v))));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void gelu_mul_avx2(const float *g, const float *u, float *y, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 c2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f), k = _mm256_set1_ps(0.044715f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(g + i);
        const __m256 inner = _mm256_mul_ps(c2, _mm256_fmadd_ps(_mm256_mul_ps(k, v), _mm256_mul_ps(v, v), v));
        __m256 r = _mm256_div_ps(v, _mm256_add_ps(one, exp8(inner)));
        if (u) r = _mm256_mul_ps(r, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(y + i, r);
    }
    for (; i < n; i++) {
        const float x = g[i];
        const float v = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        y[i] = u ? v * u[i] : v;
    }
}

static void add_avx2(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static void axpy_avx2(float *y, float a, const float *x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static float dot_f32_avx2(const float *x, const float *y, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum_f32_8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static float dot_f16_avx2(const float *x, const oxl_half *y, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8))), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i))), a0);
    float s = hsum_f32_8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += x[i] * oxl_fp16_to_fp32(y[i]);
    return s;
}

static void axpy_f16_avx2(float *y, float a, const oxl_half *x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * oxl_fp16_to_fp32(x[i]);
}

static void fp32_to_fp16_avx2(const float *x, oxl_half *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = oxl_fp32_to_fp16(x[i]);
}

/* One score's dot over head_dim (a multiple of 8): one FMA chain over the 8-lane runs in order, then the
 * pairwise tree ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) that the multi-row kernels' hadd trees give
 * each of their lanes. Their rows left over end here, so every score is the same float wherever its row falls
 * in a call (kernels.h: a row's score depends on its query and K row only). */
static inline float score_f16_avx2(const float *q, const oxl_half *k, int hd) {
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), a);
    a = _mm256_hadd_ps(a, a);
    a = _mm256_hadd_ps(a, a);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
}

/* Scores of one query against n cached keys. head_dim a multiple of 8 keeps q in registers for
 * 64-wide chunks; 4 keys per pass share each q load and end in one 4-way horizontal sum. */
static void attn_scores_f16_avx2(const float *q, const oxl_half *K, int64_t stride, int n, int hd, float scale,
                                 float *scores) {
    if (hd % 8) {
        for (int t = 0; t < n; t++) scores[t] = scale * dot_f16_avx2(q, K + t * stride, hd);
        return;
    }
    int t = 0;
    for (; t + 4 <= n; t += 4) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        const oxl_half *k0 = K + t * stride, *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
        for (int i = 0; i < hd; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k0 + i))), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k1 + i))), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k2 + i))), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k3 + i))), a3);
        }
        /* (a0 a1 a2 a3) -> 4 sums */
        const __m256 s01 = _mm256_hadd_ps(a0, a1), s23 = _mm256_hadd_ps(a2, a3);
        const __m256 s = _mm256_hadd_ps(s01, s23);
        const __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        _mm_storeu_ps(scores + t, _mm_mul_ps(r, _mm_set1_ps(scale)));
    }
    for (; t < n; t++) scores[t] = scale * score_f16_avx2(q, K + t * stride, hd);
}

/* out = sum_t p[t] V[t]: 64 output dims at a time stay in 8 registers across all keys. */
static void attn_values_f16_avx2(const float *p, const oxl_half *V, int64_t stride, int n, int hd, float *out) {
    if (hd % 8) {
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int t = 0; t < n; t++) axpy_f16_avx2(out, p[t], V + t * stride, hd);
        return;
    }
    int i0 = 0;
    for (; i0 + 64 <= hd; i0 += 64) {
        __m256 acc[8];
        for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const __m256 pt = _mm256_set1_ps(p[t]);
            const oxl_half *v = V + t * stride + i0;
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_fmadd_ps(pt, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 8 * j))), acc[j]);
        }
        for (int j = 0; j < 8; j++) _mm256_storeu_ps(out + i0 + 8 * j, acc[j]);
    }
    for (; i0 < hd; i0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int t = 0; t < n; t++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[t]),
                                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(V + t * stride + i0))), acc);
        _mm256_storeu_ps(out + i0, acc);
    }
}

/* GQA groups: up to GROUP_MAX heads of a group in one pass over the rows, so each f16 row is converted
 * once for all of them (the conversion, not the FMA, bounded the one-head kernels). */
#define GROUP_MAX 4

static inline __m256 load_h8(const oxl_half *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* G (<= GROUP_MAX) heads x 2 rows per pass: 8 accumulators, reduced together by one hadd tree */
OXL_INLINE void scores_group_avx2(const float *q, const int G, const oxl_half *K, int64_t stride, int n, int hd,
                                  float scale, float *scores) {
    int t = 0;
    for (; t + 2 <= n; t += 2) {
        __m256 a[2][GROUP_MAX];
        for (int h = 0; h < GROUP_MAX; h++) a[0][h] = a[1][h] = _mm256_setzero_ps();
        const oxl_half *k0 = K + t * stride, *k1 = k0 + stride;
        for (int i = 0; i < hd; i += 8) {
            const __m256 x0 = load_h8(k0 + i), x1 = load_h8(k1 + i);
            for (int h = 0; h < G; h++) {
                const __m256 qv = _mm256_loadu_ps(q + h * hd + i);
                a[0][h] = _mm256_fmadd_ps(qv, x0, a[0][h]);
                a[1][h] = _mm256_fmadd_ps(qv, x1, a[1][h]);
            }
        }
        /* 8 accumulators -> [row0 h0..h3 | row1 h0..h3] */
        const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0][0], a[0][1]), _mm256_hadd_ps(a[0][2], a[0][3]));
        const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[1][0], a[1][1]), _mm256_hadd_ps(a[1][2], a[1][3]));
        const __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(r, _mm256_set1_ps(scale)));
        for (int h = 0; h < G; h++) {
            scores[h * n + t] = out[h];
            scores[h * n + t + 1] = out[4 + h];
        }
    }
    for (; t < n; t++)
        for (int h = 0; h < G; h++) scores[h * n + t] = scale * score_f16_avx2(q + h * hd, K + t * stride, hd);
}

/* G (2 or 3) heads x 4 rows per pass: up to 12 accumulators, each head's 4 row sums reduced by one hadd
 * tree and stored as 4 floats; 3 heads x 4 rows keeps the FMA units busy without the zero lanes of the
 * 2-row kernel */
OXL_INLINE void scores_rows4_avx2(const float *q, const int G, const oxl_half *K, int64_t stride, int n, int hd,
                                  float scale, float *scores) {
    const __m256 sc = _mm256_set1_ps(scale);
    int t = 0;
    for (; t + 4 <= n; t += 4) {
        __m256 a[3][4];
        for (int h = 0; h < 3; h++)
            for (int r = 0; r < 4; r++) a[h][r] = _mm256_setzero_ps();
        const oxl_half *k = K + t * stride;
        for (int i = 0; i < hd; i += 8) {
            for (int r = 0; r < 4; r++) {
                const __m256 x = load_h8(k + r * stride + i);
                for (int h = 0; h < G; h++) a[h][r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + i), x, a[h][r]);
            }
        }
        /* head h: [r0 r1 r2 r3 (low 4 dims) | r0 r1 r2 r3 (high 4)]; two heads share one 256-bit add */
        __m256 u[3];
        for (int h = 0; h < G; h++)
            u[h] = _mm256_hadd_ps(_mm256_hadd_ps(a[h][0], a[h][1]), _mm256_hadd_ps(a[h][2], a[h][3]));
        const __m256 r01 = _mm256_mul_ps(sc, _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                                                           _mm256_permute2f128_ps(u[0], u[1], 0x31)));
        _mm_storeu_ps(scores + t, _mm256_castps256_ps128(r01));
        _mm_storeu_ps(scores + n + t, _mm256_extractf128_ps(r01, 1));
        if (G == 3)
            _mm_storeu_ps(scores + 2 * n + t, _mm_mul_ps(_mm256_castps256_ps128(sc),
                                                         _mm_add_ps(_mm256_castps256_ps128(u[2]),
                                                                    _mm256_extractf128_ps(u[2], 1))));
    }
    for (; t < n; t++)
        for (int h = 0; h < G; h++) scores[h * n + t] = scale * score_f16_avx2(q + h * hd, K + t * stride, hd);
}

static void attn_scores_f16_group_avx2(const float *q, int G, const oxl_half *K, int64_t stride, int n, int hd,
                                       float scale, float *scores) {
    for (int h0 = 0; h0 < G; h0 += GROUP_MAX) {
        const int g = OXL_MIN(GROUP_MAX, G - h0);
        const float *qg = q + (int64_t)h0 * hd;
        float *sg = scores + (int64_t)h0 * n;
        if (hd % 8) {
            for (int h = 0; h < g; h++) attn_scores_f16_avx2(qg + h * hd, K, stride, n, hd, scale, sg + h * n);
            continue;
        }
        switch (g) {   /* a constant G per case: the loops over heads unroll */
        case 1: attn_scores_f16_avx2(qg, K, stride, n, hd, scale, sg); break;
        case 2: scores_rows4_avx2(qg, 2, K, stride, n, hd, scale, sg); break;
        case 3: scores_rows4_avx2(qg, 3, K, stride, n, hd, scale, sg); break;
        default: scores_group_avx2(qg, 4, K, stride, n, hd, scale, sg); break;
        }
    }
}

/* out (G x hd), G <= 3: 32 dims of every head (4 registers each) per pass over the rows, so each row's
 * 4 conversions feed 12 independent FMA chains (16 dims left the chains, not the FMA units, the limit) */
OXL_INLINE void values_wide_avx2(const float *p, const int G, const oxl_half *V, int64_t stride, int n, int hd,
                                 float *out) {
    for (int i0 = 0; i0 < hd; i0 += 32) {
        __m256 a[3][4];
        for (int h = 0; h < 3; h++)
            for (int j = 0; j < 4; j++) a[h][j] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const oxl_half *v = V + t * stride + i0;
            __m256 pt[3];
            for (int h = 0; h < G; h++) pt[h] = _mm256_broadcast_ss(p + h * n + t);
            for (int j = 0; j < 4; j++) {
                const __m256 x = load_h8(v + 8 * j);
                for (int h = 0; h < G; h++) a[h][j] = _mm256_fmadd_ps(pt[h], x, a[h][j]);
            }
        }
        for (int h = 0; h < G; h++)
            for (int j = 0; j < 4; j++) _mm256_storeu_ps(out + h * hd + i0 + 8 * j, a[h][j]);
    }
}

/* out (G x hd): 16 dims of every head (2 registers each) per pass over the rows */
OXL_INLINE void values_group_avx2(const float *p, const int G, const oxl_half *V, int64_t stride, int n, int hd,
                                  float *out) {
    int i0 = 0;
    for (; i0 + 16 <= hd; i0 += 16) {
        __m256 a[GROUP_MAX][2];
        for (int h = 0; h < GROUP_MAX; h++) a[h][0] = a[h][1] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const oxl_half *v = V + t * stride + i0;
            const __m256 x0 = load_h8(v), x1 = load_h8(v + 8);
            for (int h = 0; h < G; h++) {
                const __m256 pt = _mm256_broadcast_ss(p + h * n + t);
                a[h][0] = _mm256_fmadd_ps(pt, x0, a[h][0]);
                a[h][1] = _mm256_fmadd_ps(pt, x1, a[h][1]);
            }
        }
        for (int h = 0; h < G; h++) {
            _mm256_storeu_ps(out + h * hd + i0, a[h][0]);
            _mm256_storeu_ps(out + h * hd + i0 + 8, a[h][1]);
        }
    }
    for (; i0 < hd; i0 += 8) {   /* hd % 16 == 8 */
        __m256 a[GROUP_MAX];
        for (int h = 0; h < GROUP_MAX; h++) a[h] = _mm256_setzero_ps();
        for (int t = 0; t < n; t++) {
            const __m256 x0 = load_h8(V + t * stride + i0);
            for (int h = 0; h < G; h++) a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + h * n + t), x0, a[h]);
        }
        for (int h = 0; h < G; h++) _mm256_storeu_ps(out + h * hd + i0, a[h]);
    }
}

static void attn_values_f16_group_avx2(const float *p, int G, const oxl_half *V, int64_t stride, int n, int hd,
                                       float *out) {
    for (int h0 = 0; h0 < G; h0 += GROUP_MAX) {
        const int g = OXL_MIN(GROUP_MAX, G - h0);
        const float *pg = p + (int64_t)h0 * n;
        float *og = out + (int64_t)h0 * hd;
        if (hd % 8) {
            for (int h = 0; h < g; h++) attn_values_f16_avx2(pg + h * n, V, stride, n, hd, og + h * hd);
            continue;
        }
        if (g > 1 && g < 4 && hd % 32 == 0) {
            if (g == 2) values_wide_avx2(pg, 2, V, stride, n, hd, og);
            else values_wide_avx2(pg, 3, V, stride, n, hd, og);
            continue;
        }
        switch (g) {
        case 1: attn_values_f16_avx2(pg, V, stride, n, hd, og); break;
        case 2: values_group_avx2(pg, 2, V, stride, n, hd, og); break;
        case 3: values_group_avx2(pg, 3, V, stride, n, hd, og); break;
        default: values_group_avx2(pg, 4, V, stride, n, hd, og); break;
        }
    }
}

/* 8 int8 -> 8 floats */
static inline __m256 load_i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 8 int8 of a Q8_0 row times its block's scale d: the row's values as floats */
static inline __m256 load_q8x8(const int8_t *p, __m256 d) { return _mm256_mul_ps(d, load_i8x8(p)); }

/* a[h][r] = the 8 partial sums of q_h . K[t + r] (h < G, r < R), blocks and their 8-value runs in order */
OXL_INLINE void q8_0_row_dots(const float *q, const int G, const int R, const void *K, int64_t row_bytes, int t,
                              int hd, __m256 a[4][4]) {
    for (int h = 0; h < G; h++)
        for (int r = 0; r < R; r++) a[h][r] = _mm256_setzero_ps();
    for (int i = 0; i < hd / QK8_0; i++) {
        for (int r = 0; r < R; r++) {
            const block_q8_0 *b = (const block_q8_0 *)((const char *)K + (t + r) * row_bytes) + i;
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
            for (int j = 0; j < 4; j++) {
                const __m256 x = load_q8x8(b->qs + 8 * j, d);
                for (int h = 0; h < G; h++)
                    a[h][r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (int64_t)h * hd + i * QK8_0 + 8 * j), x, a[h][r]);
            }
        }
    }
}

/* Q8_0 cache, G heads x R rows per pass (G <= 3 with R = 4, or G = 4 with R = 2: at most 12
 * accumulators): each row's values are converted (and scaled) once for the G heads, and the row sums are
 * reduced 4 at a time (hsum_f32_8x4: the same adds as one row's hsum_f32_8, so every score is the float
 * the rows left over, done one at a time, get; reducing rows one by one cost as much as their products
 * at head_dim 64). */
OXL_INLINE void scores_q8_0_rows(const float *q, const int G, const int R, const void *K, int64_t row_bytes, int n,
                                 int hd, float scale, float *scores) {
    const __m128 sc = _mm_set1_ps(scale);
    __m256 a[4][4];
    int t = 0;
    for (; t + R <= n; t += R) {
        q8_0_row_dots(q, G, R, K, row_bytes, t, hd, a);
        if (R == 4) {   /* each head's 4 rows */
            for (int h = 0; h < G; h++)
                _mm_storeu_ps(scores + (int64_t)h * n + t,
                              _mm_mul_ps(sc, hsum_f32_8x4(a[h][0], a[h][1], a[h][2], a[h][3])));
        } else {        /* G == 4: each row's 4 heads */
            for (int r = 0; r < R; r++) {
                float o[4];
                _mm_storeu_ps(o, _mm_mul_ps(sc, hsum_f32_8x4(a[0][r], a[1][r], a[2][r], a[3][r])));
                for (int h = 0; h < 4; h++) scores[(int64_t)h * n + t + r] = o[h];
            }
        }
    }
    for (; t < n; t++) {
        q8_0_row_dots(q, G, 1, K, row_bytes, t, hd, a);
        for (int h = 0; h < G; h++) scores[(int64_t)h * n + t] = scale * hsum_f32_8(a[h][0]);
    }
}

/* heads in a pass of a GQA group: 4 while 4 or more are left, else what is left */
static inline int q8_pass_heads(int left) { return left >= 4 ? 4 : left; }

static void attn_scores_q8_0_group_avx2(const float *q, int G, const void *K, int64_t row_bytes, int n, int hd,
                                        float scale, float *scores) {
    for (int h0 = 0, g; h0 < G; h0 += g) {
        g = q8_pass_heads(G - h0);
        const float *qg = q + (int64_t)h0 * hd;
        float *sg = scores + (int64_t)h0 * n;
        switch (g) {   /* constant G and R per case: the loops unroll */
        case 1: scores_q8_0_rows(qg, 1, 4, K, row_bytes, n, hd, scale, sg); break;
        case 2: scores_q8_0_rows(qg, 2, 4, K, row_bytes, n, hd, scale, sg); break;
        case 3: scores_q8_0_rows(qg, 3, 4, K, row_bytes, n, hd, scale, sg); break;
        default: scores_q8_0_rows(qg, 4, 2, K, row_bytes, n, hd, scale, sg); break;
        }
    }
}

/* Rows per pass of the Q8_0 values kernel: the weights times each row's block scale are formed for this
 * many rows at a time (on the stack) */
#define Q8_VALUES_ROWS 64

/* out (G x hd): 8 * NV values of every head (NV registers each; G <= 3 with NV = 4, G = 4 with NV = 2) per
 * pass over the rows. The products p[h][t] * d[t] (the weight times the row's block scale, the same
 * float multiply as before) are formed once per pass for all rows, so the inner loop is a broadcast and NV
 * FMAs per head, as for f16; each output sums its rows in order, as before */
OXL_INLINE void values_q8_0_pass(const float *p, const int G, const int NV, const void *V, int64_t row_bytes, int n,
                                 int hd, float *out) {
    float pd[4][Q8_VALUES_ROWS];
    for (int i0 = 0; i0 < hd; i0 += 8 * NV) {
        __m256 a[4][4];
        for (int h = 0; h < G; h++)
            for (int j = 0; j < NV; j++) a[h][j] = _mm256_setzero_ps();
        for (int t0 = 0; t0 < n; t0 += Q8_VALUES_ROWS) {
            const int m = OXL_MIN(Q8_VALUES_ROWS, n - t0);
            for (int t = 0; t < m; t++) {
                const block_q8_0 *b = (const block_q8_0 *)((const char *)V + (t0 + t) * row_bytes) + i0 / QK8_0;
                const float d = _cvtsh_ss(b->d);
                for (int h = 0; h < G; h++) pd[h][t] = p[(int64_t)h * n + t0 + t] * d;
            }
            for (int t = 0; t < m; t++) {
                const block_q8_0 *b = (const block_q8_0 *)((const char *)V + (t0 + t) * row_bytes) + i0 / QK8_0;
                __m256 x[4];
                for (int j = 0; j < NV; j++) x[j] = load_i8x8(b->qs + i0 % QK8_0 + 8 * j);
                for (int h = 0; h < G; h++) {
                    const __m256 c = _mm256_broadcast_ss(&pd[h][t]);
                    for (int j = 0; j < NV; j++) a[h][j] = _mm256_fmadd_ps(c, x[j], a[h][j]);
                }
            }
        }
        for (int h = 0; h < G; h++)
            for (int j = 0; j < NV; j++) _mm256_storeu_ps(out + (int64_t)h * hd + i0 + 8 * j, a[h][j]);
    }
}

static void attn_values_q8_0_group_avx2(const float *p, int G, const void *V, int64_t row_bytes, int n, int hd,
                                        float *out) {
    for (int h0 = 0, g; h0 < G; h0 += g) {
        g = q8_pass_heads(G - h0);
        const float *pg = p + (int64_t)h0 * n;
        float *og = out + (int64_t)h0 * hd;
        switch (g) {
        case 1: values_q8_0_pass(pg, 1, 4, V, row_bytes, n, hd, og); break;
        case 2: values_q8_0_pass(pg, 2, 4, V, row_bytes, n, hd, og); break;
        case 3: values_q8_0_pass(pg, 3, 4, V, row_bytes, n, hd, og); break;
        default: values_q8_0_pass(pg, 4, 2, V, row_bytes, n, hd, og); break;
        }
    }
}

void oxl_register_avx2_ops(oxl_kernel_table *t) {
    t->ops.rms_norm = rms_norm_avx2;
    t->ops.softmax = softmax_avx2;
    t->ops.silu_mul = silu_mul_avx2;
    t->ops.gelu_mul = gelu_mul_avx2;
    t->ops.add = add_avx2;
    t->ops.axpy = axpy_avx2;
    t->ops.dot_f32 = dot_f32_avx2;
    t->ops.dot_f16 = dot_f16_avx2;
    t->ops.axpy_f16 = axpy_f16_avx2;
    t->ops.fp32_to_fp16 = fp32_to_fp16_avx2;
    t->ops.attn_scores_f16 = attn_scores_f16_avx2;
    t->ops.attn_values_f16 = attn_values_f16_avx2;
    t->ops.exp_shift_sum = exp_shift_sum_avx2;
    t->ops.ssm_scan_states = ssm_scan_states_avx2;
    t->ops.causal_conv = causal_conv_avx2;
    t->ops.attn_scores_f16_group = attn_scores_f16_group_avx2;
    t->ops.attn_values_f16_group = attn_values_f16_group_avx2;
    t->ops.attn_scores_q8_0_group = attn_scores_q8_0_group_avx2;
    t->ops.attn_values_q8_0_group = attn_values_q8_0_group_avx2;
}
