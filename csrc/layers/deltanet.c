/* The gated delta rule, token by token; the formula, the state layout and the summation order are in
 * deltanet.h. */
#include <math.h>

#include "deltanet.h"

void oxl_deltanet_head(const oxl_kernel_table *kt, const float *q, const float *k, int64_t ld_qk, const float *v,
                       int64_t ld_v, const float *g, const float *beta, int64_t ld_gb, int n_tokens, int d_k,
                       int d_v, float *S, float *out, int64_t ld_out) {
    for (int t = 0; t < n_tokens; t++) {
        const float *qt = q + (int64_t)t * ld_qk, *kt_ = k + (int64_t)t * ld_qk, *vt = v + (int64_t)t * ld_v;
        const float decay = expf(g[(int64_t)t * ld_gb]), b = beta[(int64_t)t * ld_gb];
        float *ot = out + (int64_t)t * ld_out;
        for (int j = 0; j < d_v; j++) {
            float *Sj = S + (int64_t)j * d_k;
            for (int i = 0; i < d_k; i++) Sj[i] *= decay;
            const float kv = kt->ops.dot_f32(Sj, kt_, d_k);
            kt->ops.axpy(Sj, b * (vt[j] - kv), kt_, d_k);
            ot[j] = kt->ops.dot_f32(Sj, qt, d_k);
        }
    }
}

void oxl_l2_norm(float *x, int n, float eps) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] * x[i];
    const float inv = 1.0f / sqrtf(sum + eps);
    for (int i = 0; i < n; i++) x[i] *= inv;
}
