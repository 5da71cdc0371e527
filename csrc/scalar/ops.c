/* Scalar row ops: the reference the SIMD versions are tested against. */
#include <math.h>

#include "../blocks.h"
#include "../kernels.h"

static void rms_norm_scalar(const float *x, const float *w, float *y, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    if (w) {
        for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    } else {
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

static void layer_norm_scalar(const float *x, const float *w, const float *b, float *y, int n, float eps) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    const float scale = 1.0f / sqrtf((float)var + eps);
    for (int i = 0; i < n; i++) {
        float v = (float)(x[i] - mean) * scale;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

static double exp_shift_sum_d_scalar(float *x, int n, float m) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

static float exp_shift_sum_scalar(float *x, int n, float m) { return (float)exp_shift_sum_d_scalar(x, n, m); }

static void ssm_scan_states_scalar(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                                   int d_state, int n, int stream) {
    (void)stream;
    for (int s = 0; s < d_state; s++) {
        float *hs = h + (int64_t)s * n;
        const float bs = B[s], cs = C[s];
        for (int i = 0; i < n; i++) {
            const float v = hs[i] * dA + bs * xdt[i];
            hs[i] = v;
            y[i] = y[i] + v * cs;
        }
    }
}

static void causal_conv_scalar(const float *x, int64_t ldx, float *y, int64_t ldy, int n, float *state,
                               int64_t ld_state, const float *w, const float *b, int L, int c0, int c1, int silu) {
    const int d = L - 1;
    float win[OXL_CONV_MAX_L];   /* the channel's last L inputs, oldest first */
    for (int c = c0; c < c1; c++) {
        const float *wc = w + (int64_t)c * L;
        for (int j = 0; j < d; j++) win[j] = state[(int64_t)j * ld_state + c];
        for (int t = 0; t < n; t++) {
            win[d] = x[(int64_t)t * ldx + c];
            float acc = 0.0f;
            for (int j = 0; j < L; j++) acc += wc[j] * win[j];
            if (b) acc += b[c];
            y[(int64_t)t * ldy + c] = silu ? acc / (1.0f + expf(-acc)) : acc;
            for (int j = 0; j < d; j++) win[j] = win[j + 1];
        }
        for (int j = 0; j < d; j++) state[(int64_t)j * ld_state + c] = win[j];
    }
}

static void softmax_scalar(float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = fmaxf(m, x[i]);
    const double sum = exp_shift_sum_d_scalar(x, n, m);
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static void silu_mul_scalar(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static void gelu_mul_scalar(const float *g, const float *u, float *y, int n) {
    const float c = 0.7978845608028654f;
    for (int i = 0; i < n; i++) {
        const float x = g[i];
        const float v = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
        y[i] = u ? v * u[i] : v;
    }
}

/* gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) */
static void gelu_erf_mul_scalar(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) {
        const float x = g[i];
        const float v = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
        y[i] = u ? v * u[i] : v;
    }
}

static void add_scalar(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

static void axpy_scalar(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static float dot_f32_scalar(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static float dot_f16_scalar(const float *x, const oxl_half *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * oxl_fp16_to_fp32(y[i]);
    return s;
}

static void axpy_f16_scalar(float *y, float a, const oxl_half *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * oxl_fp16_to_fp32(x[i]);
}

static void fp32_to_fp16_scalar(const float *x, oxl_half *y, int n) {
    for (int i = 0; i < n; i++) y[i] = oxl_fp32_to_fp16(x[i]);
}

static void attn_scores_f16_scalar(const float *q, const oxl_half *K, int64_t stride, int n, int hd, float scale,
                                   float *scores) {
    for (int t = 0; t < n; t++) scores[t] = scale * dot_f16_scalar(q, K + t * stride, hd);
}

static void attn_values_f16_scalar(const float *p, const oxl_half *V, int64_t stride, int n, int hd, float *out) {
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int t = 0; t < n; t++) axpy_f16_scalar(out, p[t], V + t * stride, hd);
}

static void attn_scores_f16_group_scalar(const float *q, int G, const oxl_half *K, int64_t stride, int n, int hd,
                                         float scale, float *scores) {
    for (int h = 0; h < G; h++) attn_scores_f16_scalar(q + (int64_t)h * hd, K, stride, n, hd, scale, scores + (int64_t)h * n);
}

static void attn_values_f16_group_scalar(const float *p, int G, const oxl_half *V, int64_t stride, int n, int hd,
                                         float *out) {
    for (int h = 0; h < G; h++) attn_values_f16_scalar(p + (int64_t)h * n, V, stride, n, hd, out + (int64_t)h * hd);
}

/* scores[h * n + t] = scale * sum over blocks of d * (q_h . qs) */
static void attn_scores_q8_0_group_scalar(const float *q, int G, const void *K, int64_t row_bytes, int n, int hd,
                                          float scale, float *scores) {
    for (int t = 0; t < n; t++) {
        const block_q8_0 *b = (const block_q8_0 *)((const char *)K + t * row_bytes);
        for (int h = 0; h < G; h++) {
            const float *qh = q + (int64_t)h * hd;
            float sum = 0.0f;
            for (int i = 0; i < hd / QK8_0; i++) {
                float s = 0.0f;
                for (int j = 0; j < QK8_0; j++) s += qh[i * QK8_0 + j] * (float)b[i].qs[j];
                sum += s * oxl_fp16_to_fp32(b[i].d);
            }
            scores[(int64_t)h * n + t] = scale * sum;
        }
    }
}

/* out[h * hd + i] = sum_t p[h * n + t] * d * qs */
static void attn_values_q8_0_group_scalar(const float *p, int G, const void *V, int64_t row_bytes, int n, int hd,
                                          float *out) {
    memset(out, 0, (size_t)G * hd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const block_q8_0 *b = (const block_q8_0 *)((const char *)V + t * row_bytes);
        for (int i = 0; i < hd / QK8_0; i++) {
            const float d = oxl_fp16_to_fp32(b[i].d);
            for (int h = 0; h < G; h++) {
                const float c = p[(int64_t)h * n + t] * d;
                float *o = out + (int64_t)h * hd + i * QK8_0;
                for (int j = 0; j < QK8_0; j++) o[j] += c * (float)b[i].qs[j];
            }
        }
    }
}

void oxl_register_scalar_ops(oxl_kernel_table *t) {
    t->ops = (oxl_ops){
        .rms_norm = rms_norm_scalar,
        .layer_norm = layer_norm_scalar,
        .softmax = softmax_scalar,
        .silu_mul = silu_mul_scalar,
        .gelu_mul = gelu_mul_scalar,
        .gelu_erf_mul = gelu_erf_mul_scalar,
        .add = add_scalar,
        .axpy = axpy_scalar,
        .dot_f32 = dot_f32_scalar,
        .dot_f16 = dot_f16_scalar,
        .axpy_f16 = axpy_f16_scalar,
        .fp32_to_fp16 = fp32_to_fp16_scalar,
        .attn_scores_f16 = attn_scores_f16_scalar,
        .attn_values_f16 = attn_values_f16_scalar,
        .attn_scores_f16_group = attn_scores_f16_group_scalar,
        .attn_values_f16_group = attn_values_f16_group_scalar,
        .attn_scores_q8_0_group = attn_scores_q8_0_group_scalar,
        .attn_values_q8_0_group = attn_values_q8_0_group_scalar,
        .exp_shift_sum = exp_shift_sum_scalar,
        .ssm_scan_states = ssm_scan_states_scalar,
        .causal_conv = causal_conv_scalar,
    };
}
