/* Mamba-2's mixer kernels; the order they compute in is written down in ssm.h. */
#include <math.h>
#include <string.h>

#include "layers/ssm.h"

/* softplus as ggml computes it for the scan: the identity above 20 */
static inline float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

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

void oxl_ssm_gated_norm(const oxl_kernel_table *kt, float *y, const float *z, const float *w, int d_inner, int n_group,
                        float eps) {
    kt->ops.silu_mul(z, y, y, d_inner);   /* y = silu(z) y */
    if (!w) return;
    const int gs = d_inner / n_group;
    for (int g = 0; g < n_group; g++)
        kt->ops.rms_norm(y + (int64_t)g * gs, w + (int64_t)g * gs, y + (int64_t)g * gs, gs, eps);
}
