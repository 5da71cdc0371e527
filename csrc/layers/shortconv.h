/* LFM2's gated short convolution (llama.cpp's lfm2 "shortconv"), with in_proj's output split as
 * bcx[t] = [B | C | x] (3 n_embd values per row): y[t] = C[t] * conv(B * x)[t] (then out_proj, outside), conv the
 * kernel table's causal_conv (kernels.h: the one causal conv of every recurrent kind, its summation order and
 * state layout) without bias or activation.
 *
 * Layouts: w (n_embd, L) row-major: row c holds channel c's L taps, oldest first (the GGUF's conv weight, ggml
 * ne = {L, n_embd}). The state (L - 1, n_embd): row k holds every channel's (L-1-k)-th input before, oldest row
 * first (Mamba-2's conv state layout; llama.cpp keeps the transpose), so a SIMD tier reads it as it reads x.
 *
 * The order (the invariant): per token, B * x, the conv (taps in kernel order), times C; every token the same
 * way whatever the call shape, and channels are independent, so any split of the channels across threads gives
 * the same result. */
#ifndef OXL_LAYERS_SHORTCONV_H
#define OXL_LAYERS_SHORTCONV_H

#include <stdint.h>

#include "../kernels.h"

/* LFM2: channels [c0, c1) of y (n_tokens, ldy) = C * conv(B * x), from bcx (n_tokens, ld_bcx) rows [B | C | x]
 * of 3 n_embd values; state (L - 1, n_embd) updated for those channels. */
void oxl_shortconv_rows(const oxl_kernel_table *kt, const float *bcx, int64_t ld_bcx, int n_tokens, int n_embd,
                        const float *w, int L, float *state, float *y, int64_t ldy, int c0, int c1);

#endif
