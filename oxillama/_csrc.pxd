# C declarations of csrc/ shared by the Cython wrappers. No code here.
from libc.stdint cimport int64_t, uint32_t, uint16_t, int32_t, uint64_t

cdef extern from "kernels.h" nogil:
    int OXL_REPACK_ROW_ALIGN
    ctypedef void (*oxl_to_float_fn)(const void *src, float *dst, int64_t n)
    ctypedef void (*oxl_from_float_fn)(const float *src, void *dst, int64_t n)
    ctypedef void (*oxl_vec_dot_fn)(int n, float *s, const void *x, const void *y)
    ctypedef void (*oxl_gemm_fn)(int n, float *s, int64_t lds, const void *w, size_t w_row, int nr,
                                 const void *y, size_t y_row, int nc)

    ctypedef struct oxl_repacked_layout:
        const char *name

    ctypedef struct oxl_type_traits:
        const char *name
        int64_t blck_size
        size_t type_size
        int is_quantized
        int vec_dot_type
        oxl_to_float_fn to_float
        oxl_from_float_fn from_float_ref
        oxl_from_float_fn from_float
        oxl_vec_dot_fn vec_dot
        const char *tier
        oxl_gemm_fn gemm
        oxl_repacked_layout repacked

    ctypedef struct oxl_ops:
        void (*rms_norm)(const float *x, const float *w, float *y, int n, float eps)
        void (*layer_norm)(const float *x, const float *w, const float *b, float *y, int n, float eps)
        void (*softmax)(float *x, int n)
        void (*silu_mul)(const float *g, const float *u, float *y, int n)
        void (*gelu_mul)(const float *g, const float *u, float *y, int n)
        void (*gelu_erf_mul)(const float *g, const float *u, float *y, int n)
        void (*add)(float *y, const float *x, int n)
        void (*axpy)(float *y, float a, const float *x, int n)
        float (*dot_f32)(const float *x, const float *y, int n)
        float (*dot_f16)(const float *x, const uint16_t *y, int n)
        void (*axpy_f16)(float *y, float a, const uint16_t *x, int n)
        void (*fp32_to_fp16)(const float *x, uint16_t *y, int n)
        void (*attn_scores_f16)(const float *q, const uint16_t *K, int64_t stride, int n, int hd, float scale,
                                float *scores)
        void (*attn_values_f16)(const float *p, const uint16_t *V, int64_t stride, int n, int hd, float *out)
        void (*attn_scores_f16_group)(const float *q, int G, const uint16_t *K, int64_t stride, int n, int hd, float scale, float *scores)
        void (*attn_values_f16_group)(const float *p, int G, const uint16_t *V, int64_t stride, int n, int hd, float *out)
        float (*exp_shift_sum)(float *x, int n, float m)
        void (*ssm_scan_states)(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                                int d_state, int n, int stream)
        void (*causal_conv)(const float *x, int64_t ldx, float *y, int64_t ldy, int n, float *state,
                            int64_t ld_state, const float *w, const float *b, int L, int c0, int c1, int silu)

    ctypedef struct oxl_kernel_table:
        const char *name
        oxl_type_traits type[40]
        oxl_ops ops

    enum: OXL_TYPE_COUNT
    enum: OXL_TIER_COUNT
    enum: OXL_TYPE_F32
    enum: OXL_TYPE_F16

    uint32_t oxl_cpu_detect()
    const char *oxl_cpu_feature_name(int bit)
    void oxl_dispatch_init(const char *disabled)
    const oxl_kernel_table *oxl_kernels()
    const oxl_kernel_table *oxl_tier_table(int tier)
    int oxl_active_tier()
    const char *oxl_tier_name(int tier)
    int oxl_tier_compiled(int tier)
    uint32_t oxl_cpu_features()
    const oxl_type_traits *oxl_type_info(int type)
    int64_t oxl_row_size(int type, int64_t n)

cdef extern from "quantize.h" nogil:
    int oxl_can_quantize_chunk(int type, int with_weights)
    int64_t oxl_quantize_chunk(int type, const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                               const float *qw)

cdef extern from "matmul.h" nogil:
    int64_t oxl_act_size(const oxl_kernel_table *k, int type, int64_t cols, int64_t n)
    void oxl_quantize_act(const oxl_kernel_table *k, int type, const float *x, int64_t cols, int64_t n, void *xq)
    int oxl_matvec(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
                   const float *x, float *y, void *scratch, int n_threads)
    int oxl_matmul(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
                   const float *X, int64_t n, float *Y, void *scratch, int n_threads)
    void oxl_gemm_range(const oxl_kernel_table *k, int type, const void *W, int64_t cols, const void *xq,
                        int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1)
    int64_t oxl_repacked_row_size(const oxl_kernel_table *k, int type, int64_t cols)
    int oxl_repack(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols, void *dst,
                   int n_threads)
    int oxl_gemm_packed_range(const oxl_kernel_table *k, int type, const void *P, int64_t cols, const void *xq,
                              int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1)

cdef extern from "forward.h" nogil:
    ctypedef struct oxl_weight:
        const void *data
        int type
        int64_t rows, cols
        const void *packed

    ctypedef struct oxl_rope:
        float base
        float freq_scale
        const float *freq_factors
        int n_rot
        int mode
        float ext_factor
        float attn_factor
        float corr_low, corr_high

    enum: OXL_CONV_MAX_L

    ctypedef struct oxl_shortconv:
        oxl_weight in_proj, out_proj
        const float *kernel
        int L

    enum: OXL_DELTANET_MAX_DK

    ctypedef struct oxl_deltanet:
        oxl_weight wqkv, wgate, w_ba, w_out
        const float *conv
        const float *a_neg
        const float *dt_bias
        const float *norm
        int L, n_k_heads, n_v_heads, d_k, d_v
        int heads_tiled

    ctypedef struct oxl_mla:
        oxl_weight wq, wq_a, wq_b
        const float *q_a_norm
        oxl_weight wkv_a
        const float *kv_a_norm
        oxl_weight wk_b, wv_b
        int q_lora_rank, kv_lora_rank, d_nope, d_rope, d_v

    ctypedef struct oxl_layer:
        const float *attn_norm
        const float *attn_norm_b
        oxl_weight wq, wk, wv, wo
        const float *bq
        const float *bk
        const float *bv
        const float *bo
        const float *q_norm
        const float *k_norm
        const float *post_attn_norm
        const float *ffn_norm
        const float *ffn_norm_b
        oxl_weight w_gate, w_up, w_down
        const float *b_up
        const float *b_down
        const float *b_gate
        const float *post_ffn_norm
        int fused_gate_up
        int act
        int parallel_residual
        int n_head, n_head_kv, head_dim
        float attn_scale
        float attn_softcap
        int sliding_window
        const float *attn_sinks
        oxl_rope rope
        int qk_norm_full
        int qk_norm_layer
        int qk_norm_head_weights
        const float *alibi_slopes
        int n_expert, n_expert_used, n_ff_exp
        int gating
        int norm_topk
        float expert_scale
        oxl_weight router, exp_gate, exp_up, exp_down
        const float *shexp_gate
        int kind
        oxl_weight ssm_in, ssm_out
        const float *ssm_conv1d
        const float *ssm_conv1d_b
        const float *ssm_a
        const float *ssm_d
        const float *ssm_dt_b
        const float *ssm_norm
        int ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_group, ssm_n_head
        oxl_shortconv conv
        oxl_deltanet dn
        int attn_gate
        int64_t state_off
        int kv_layer
        float residual_scale
        const float *attn_out_norm
        const float *attn_out_norm_b
        const float *layer_out_norm
        const float *layer_out_norm_b
        const float *router_b
        const float *exp_gate_b
        const float *exp_up_b
        const float *exp_down_b
        float act_alpha, act_limit
        float router_eps
        const float *sel_bias
        int n_group, n_group_used
        oxl_mla mla

    enum: OXL_LAYER_ATTENTION
    enum: OXL_LAYER_MAMBA2
    enum: OXL_LAYER_SHORTCONV
    enum: OXL_LAYER_DELTANET
    enum: OXL_LAYER_MLA
    enum: OXL_LAYER_FFN


    ctypedef struct oxl_model:
        int n_embd, n_layer, n_vocab, n_ff_max, q_dim_max, kv_dim
        int norm_type
        float norm_eps
        const void *tok_embd
        int tok_embd_type
        float embd_scale
        const void *pos_embd
        int pos_embd_type, n_pos
        const float *embd_norm
        const float *embd_norm_b
        const oxl_layer *layers
        const float *out_norm
        const float *out_norm_b
        oxl_weight output
        const float *output_b
        float final_softcap
        float logit_scale
        int n_expert_max, n_expert_used_max, n_ff_exp_max
        int ssm_d_in_proj_max, ssm_conv_dim_max, ssm_d_inner_max
        int64_t state_floats
        const float *type_embd
        int non_causal

    ctypedef struct oxl_state_pool:
        float *data
        int n_slots
        int64_t slot_floats

    ctypedef struct oxl_kv_cache:
        int type
        int n_pages
        int n_layer
        int n_head_kv, head_dim
        void **k
        void **v

    ctypedef struct oxl_lora_weight:
        const void *a
        const void *bt
        int rank
        int type

    ctypedef struct oxl_lora:
        const oxl_lora_weight *w
        float scale

    enum: OXL_LORA_SLOTS
    enum: OXL_LORA_MAX_RANK

    ctypedef struct oxl_batch_seq:
        const int32_t *tokens
        int n_tokens
        int pos0
        const int32_t *pages
        int n_blocks
        int all_logits
        const oxl_lora *loras
        int n_loras
        int state_slot

    enum: OXL_KV_PAGE
    enum: OXL_GATING_SOFTMAX
    enum: OXL_GATING_SIGMOID
    enum: OXL_GATING_SOFTMAX_WEIGHT
    enum: OXL_GATING_SPARSEMIXER
    enum: OXL_MAX_EXPERTS

    int64_t oxl_forward_scratch_size(const oxl_model *m, int n_batch, int n_ctx, int n_threads)
    int oxl_forward_batch(const oxl_model *m, const oxl_kv_cache *kv, const oxl_state_pool *rs,
                          const oxl_batch_seq *seqs, int n_seqs,
                          float *logits, float *hidden, void *scratch, int64_t scratch_size, int n_threads)


cdef extern from "selftest.h" nogil:
    ctypedef struct oxl_check_result:
        const char *subject
        const char *kernel
        char owner[32]
        int cases
        int failures
        double worst
        char detail[200]
    ctypedef void (*oxl_check_sink)(void *ctx, const oxl_check_result *r)
    int oxl_check_tier(int tier, int thorough, uint64_t seed, oxl_check_sink sink, void *ctx)
