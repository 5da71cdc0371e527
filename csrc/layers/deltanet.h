/* Qwen3-Next's and Qwen3.5's gated DeltaNet (llama.cpp's qwen3next / qwen35 "linear attention" layers): the gated
 * delta rule.
 *
 * Per value head h, with its key head g = h / (n_v_heads / n_k_heads) (transformers repeats each key head over
 * consecutive value heads; llama.cpp's qwen35 files order the value heads so that g = h % n_k_heads, the
 * oxl_deltanet's heads_tiled), per token t in order, the state S (d_v rows of d_k values) goes
 *   S      = S * exp(g_t)                      (g_t <= 0: the per-head decay)
 *   kv_j   = S_j . k_t                         (what the state recalls for the key)
 *   S_j   += beta_t (v_tj - kv_j) k_t          (the delta rule: move the recall toward v)
 *   o_tj   = S_j . q_t
 * with q_t, k_t L2-normalised and q_t scaled by 1 / sqrt(d_k). This is transformers'
 * torch_recurrent_gated_delta_rule with its (d_k, d_v) state stored transposed: row j of S here is column j
 * there, so every product above is a dot or axpy over a contiguous row of d_k floats.
 *
 * Summation order (the invariant): tokens strictly one after another (never the chunked WY form, whose sums
 * depend on where chunks start), each row j of S updated and read with the kernel table's dot_f32 / axpy over
 * its d_k values, which sum in one fixed order for a given length. So a prompt whole, in chunks or token by
 * token, alone or beside other sequences, gives the same floats; heads are independent, so any split of the
 * (sequence, head) items across threads gives the same result.
 *
 * State layout (one layer, one sequence): (n_v_heads, d_v, d_k) floats, head h's S at h * d_v * d_k. */
#ifndef OXL_LAYERS_DELTANET_H
#define OXL_LAYERS_DELTANET_H

#include "../kernels.h"

#define OXL_DELTANET_MAX_DK 1024

/* One value head over n_tokens rows of one sequence. q, k: rows of the head's key (stride ld_qk), normalised
 * and q scaled; v, out: rows of the head's values (strides ld_v, ld_out); g, beta: per row (stride ld_gb).
 * S (d_v, d_k) updated in place. */
void oxl_deltanet_head(const oxl_kernel_table *kt, const float *q, const float *k, int64_t ld_qk, const float *v,
                       int64_t ld_v, const float *g, const float *beta, int64_t ld_gb, int n_tokens, int d_k,
                       int d_v, float *S, float *out, int64_t ld_out);

/* x (n) *= 1 / sqrt(sum x^2 + eps): transformers' l2norm (FLA's), eps 1e-6 there */
void oxl_l2_norm(float *x, int n, float eps);

#endif
