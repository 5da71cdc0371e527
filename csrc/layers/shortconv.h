/* Causal depthwise convolution with a rolling state, and LFM2's gated short convolution on top of it.
 *
 * oxl_causal_conv1d_rows, per channel c of n_tokens rows x[t] of one sequence:
 *   y[t]c = sum_{j = 0}^{L-1} w[c][j] * x[t - (L-1) + j]c
 * where x at times before the call's first row come from the channel's rolling state, which then keeps the
 * last L - 1 inputs. LFM2's conv layer (llama.cpp's lfm2 "shortconv"), with in_proj's output split as
 * bcx[t] = [B | C | x] (3 n_embd values per row): y[t] = C[t] * conv(B * x)[t] (then out_proj, outside).
 * Qwen3-Next's gated DeltaNet runs the plain convolution on its q|k|v channels (then SiLU).
 *
 * Layouts: w (n_channels, L) row-major: row c holds channel c's L taps, oldest first (the GGUF's conv
 * weight, ggml ne = {L, n_channels}). The state (n_channels, L - 1): row c holds channel c's last L - 1
 * inputs, oldest first (llama.cpp's conv state layout).
 *
 * Summation order (the invariant): each y[t]c is summed j = 0, 1, ..., L - 1 in that order, token after
 * token, whatever the call shape: a prompt whole, in chunks or token by token gives the same floats, as
 * the state carries exactly the inputs a longer call would have read from its own rows. Channels are
 * independent, so any split of the channels across threads gives the same result. */
#ifndef OXL_LAYERS_SHORTCONV_H
#define OXL_LAYERS_SHORTCONV_H

#include <stdint.h>

#define OXL_CONV_MAX_L 64   /* the widest kernel accepted (LFM2: 3, Qwen3-Next: 4) */

/* Channels [c0, c1) of n_tokens rows: x (n_tokens, ldx), y (n_tokens, ldy), channel c at row offset c; y may
 * be x (in place). state: the rows of channels [0, n_channels), updated for [c0, c1). */
void oxl_causal_conv1d_rows(const float *x, int64_t ldx, int n_tokens, const float *w, int L, float *state,
                            float *y, int64_t ldy, int c0, int c1);

/* LFM2: channels [c0, c1) of y (n_tokens, ldy) = C * conv(B * x), from bcx (n_tokens, ld_bcx) rows [B | C | x]
 * of 3 n_embd values; state (n_embd, L - 1) updated. */
void oxl_shortconv_rows(const float *bcx, int64_t ld_bcx, int n_tokens, int n_embd, const float *w, int L,
                        float *state, float *y, int64_t ldy, int c0, int c1);

#endif
