/* Multi-head latent attention (DeepSeek-V2/V3, llama.cpp's `deepseek2`), in the absorbed form.
 *
 * Per token, with n_head heads, r = kv_lora_rank, d_nope / d_rope the query-key head's two parts, d_v the value
 * head:
 *   q          = wq(xn), or wq_b(rms_norm(wq_a(xn)) * q_a_norm)      (n_head, d_nope + d_rope) per head [nope | pe]
 *   [c | k_pe] = wkv_a(xn)                                           (r + d_rope)
 *   c          = rms_norm(c) * kv_a_norm; k_pe and each head's q_pe rotated by RoPE (adjacent pairs)
 * The cache keeps only [c | k_pe] per token (r + d_rope values, one "KV head"): the compressed KV. Keys and values
 * of head h are k_nope_h = W_kb_h^T c and v_h = W_vb_h c; instead of expanding them, the query is absorbed:
 *   q_abs_h    = W_kb_h q_nope_h                                     (r)    W_kb_h: (r, d_nope), rows of wk_b
 * so score_h(t) = scale * ([q_abs_h | q_pe_h] . [c_t | k_pe_t]): multi-query attention with one KV head of
 * r + d_rope values, the latent rows themselves as values (the cache row's first r values), then
 *   o_h        = W_vb_h lat_h                                        (d_v)  W_vb_h: (d_v, r), rows of wv_b
 *   out        = wo([o_0 .. o_{n_head-1}])
 * llama.cpp's converter stores wk_b as (n_head, r, d_nope) and wv_b as (n_head, d_v, r) (split from kv_b).
 *
 * Summation order (the invariant): every product element is the float vec_dot gives for its (weight row,
 * activation row), whatever the number of rows (matmul.h); the per-head products read each head's slab of wk_b /
 * wv_b with the same kernels; attention is the forward's fixed page-tile and chunk order over the latent rows. */
#ifndef OXL_LAYERS_MLA_H
#define OXL_LAYERS_MLA_H

#include "../kernels.h"

/* Y[j, r] = dot(row r of head h's slab of W, xq[j]) for j in [0, n), r in [r0, r1): W holds n_head slabs of
 * rows_h rows of `cols` values of `type`, xq n activation rows of cols values in the type's vec_dot_type (or
 * floats for a float vec_dot_type), Y row stride ldy. Each element is the one vec_dot gives. */
void oxl_mla_head_range(const oxl_kernel_table *kt, int type, const void *W, int64_t rows_h, int64_t cols, int h,
                        const void *xq, int n, float *Y, int64_t ldy, int64_t r0, int64_t r1);

/* x (cols floats) into dst in activation type vdt (a float vec_dot_type: copied) */
void oxl_mla_act_row(const oxl_kernel_table *kt, int vdt, const float *x, int64_t cols, void *dst);

/* bytes of one activation row of cols values of type vdt */
int64_t oxl_mla_act_row_size(int vdt, int64_t cols);

#endif
