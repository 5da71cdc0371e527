/* LFM2's gated short convolution; layouts and summation order in shortconv.h. */
#include "shortconv.h"

void oxl_shortconv_rows(const oxl_kernel_table *kt, const float *bcx, int64_t ld_bcx, int n_tokens, int n_embd,
                        const float *w, int L, float *state, float *y, int64_t ldy, int c0, int c1) {
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] = row[c] * row[2 * n_embd + c];   /* B * x */
    }
    kt->ops.causal_conv(y, ldy, y, ldy, n_tokens, state, n_embd, w, NULL, L, c0, c1, 0);
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] *= row[n_embd + c];   /* C * conv */
    }
}
