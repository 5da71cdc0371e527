/* Whole-vocabulary passes for sampling; see sampling.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oxl.h"
#include "sampling/sampling.h"

/* gcc builds an x86-64-v3 (AVX2+FMA) clone of the two hot loops beside the baseline one and
 * picks one at load time (an ifunc resolver, which checks CPUID and OS support). This module is
 * built with baseline flags only, like the rest of csrc/ outside the tier folders. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define OXL_SAMP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define OXL_SAMP_CLONES
#endif
/* the selects below only guard values, never traps; saying so lets gcc if-convert and vectorize */
#if defined(__GNUC__) && !defined(__clang__)
#define OXL_SAMP_NOTRAP __attribute__((optimize("no-trapping-math")))
#else
#define OXL_SAMP_NOTRAP
#endif

/* exp(x) for x <= 0 as straight-line float code the compiler vectorizes: x = n*ln2 + r with
 * |r| <= ln2/2, exp(r) from a degree-6 polynomial (Cephes expf coefficients), 2^n built in the
 * exponent bits. Relative error about 2 ulp. x must be >= -87 (clamped by the caller);
 * the result is multiplied by below (0 or 1) so the caller can zero what it clamped. */
OXL_SAMP_NOTRAP OXL_INLINE float oxl_samp_expf(float x, float below) {
    /* round-to-nearest through the 1.5 * 2^23 magic constant */
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale * below;
}

/* Reductions run on 8 independent lanes held in a GCC/clang vector type: the compiler may not
 * reorder a float sum by itself (that would need -ffast-math for the whole file), and written as
 * lanes it maps them to SSE or AVX registers. Loads go through memcpy (no alignment assumed). */
typedef float oxl_v8f __attribute__((vector_size(32)));
typedef int32_t oxl_v8i __attribute__((vector_size(32)));

/* the helpers below are always inlined, so the vector-return ABI gcc warns about never applies */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wpsabi"

/* mask ? a : b per lane; mask lanes are all ones or all zeros, as comparisons produce them */
OXL_INLINE oxl_v8f oxl_v8f_select(oxl_v8i mask, oxl_v8f a, oxl_v8f b) {
    return (oxl_v8f)((mask & (oxl_v8i)a) | (~mask & (oxl_v8i)b));
}

OXL_INLINE oxl_v8f oxl_v8f_load(const float *p) {
    oxl_v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

OXL_SAMP_CLONES OXL_SAMP_NOTRAP
float oxl_samp_max(const float *x, int64_t n) {
    int64_t i = 0;
    float m = x[0];
    if (n >= 8) {
        oxl_v8f lane = oxl_v8f_load(x);
        for (i = 8; i + 8 <= n; i += 8) {
            const oxl_v8f v = oxl_v8f_load(x + i);
            lane = oxl_v8f_select(v > lane, v, lane);
        }
        for (int j = 0; j < 8; j++) {
            m = lane[j] > m ? lane[j] : m;
        }
    }
    for (; i < n; i++) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

OXL_SAMP_CLONES OXL_SAMP_NOTRAP
int oxl_samp_copy_check(const float *OXL_RESTRICT src, float *OXL_RESTRICT dst, int64_t n, float *max_out) {
    /* a lane is NaN iff it compares unequal to itself; the OR of those masks flags any NaN */
    oxl_v8i nan_seen = {0};
    oxl_v8f lane = (oxl_v8f){0} - INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const oxl_v8f v = oxl_v8f_load(src + i);
        memcpy(dst + i, &v, sizeof(v));
        nan_seen |= (v != v);
        lane = oxl_v8f_select(v > lane, v, lane);
    }
    float m = -INFINITY;
    int flags = 0;
    for (int j = 0; j < 8; j++) {
        m = lane[j] > m ? lane[j] : m;
        flags |= nan_seen[j] != 0;
    }
    for (; i < n; i++) {
        dst[i] = src[i];
        flags |= src[i] != src[i];
        m = src[i] > m ? src[i] : m;
    }
    if (m == INFINITY) {
        flags |= OXL_SAMP_HAS_POSINF;
    }
    *max_out = m;
    return flags;
}

OXL_SAMP_CLONES OXL_SAMP_NOTRAP
int oxl_samp_check(const float *x, int64_t n, float *max_out, int64_t *argmax_out) {
    /* oxl_samp_copy_check's lanes without the copy; each lane also keeps where its max first occurred */
    oxl_v8i nan_seen = {0}, at = {0, 1, 2, 3, 4, 5, 6, 7}, lane_at = at;
    oxl_v8f lane = (oxl_v8f){0} - INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const oxl_v8f v = oxl_v8f_load(x + i);
        nan_seen |= (v != v);
        const oxl_v8i up = v > lane;
        lane = oxl_v8f_select(up, v, lane);
        lane_at = (up & at) | (~up & lane_at);
        at += 8;
    }
    float m = -INFINITY;
    int64_t arg = 0;
    int flags = 0;
    for (int j = 0; j < 8; j++) {
        if (lane[j] > m || (lane[j] == m && lane_at[j] < arg)) {
            m = lane[j];
            arg = lane_at[j];
        }
        flags |= nan_seen[j] != 0;
    }
    for (; i < n; i++) {
        flags |= x[i] != x[i];
        if (x[i] > m) {
            m = x[i];
            arg = i;
        }
    }
    if (m == INFINITY) {
        flags |= OXL_SAMP_HAS_POSINF;
    }
    *max_out = m;
    *argmax_out = arg;
    return flags;
}

OXL_SAMP_CLONES OXL_SAMP_NOTRAP
void oxl_samp_exp_sum(const float *OXL_RESTRICT x, int64_t n, float shift, float scale,
                      float *OXL_RESTRICT w, double *sum_w, double *sum_wx) {
    /* pass 1, elementwise: w = exp(z), z = (x - shift) * scale clamped at -87 (where w is set
     * to exactly 0, so masked -inf logits get probability 0 and no 0 * -inf NaN appears) */
    for (int64_t i = 0; i < n; i++) {
        const float z = (x[i] - shift) * scale;
        const float below = z < -87.0f ? 0.0f : 1.0f;
        const float zc = z < -87.0f ? -87.0f : z;
        w[i] = oxl_samp_expf(zc, below);
    }
    /* pass 2 over the now cache-resident w: float lanes per block of 1024 (each lane adds 128
     * terms in [0, 1]: relative error < 1e-5), blocks summed in double */
    double s_w = 0.0, s_wx = 0.0;
    const oxl_v8f v_shift = (oxl_v8f){0} + shift, v_scale = (oxl_v8f){0} + scale;
    const oxl_v8f v_floor = (oxl_v8f){0} - 87.0f;
    int64_t i = 0;
    for (; i + 8 <= n; ) {
        const int64_t i1 = OXL_MIN(n, i + 1024);
        oxl_v8f l_w = {0}, l_wx = {0};
        for (; i + 8 <= i1; i += 8) {
            const oxl_v8f z = (oxl_v8f_load(x + i) - v_shift) * v_scale;
            const oxl_v8f zc = oxl_v8f_select(z < v_floor, v_floor, z);
            const oxl_v8f e = oxl_v8f_load(w + i);
            l_w += e;
            l_wx += e * zc;
        }
        for (int j = 0; j < 8; j++) {
            s_w += l_w[j];
            s_wx += l_wx[j];
        }
    }
    for (; i < n; i++) {
        const float z = (x[i] - shift) * scale;
        const float zc = z < -87.0f ? -87.0f : z;
        s_w += w[i];
        s_wx += w[i] * zc;
    }
    *sum_w = s_w;
    *sum_wx = s_wx;
}

int64_t oxl_samp_pick(const float *w, int64_t n, double target) {
    double run = 0.0;
    int64_t last_pos = n - 1;
    int found_pos = 0;
    for (int64_t i = 0; i < n; i++) {
        if (w[i] > 0.0f) {
            run += w[i];
            last_pos = i;
            found_pos = 1;
            if (run > target) {
                return i;
            }
        }
    }
    return found_pos ? last_pos : n - 1;
}

/* Min-heap on (value, -index): the root is the weakest kept candidate, i.e. the smallest value
 * and, among equal values, the highest index, so ties keep the lower index like np.argmax. */
static inline int oxl_weaker(float va, int32_t ia, float vb, int32_t ib) {
    return va < vb || (va == vb && ia > ib);
}

static void oxl_sift_down(float *hv, int32_t *hi, int64_t k, int64_t pos) {
    for (;;) {
        int64_t l = 2 * pos + 1, r = l + 1, m = pos;
        if (l < k && oxl_weaker(hv[l], hi[l], hv[m], hi[m])) m = l;
        if (r < k && oxl_weaker(hv[r], hi[r], hv[m], hi[m])) m = r;
        if (m == pos) return;
        float tv = hv[pos]; hv[pos] = hv[m]; hv[m] = tv;
        int32_t ti = hi[pos]; hi[pos] = hi[m]; hi[m] = ti;
        pos = m;
    }
}

/* called only once the heap is full (size == k): v beats the root, which it replaces */
static inline void oxl_heap_replace(float *hv, int32_t *hi, int64_t size, float v, int32_t idx) {
    hv[0] = v;
    hi[0] = idx;
    oxl_sift_down(hv, hi, size, 0);
}

OXL_SAMP_NOTRAP OXL_INLINE float oxl_samp_block_max64(const float *x) {
    oxl_v8f lane = oxl_v8f_load(x);
    for (int b = 8; b < 64; b += 8) {
        const oxl_v8f v = oxl_v8f_load(x + b);
        lane = oxl_v8f_select(v > lane, v, lane);
    }
    float m = lane[0];
    for (int j = 1; j < 8; j++) {
        m = lane[j] > m ? lane[j] : m;
    }
    return m;
}

/* Entries x[i] >= t (i increasing) into g_idx/g_val, at most cap of them; returns the count, or
 * -1 once more than cap qualify. Blocks of 64 whose max is below t are skipped. */
OXL_SAMP_CLONES OXL_SAMP_NOTRAP
static int64_t oxl_samp_gather_ge(const float *x, int64_t n, float t, int32_t *g_idx, float *g_val, int64_t cap) {
    if (g_idx == NULL || g_val == NULL) {
        return -1;
    }
    int64_t m = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        if (oxl_samp_block_max64(x + i) >= t) {
            for (int64_t j = i; j < i + 64; j++) {
                if (x[j] >= t) {
                    if (m == cap) return -1;
                    g_idx[m] = (int32_t)j;
                    g_val[m++] = x[j];
                }
            }
        }
    }
    for (; i < n; i++) {
        if (x[i] >= t) {
            if (m == cap) return -1;
            g_idx[m] = (int32_t)i;
            g_val[m++] = x[i];
        }
    }
    return m;
}

/* The heap selection itself over x[0..n); src_idx maps positions to the indices reported (NULL:
 * the positions themselves). src_idx must be increasing, so "lower index wins ties" holds. */
OXL_SAMP_CLONES OXL_SAMP_NOTRAP
static int64_t oxl_heap_top_k(const float *x, const int32_t *src_idx, int64_t n, int64_t k, int32_t *out_idx,
                              float *out_val) {
    if (k <= 0 || n <= 0) {
        return 0;
    }
    /* the heap lives in the output arrays, then is sorted in place (heapsort, weakest last) */
    float *hv = out_val;
    int32_t *hi = out_idx;
    int64_t size = 0, i = 0;
    for (; i < n && size < k; i++) {
        if (x[i] > -INFINITY) {
            /* sift up */
            int64_t pos = size++;
            hv[pos] = x[i];
            hi[pos] = src_idx ? src_idx[i] : (int32_t)i;
            while (pos > 0) {
                int64_t parent = (pos - 1) / 2;
                if (!oxl_weaker(hv[pos], hi[pos], hv[parent], hi[parent])) break;
                float tv = hv[pos]; hv[pos] = hv[parent]; hv[parent] = tv;
                int32_t ti = hi[pos]; hi[pos] = hi[parent]; hi[parent] = ti;
                pos = parent;
            }
        }
    }
    /* a later index only enters on a strictly larger value: equal values keep the lower index.
     * Blocks of 64 whose max is not above the heap's floor (nearly all of them, once the heap
     * holds good values) are skipped after one vectorized max. */
    float floor_v = size == k ? hv[0] : -INFINITY;
    for (; i < n && (i & 63); i++) {
        if (x[i] > floor_v) {
            oxl_heap_replace(hv, hi, size, x[i], src_idx ? src_idx[i] : (int32_t)i);
            floor_v = hv[0];
        }
    }
    for (; i + 64 <= n; i += 64) {
        if (oxl_samp_block_max64(x + i) > floor_v) {
            for (int64_t j = i; j < i + 64; j++) {
                if (x[j] > floor_v) {
                    oxl_heap_replace(hv, hi, size, x[j], src_idx ? src_idx[j] : (int32_t)j);
                    floor_v = hv[0];
                }
            }
        }
    }
    for (; i < n; i++) {
        if (x[i] > floor_v) {
            oxl_heap_replace(hv, hi, size, x[i], src_idx ? src_idx[i] : (int32_t)i);
            floor_v = hv[0];
        }
    }
    /* heapsort: repeatedly move the weakest to the end, giving descending order */
    for (int64_t end = size - 1; end > 0; end--) {
        float tv = hv[0]; hv[0] = hv[end]; hv[end] = tv;
        int32_t ti = hi[0]; hi[0] = hi[end]; hi[end] = ti;
        oxl_sift_down(hv, hi, end, 0);
    }
    return size;
}

/* Large rows: most entries cannot make the top k. A spread sample of OXL_TOPK_SAMPLE values gives
 * a threshold t that, with a safety margin, at least k entries reach; one vectorized pass gathers
 * the entries >= t (in index order) and the heap runs on those only. The result is exact either
 * way: if fewer than k entries reach t, or more than the gather buffer holds, the heap runs on
 * the whole row. */
#define OXL_TOPK_SAMPLE 4096
#define OXL_TOPK_GATHER 65536

int64_t oxl_samp_top_k(const float *x, int64_t n, int64_t k, int32_t *out_idx, float *out_val) {
    if (k <= 0 || n <= 0) {
        return 0;
    }
    /* small k: the heap alone is faster than sampling (its floor rises after a few blocks) */
    if (n < 2 * OXL_TOPK_SAMPLE || k <= 64 || k > OXL_TOPK_GATHER / 8) {
        return oxl_heap_top_k(x, NULL, n, k, out_idx, out_val);
    }
    /* 256 evenly spaced runs of 16 consecutive values: one cache line each, not 4096 misses */
    float sample[OXL_TOPK_SAMPLE];
    const int64_t stride = n / (OXL_TOPK_SAMPLE / 16);
    for (int64_t s = 0; s < OXL_TOPK_SAMPLE / 16; s++) {
        memcpy(sample + 16 * s, x + s * stride, 16 * sizeof(float));
    }
    /* expected count above the sample's r-th largest is r * stride; take twice what k needs */
    const int64_t r = OXL_MIN(OXL_TOPK_SAMPLE, 2 * (k * OXL_TOPK_SAMPLE / n) + 8);
    int32_t s_idx[OXL_TOPK_SAMPLE];
    float s_val[OXL_TOPK_SAMPLE];
    const int64_t got = oxl_heap_top_k(sample, NULL, OXL_TOPK_SAMPLE, r, s_idx, s_val);
    if (got < r) {
        return oxl_heap_top_k(x, NULL, n, k, out_idx, out_val);
    }
    const float t = s_val[r - 1];
    float *g_val = malloc(sizeof(float) * OXL_TOPK_GATHER);
    int32_t *g_idx = malloc(sizeof(int32_t) * OXL_TOPK_GATHER);
    int64_t m = oxl_samp_gather_ge(x, n, t, g_idx, g_val, OXL_TOPK_GATHER);
    int64_t out;
    if (g_val == NULL || g_idx == NULL || m < k) {
        out = oxl_heap_top_k(x, NULL, n, k, out_idx, out_val);
    } else {
        out = oxl_heap_top_k(g_val, g_idx, m, k, out_idx, out_val);
    }
    free(g_val);
    free(g_idx);
    return out;
}

int64_t oxl_samp_filter_ge(const float *x, int64_t n, float threshold, int32_t *out_idx) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        out_idx[m] = (int32_t)i;
        m += x[i] >= threshold;
    }
    return m;
}

/* Radix select on the bits of the non-negative float weights (whose bit patterns order like the
 * values): three histogram levels of 12, 12 and 8 bits find the exact weight at which the
 * descending running mass reaches target; only the first level touches every weight's bucket. */
static int64_t oxl_top_p_level(const uint32_t *key, int64_t n, int shift, uint32_t prefix, int prefix_shift,
                               int nbuckets, double *hist, double target_left, double *mass_above) {
    memset(hist, 0, sizeof(double) * (size_t)nbuckets);
    const uint32_t mask = (uint32_t)nbuckets - 1;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t k = key[i];
        if (prefix_shift >= 32 || (k >> prefix_shift) == prefix) {
            hist[(k >> shift) & mask] += oxl_fp32_from_bits(k);
        }
    }
    double run = 0.0;
    for (int b = nbuckets - 1; b >= 0; b--) {
        if (run + hist[b] >= target_left) {
            *mass_above = run;
            return b;
        }
        run += hist[b];
    }
    *mass_above = run;
    return 0;
}

int64_t oxl_samp_top_p(const float *w, int64_t n, double p, int32_t *out_idx, double *scratch) {
    const uint32_t *key = (const uint32_t *)(const void *)w;
    /* total mass, in double, so the cut does not inherit exp_sum's float lanes */
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        total += w[i];
    }
    double target = p * total, above1, above2, above3;
    const uint32_t b1 = (uint32_t)oxl_top_p_level(key, n, 20, 0, 32, 4096, scratch, target, &above1);
    const uint32_t b2 = (uint32_t)oxl_top_p_level(key, n, 8, b1, 20, 4096, scratch, target - above1, &above2);
    const uint32_t pre2 = (b1 << 12) | b2;
    const uint32_t b3 = (uint32_t)oxl_top_p_level(key, n, 0, pre2, 8, 256, scratch, target - above1 - above2,
                                                  &above3);
    const uint32_t cut = (pre2 << 8) | b3;
    /* every weight above the cut, then tied weights in id order until the mass reaches target */
    double run = above1 + above2 + above3;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (key[i] > cut) {
            out_idx[m++] = (int32_t)i;
        } else if (key[i] == cut && run < target && w[i] > 0.0f) {
            out_idx[m++] = (int32_t)i;
            run += w[i];
        }
    }
    return m;
}
