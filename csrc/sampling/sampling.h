/* Whole-vocabulary passes of the sampling pipeline (oxillama/sampling/).
 *
 * Everything else in sampling works on a few hundred candidates in NumPy; these are the passes
 * that read all n_vocab logits once per token, so they must not sort and must not call libm's
 * scalar expf 262,144 times. Callers (oxillama/sampling/_csampling.pyx) validate every length. */
#ifndef OXL_SAMPLING_H
#define OXL_SAMPLING_H

#include <stdint.h>

/* Flags of oxl_samp_copy_check. */
#define OXL_SAMP_HAS_NAN 1
#define OXL_SAMP_HAS_POSINF 2

/* dst[0..n) = src[0..n) in one pass that also finds max (into *max_out; -inf when every value
 * is -inf) and returns OXL_SAMP_HAS_NAN / OXL_SAMP_HAS_POSINF flags. n >= 0. */
int oxl_samp_copy_check(const float *src, float *dst, int64_t n, float *max_out);

/* oxl_samp_copy_check's scan of x[0..n) alone (max into *max_out, the same flags), for a chain that
 * only reads the row; *argmax_out: the first position of the max (np.argmax's, when no NaN). n >= 0
 * (n 32-bit: positions are counted in int32 lanes). */
int oxl_samp_check(const float *x, int64_t n, float *max_out, int64_t *argmax_out);

/* Largest value of x[0..n), n >= 1. NaN compares false, so the caller checks for NaN itself. */
float oxl_samp_max(const float *x, int64_t n);

/* w[i] = exp((x[i] - shift) * scale) for i < n, exactly 0 where that argument is below -87;
 * the argument must not exceed 88 (callers pass shift = max(x), scale > 0).
 * Returns sum(w) in *sum_w and sum(w * (x - shift) * scale) in *sum_wx (both accumulated in double),
 * which give the entropy: H = log(sum_w) - sum_wx / sum_w. w has room for n. */
void oxl_samp_exp_sum(const float *x, int64_t n, float shift, float scale, float *w,
                      double *sum_w, double *sum_wx);

/* The first i with w[0] + ... + w[i] > target, scanning w[0..n) of non-negative weights (so a
 * zero weight is never picked, even for target 0);
 * if rounding leaves the running sum short of target, the last i with w[i] > 0 (or n - 1). */
int64_t oxl_samp_pick(const float *w, int64_t n, double target);

/* The k largest of x[0..n) that are > -inf, written in descending order of value (ties: lower
 * index first) to out_idx (positions in x) and out_val, each with room for k. Returns how many
 * were written (<= k). A heap over the row (small k), or over the entries above a threshold
 * taken from a sample of the row (larger k; exact either way). No sort of the vocabulary. */
int64_t oxl_samp_top_k(const float *x, int64_t n, int64_t k, int32_t *out_idx, float *out_val);

/* Positions i with x[i] >= threshold, in increasing order, into out_idx (room for n). Returns the count. */
int64_t oxl_samp_filter_ge(const float *x, int64_t n, float threshold, int32_t *out_idx);

/* Top-p on non-negative weights w[0..n) (e.g. exp(x - max) from oxl_samp_exp_sum, never NaN):
 * the positions of the smallest set of largest weights whose sum reaches p * sum(w), ties at the
 * cut taken in increasing position order, written to out_idx (room for n) in increasing
 * position order. Returns the count. scratch: 4096 doubles. O(n), no sort. */
int64_t oxl_samp_top_p(const float *w, int64_t n, double p, int32_t *out_idx, double *scratch);

#endif
