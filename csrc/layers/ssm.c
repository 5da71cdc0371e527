/* Mamba-2's mixer kernels; the order they compute in is written down in ssm.h. */
#include <math.h>
#include <string.h>

#include "layers/ssm.h"

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

/* softplus as ggml computes it for the scan: the identity above 20 */
static inline float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

void oxl_ssm_conv(const float *in, int64_t ld_in, float *out, int64_t ld_out, int n, float *conv_state,
                  int conv_dim, int d_conv, const float *w, const float *b, int c0, int c1) {
    const int hist = d_conv - 1;
    for (int t = 0; t < n; t++) {
        float *o = out + (int64_t)t * ld_out;
        for (int c = c0; c < c1; c++) {
            const float *wc = w + (int64_t)c * d_conv;
            float sum = 0.0f;
            for (int k = 0; k < d_conv; k++) {
                const int p = t - hist + k;   /* token index of tap k; < 0: from the state */
                const float v = p >= 0 ? in[(int64_t)p * ld_in + c] : conv_state[(int64_t)(hist + p) * conv_dim + c];
                sum += wc[k] * v;
            }
            sum += b ? b[c] : 0.0f;
            o[c] = silu(sum);
        }
    }
    /* the state keeps the last hist inputs: from the new tokens, or shifted from the old state */
    for (int k = 0; k < hist; k++) {
        const int p = n - hist + k;
        float *dst = conv_state + (int64_t)k * conv_dim;
        if (p >= 0) {
            const float *src = in + (int64_t)p * ld_in;
            for (int c = c0; c < c1; c++) dst[c] = src[c];
        } else {   /* p + hist - n + ... : old row k + n, which is later than k, so copying upward is safe */
            const float *src = conv_state + (int64_t)(k + n) * conv_dim;
            for (int c = c0; c < c1; c++) dst[c] = src[c];
        }
    }
}

void oxl_ssm_scan_head(const oxl_kernel_table *kt, const float *xbc, int64_t ld_xbc, const float *dt, int64_t ld_dt,
                       float *y, int64_t ld_y,
                       int n, float *state, int h, int head_dim, int d_inner, int d_state, int n_head, int n_group,
                       float A, float D, float dt_bias) {
    const int g = h / (n_head / n_group);
    float xdt[head_dim > 0 ? head_dim : 1];
    for (int t = 0; t < n; t++) {
        const float *row = xbc + (int64_t)t * ld_xbc;
        const float *x = row + (int64_t)h * head_dim;
        const float *B = row + d_inner + (int64_t)g * d_state;
        const float *C = row + d_inner + (int64_t)n_group * d_state + (int64_t)g * d_state;
        const float dts = softplus(dt[(int64_t)t * ld_dt + h] + dt_bias);
        const float dA = expf(dts * A);
        float *yt = y + (int64_t)t * ld_y + (int64_t)h * head_dim;
        for (int i = 0; i < head_dim; i++) {
            xdt[i] = x[i] * dts;
            yt[i] = 0.0f;
        }
        kt->ops.ssm_scan_states(state, B, C, xdt, dA, yt, d_state, head_dim);
        for (int i = 0; i < head_dim; i++) yt[i] = yt[i] + D * x[i];
    }
}

void oxl_ssm_gated_norm(float *y, const float *z, const float *w, int d_inner, int n_group, float eps) {
    for (int i = 0; i < d_inner; i++) y[i] = y[i] * silu(z[i]);
    if (!w) return;
    const int gs = d_inner / n_group;
    for (int g = 0; g < n_group; g++) {
        float *yg = y + (int64_t)g * gs;
        float ss = 0.0f;
        for (int i = 0; i < gs; i++) ss += yg[i] * yg[i];
        const float scale = 1.0f / sqrtf(ss / (float)gs + eps);
        for (int i = 0; i < gs; i++) yg[i] = yg[i] * scale * w[(int64_t)g * gs + i];
    }
}
