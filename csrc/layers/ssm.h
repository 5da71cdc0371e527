/* Mamba-2's mixer kernels (the selective state-space layer), run by the forward's recurrent phases.
 *
 * One sequence's recurrent state lives in a slot of the state pool (oxl_state_pool, forward.h); a Mamba-2
 * layer's share of a slot is, in floats:
 *   conv state  (d_conv - 1, conv_dim)         the last d_conv - 1 inputs of the causal conv, oldest first;
 *   ssm state   (n_head, d_state, head_dim)    h[head][state][dim].
 * conv_dim = d_inner + 2 n_group d_state (the conv runs over x, B and C together); head_dim = d_inner / n_head.
 *
 * THE ORDER (the invariant: logits bit-identical whatever the call shape). Every token is processed by the
 * same code, one token after another, in every call: whole prompt, prefill chunks, 1-token decode, k-token
 * verify, alone or batched, any thread count. Threads split a step by (sequence, channel range) for the
 * conv and (sequence, head) for the scan; neither split changes an element's arithmetic.
 *   conv:  out[c] = SiLU(((w[c][0] in[t-d+1][c] + w[c][1] in[t-d+2][c]) + ... + w[c][d-1] in[t][c]) + b[c]):
 *          the kernel table's causal_conv (kernels.h, one conv for every recurrent kind), the taps summed in
 *          kernel order, the bias last.
 *   scan:  per head h (group g = h / (n_head / n_group)), dt = softplus(dt_raw + dt_bias[h]) (dt_raw > 20:
 *          the identity), dA = exp(dt A[h]); for s = 0 .. d_state - 1 in order, for every dim i:
 *            h[s][i] = h[s][i] dA + B[g][s] (x[i] dt);   y[i] = y[i] + h[s][i] C[g][s]   (y starts at 0)
 *          i.e. each y[i] is summed over the states sequentially, s = 0 first; then y[i] += D[h] x[i].
 *          (kernels.h's ssm_scan_states; SIMD tiers fuse the multiply-adds, the order is the same.)
 *          This is the recurrence itself, not the chunked SSD algorithm (which reorders the sums by chunk).
 *   gate:  y = silu(z) * y (the kernel table's silu_mul), then an RMS norm over each group's d_inner / n_group
 *          values (its rms_norm: one fixed order for a given length), times the norm weight (Mamba-2 /
 *          transformers' MambaRMSNormGated: gate first). Per token, the same calls whatever the call shape. */
#ifndef OXL_LAYERS_SSM_H
#define OXL_LAYERS_SSM_H

#include <stdint.h>

#include "kernels.h"

/* The selective scan of head h over n tokens of one sequence, y (n, ld_y) at the head's dims.
 * xbc (n, ld_xbc): [x (d_inner) | B (n_group, d_state) | C (n_group, d_state)] after the conv;
 * dt (n, ld_dt) raw (the head's value at dt[h]); state (d_state, head_dim) of the head. The states' update and
 * y's sum run in the kernel table's ssm_scan_states (kernels.h), the same function for every token. */
void oxl_ssm_scan_head(const oxl_kernel_table *kt, const float *xbc, int64_t ld_xbc, const float *dt, int64_t ld_dt,
                       float *y, int64_t ld_y,
                       int n, float *state, int h, int head_dim, int d_inner, int d_state, int n_head, int n_group,
                       float A, float D, float dt_bias);

/* y (d_inner) = groupwise RMS norm of y * silu(z), times w (d_inner; NULL: no norm, just the gate): the kernel
 * table's silu_mul, then its rms_norm per group. */
void oxl_ssm_gated_norm(const oxl_kernel_table *kt, float *y, const float *z, const float *w, int d_inner, int n_group,
                        float eps);

#endif
