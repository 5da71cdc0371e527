/* AVX-512 row ops: the recurrent layers' scan over the states and causal conv, and attention over an f16 cache
 * (kernels.h: the order each sums in). 16 lanes a register, masked last passes instead of a scalar tail. The
 * scan, the conv and the attention values do on every lane the same fused operations as the AVX2 tier's lanes,
 * so the two tiers give the same floats; an attention score is a 16-lane dot, so this tier's scores differ
 * from the AVX2 tier's by roundings (one order here, whatever the call). */
#include <immintrin.h>
#include <string.h>

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

/* The scan with y held in registers: 64 dims a pass (four registers, so four independent fma chains over s; a
 * streamed state prefetched OXL_SSM_PREFETCH_BYTES ahead), then 16 at a time, the last pass masked. */
static void ssm_scan_states_avx512(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                                   int d_state, int n, int stream) {
    const __m512 vdA = _mm512_set1_ps(dA);
    const uintptr_t ahead = (uintptr_t)(OXL_SSM_PREFETCH_BYTES / 4 / n * n) * 4;   /* bytes, whole rows */
    int i0 = 0;
    for (; i0 + 64 <= n; i0 += 64) {
        __m512 y0 = _mm512_loadu_ps(y + i0), y1 = _mm512_loadu_ps(y + i0 + 16);
        __m512 y2 = _mm512_loadu_ps(y + i0 + 32), y3 = _mm512_loadu_ps(y + i0 + 48);
        const __m512 x0 = _mm512_loadu_ps(xdt + i0), x1 = _mm512_loadu_ps(xdt + i0 + 16);
        const __m512 x2 = _mm512_loadu_ps(xdt + i0 + 32), x3 = _mm512_loadu_ps(xdt + i0 + 48);
        for (int s = 0; s < d_state; s++) {
            float *hs = h + (int64_t)s * n + i0;
            if (stream) {
                const char *pf = (const char *)((uintptr_t)hs + ahead);   /* may lie past h: only a hint */
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
                _mm_prefetch(pf + 128, _MM_HINT_T0);
                _mm_prefetch(pf + 192, _MM_HINT_T0);
            }
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
 * contiguous floats transposed in registers, for other widths one gather per tap, for a masked last pass a copy
 * through memory (which, on every pass, cost ~3x the whole decode conv: each tap's 16 stores stalled the vector
 * load that read them back). Intrinsics SIMDe models (tests/native), so the tier harness builds this file. */
static inline void conv_taps16(const float *w, int L, __mmask16 m, __m512 *wt) {
    if (m == 0xffff && L == 4) {
        const __m512 a0 = _mm512_loadu_ps(w), a1 = _mm512_loadu_ps(w + 16);
        const __m512 a2 = _mm512_loadu_ps(w + 32), a3 = _mm512_loadu_ps(w + 48);
        const __m512i every4 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        for (int j = 0; j < 4; j++) {   /* channels 0-7 from a0|a1, 8-15 from a2|a3 */
            const __m512i ij = _mm512_add_epi32(every4, _mm512_set1_epi32(j));
            wt[j] = _mm512_permutex2var_ps(_mm512_permutex2var_ps(a0, ij, a1), halves, _mm512_permutex2var_ps(a2, ij, a3));
        }
    } else if (m == 0xffff) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(L));
        for (int j = 0; j < L; j++) wt[j] = _mm512_castsi512_ps(_mm512_i32gather_epi32(idx, w + j, 4));
    } else {
        float tap[16];
        for (int j = 0; j < L; j++) {
            for (int l = 0; l < 16; l++) tap[l] = (m >> l) & 1 ? w[(int64_t)l * L + j] : 0.0f;
            wt[j] = _mm512_loadu_ps(tap);
        }
    }
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

/* ---- attention over an f16 cache ----
 * A score is one FMA chain over head_dim in runs of 16 lanes (the last run masked), then the halving tree
 * x[i] + x[i + 8], then + [i + 4], + [i + 2], + [i + 1]: hsum16 for one score, reduce16 for 16 at once with the
 * same adds on every lane. So a score is the same float whichever kernel, pass or place in a call computes it
 * (kernels.h: it depends on its query and K row only), and a query's scores do not depend on the call shape. */

static inline __m512 load_h16(const oxl_half *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
/* the first popcount(m) halves at p, zeros after (a head_dim not a multiple of 16: through a copy, read no
 * further than the row) */
static inline __m512 load_h16_masked(const oxl_half *p, __mmask16 m) {
    oxl_half h[16] = {0};
    memcpy(h, p, (size_t)__builtin_popcount(m) * sizeof(oxl_half));
    return load_h16(h);
}

static inline float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* the 16 sums of v[0..15], each by hsum16's tree: lane 4 q + j holds the sum of v[q + 4 j] */
static inline __m512 reduce16(const __m512 *v) {
    __m512 a[8], b[4], c[2];
    for (int k = 0; k < 8; k++)   /* [v2k's x[i] + x[i+8] | v2k+1's] */
        a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; k++)   /* quads: v4k, v4k+1, v4k+2, v4k+3 each + [i + 4] */
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xDD));
    for (int k = 0; k < 2; k++)   /* 128-bit lane q: [v8k+q's two + [i + 2] | v8k+4+q's] */
        c[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[2 * k]), _mm512_castps_pd(b[2 * k + 1]))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[2 * k]), _mm512_castps_pd(b[2 * k + 1]))));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
}

static inline __mmask16 tail_lanes(int hd) { return lanes(hd % 16); }

/* one score alone (rows left over) */
static inline float score16(const float *q, const oxl_half *k, int hd) {
    __m512 a = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load_h16(k + i), a);
    if (i < hd) {
        const __mmask16 m = tail_lanes(hd);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load_h16_masked(k + i, m), a);
    }
    return hsum16(a);
}

/* GH heads (q: GH rows of hd) x R rows per pass, GH R <= 16 accumulators (head h, row r at r GH + h) reduced
 * together; GH = R = 4 stores each head's 4 scores at once */
OXL_INLINE void scores_pass_avx512(const float *q, const int GH, const int R, const oxl_half *K, int64_t stride,
                                   int n, int hd, float scale, float *scores) {
    const __m512 sc = _mm512_set1_ps(scale);
    const __mmask16 m = tail_lanes(hd);
    int t = 0;
    for (; t + R <= n; t += R) {
        __m512 a[16];
        for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
        const oxl_half *k = K + t * stride;
        int i = 0;
        for (; i + 16 <= hd; i += 16) {
            __m512 qv[4];
            for (int h = 0; h < GH; h++) qv[h] = _mm512_loadu_ps(q + h * hd + i);
            for (int r = 0; r < R; r++) {
                const __m512 x = load_h16(k + r * stride + i);
                for (int h = 0; h < GH; h++) a[r * GH + h] = _mm512_fmadd_ps(qv[h], x, a[r * GH + h]);
            }
        }
        if (i < hd) {
            __m512 qv[4];
            for (int h = 0; h < GH; h++) qv[h] = _mm512_maskz_loadu_ps(m, q + h * hd + i);
            for (int r = 0; r < R; r++) {
                const __m512 x = load_h16_masked(k + r * stride + i, m);
                for (int h = 0; h < GH; h++) a[r * GH + h] = _mm512_fmadd_ps(qv[h], x, a[r * GH + h]);
            }
        }
        const __m512 s = _mm512_mul_ps(reduce16(a), sc);
        if (GH == 4 && R == 4) {   /* accumulator 4 r + h -> lane 4 h + r */
            _mm_storeu_ps(scores + t, _mm512_castps512_ps128(s));
            _mm_storeu_ps(scores + n + t, _mm512_extractf32x4_ps(s, 1));
            _mm_storeu_ps(scores + 2 * n + t, _mm512_extractf32x4_ps(s, 2));
            _mm_storeu_ps(scores + 3 * n + t, _mm512_extractf32x4_ps(s, 3));
        } else {
            float o[16];
            _mm512_storeu_ps(o, s);
            for (int r = 0; r < R; r++)
                for (int h = 0; h < GH; h++) {
                    const int j = r * GH + h;
                    scores[h * n + t + r] = o[4 * (j % 4) + j / 4];
                }
        }
    }
    for (; t < n; t++)
        for (int h = 0; h < GH; h++) scores[h * n + t] = scale * score16(q + h * hd, K + t * stride, hd);
}

/* heads in passes of 4; fewer heads take more rows a pass */
static void attn_scores_f16_group_avx512(const float *q, int G, const oxl_half *K, int64_t stride, int n, int hd,
                                         float scale, float *scores) {
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *qg = q + (int64_t)h0 * hd;
        float *sg = scores + (int64_t)h0 * n;
        switch (G - h0 < 4 ? G - h0 : 4) {   /* constant GH and R per case: the loops unroll */
        case 1: scores_pass_avx512(qg, 1, 16, K, stride, n, hd, scale, sg); break;
        case 2: scores_pass_avx512(qg, 2, 8, K, stride, n, hd, scale, sg); break;
        case 3: scores_pass_avx512(qg, 3, 5, K, stride, n, hd, scale, sg); break;
        default: scores_pass_avx512(qg, 4, 4, K, stride, n, hd, scale, sg); break;
        }
    }
}

static void attn_scores_f16_avx512(const float *q, const oxl_half *K, int64_t stride, int n, int hd, float scale,
                                   float *scores) {
    attn_scores_f16_group_avx512(q, 1, K, stride, n, hd, scale, scores);
}

/* out (GH heads, NV runs of 16 values from d0): NV * GH accumulators over all rows, each lane the AVX2 tier's
 * chain acc = fma(p[h][t], V[t][d], acc) from zero in row order; m masks the last run */
OXL_INLINE void values_pass_avx512(const float *p, const int GH, const int NV, const oxl_half *V, int64_t stride,
                                   int n, int hd, int d0, __mmask16 m, float *out) {
    __m512 a[4][4];
    for (int h = 0; h < GH; h++)
        for (int j = 0; j < NV; j++) a[h][j] = _mm512_setzero_ps();
    for (int t = 0; t < n; t++) {
        const oxl_half *v = V + t * stride + d0;
        __m512 x[4];
        for (int j = 0; j < NV; j++) x[j] = m == 0xffff ? load_h16(v + 16 * j) : load_h16_masked(v + 16 * j, m);
        for (int h = 0; h < GH; h++) {
            const __m512 pt = _mm512_set1_ps(p[h * n + t]);
            for (int j = 0; j < NV; j++) a[h][j] = _mm512_fmadd_ps(pt, x[j], a[h][j]);
        }
    }
    for (int h = 0; h < GH; h++)
        for (int j = 0; j < NV; j++) _mm512_mask_storeu_ps(out + h * hd + d0 + 16 * j, m, a[h][j]);
}

/* heads in passes of 4, 64 values of each a pass over the rows (16 accumulators), then 16 at a time */
static void attn_values_f16_group_avx512(const float *p, int G, const oxl_half *V, int64_t stride, int n, int hd,
                                         float *out) {
    for (int h0 = 0; h0 < G; h0 += 4) {
        const int g = G - h0 < 4 ? G - h0 : 4;
        const float *pg = p + (int64_t)h0 * n;
        float *og = out + (int64_t)h0 * hd;
        int d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64) switch (g) {
            case 1: values_pass_avx512(pg, 1, 4, V, stride, n, hd, d0, 0xffff, og); break;
            case 2: values_pass_avx512(pg, 2, 4, V, stride, n, hd, d0, 0xffff, og); break;
            case 3: values_pass_avx512(pg, 3, 4, V, stride, n, hd, d0, 0xffff, og); break;
            default: values_pass_avx512(pg, 4, 4, V, stride, n, hd, d0, 0xffff, og); break;
            }
        for (; d0 < hd; d0 += 16)
            values_pass_avx512(pg, g, 1, V, stride, n, hd, d0, hd - d0 >= 16 ? 0xffff : tail_lanes(hd), og);
    }
}

static void attn_values_f16_avx512(const float *p, const oxl_half *V, int64_t stride, int n, int hd, float *out) {
    attn_values_f16_group_avx512(p, 1, V, stride, n, hd, out);
}

void oxl_register_avx512_ops(oxl_kernel_table *t) {
    t->ops.ssm_scan_states = ssm_scan_states_avx512;
    t->ops.causal_conv = causal_conv_avx512;
    t->ops.attn_scores_f16 = attn_scores_f16_avx512;
    t->ops.attn_values_f16 = attn_values_f16_avx512;
    t->ops.attn_scores_f16_group = attn_scores_f16_group_avx512;
    t->ops.attn_values_f16_group = attn_values_f16_group_avx512;
}
