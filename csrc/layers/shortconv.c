/* Causal depthwise convolution and LFM2's gated short convolution; layouts and summation order in shortconv.h. */
#include "shortconv.h"

void oxl_causal_conv1d_rows(const float *x, int64_t ldx, int n_tokens, const float *w, int L, float *state,
                            float *y, int64_t ldy, int c0, int c1) {
    const int d = L - 1;   /* state width */
    float win[OXL_CONV_MAX_L];   /* the channel's last L inputs, oldest first */
    for (int c = c0; c < c1; c++) {
        const float *wc = w + (int64_t)c * L;
        float *sc = state + (int64_t)c * d;
        for (int j = 0; j < d; j++) win[j] = sc[j];
        for (int t = 0; t < n_tokens; t++) {
            win[d] = x[(int64_t)t * ldx + c];
            float acc = 0.0f;
            for (int j = 0; j < L; j++) acc += wc[j] * win[j];
            y[(int64_t)t * ldy + c] = acc;
            for (int j = 0; j < d; j++) win[j] = win[j + 1];
        }
        for (int j = 0; j < d; j++) sc[j] = win[j];
    }
}

void oxl_shortconv_rows(const float *bcx, int64_t ld_bcx, int n_tokens, int n_embd, const float *w, int L,
                        float *state, float *y, int64_t ldy, int c0, int c1) {
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] = row[c] * row[2 * n_embd + c];   /* B * x */
    }
    oxl_causal_conv1d_rows(y, ldy, n_tokens, w, L, state, y, ldy, c0, c1);
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] *= row[n_embd + c];   /* C * conv */
    }
}
