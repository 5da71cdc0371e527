/* The fused transformer forward pass.
 *
 * Architectures stay in Python (oxillama/models/): at load time a model module describes each layer
 * as an oxl_layer (weights, norms, flags), and the whole model as an oxl_model. oxl_forward_batch() then
 * runs every layer for the tokens of one or many sequences inside ONE OpenMP parallel region (barriers
 * between steps), appends K/V to the paged cache and writes logits into a caller-owned buffer. Python
 * crosses into C once per step, with the GIL released. Inside, a step is a list of named phases (forward.c:
 * embed; per layer the phases its kind lists, e.g. attention then a dense FFN or a mixture of experts; logits),
 * each layer kind's phases in its own file under layers/ over the private state in forward_impl.h.
 *
 * Shapes: n_embd model width; q_dim = n_head * head_dim; kv_dim = n_head_kv * head_dim.
 * Weights are row-major (rows = outputs, cols = inputs), any quant type with a vec_dot. */
#ifndef OXL_FORWARD_H
#define OXL_FORWARD_H

#include "kernels.h"
#include "layers/deltanet.h"
#include "layers/shortconv.h"
#include "layers/mla.h"

typedef struct {
    const void *data;   /* NULL: absent */
    int type;
    int64_t rows, cols;
    const void *packed; /* the rows in the active tier's repacked layout (matmul.h), or NULL: read data */
} oxl_weight;

enum { OXL_NORM_RMS = 0, OXL_NORM_LAYER = 1 };
/* OXL_ACT_SWIGLU_OAI (gpt-oss's experts): g = min(gate, limit), u = clamp(up, -limit, limit),
 * y = (u + 1) * g * sigmoid(alpha * g), with the layer's act_alpha and act_limit */
/* OXL_ACT_RELU_SQR (nemotron_h): y = max(g, 0)^2 (times up where gated) */
enum { OXL_ACT_SILU = 0, OXL_ACT_GELU_TANH = 1, OXL_ACT_GELU_ERF = 2, OXL_ACT_SWIGLU_OAI = 3, OXL_ACT_RELU_SQR = 4 };
enum { OXL_ROPE_NORM = 0, OXL_ROPE_NEOX = 2, OXL_ROPE_NONE = -1 };

typedef struct {
    float base;          /* theta base */
    float freq_scale;    /* linear scaling: 1 / factor */
    const float *freq_factors; /* per-pair divisors (llama3 rope_freqs), n_rot/2 values, or NULL */
    int n_rot;           /* dims rotated per head (<= head_dim) */
    int mode;            /* OXL_ROPE_NORM (adjacent pairs) or OXL_ROPE_NEOX (halves) */
    float ext_factor;    /* YaRN: 0 disables */
    float attn_factor;   /* YaRN magnitude scale */
    float corr_low, corr_high; /* YaRN correction dims */
} oxl_rope;

/* LFM2's conv block: y = out_proj(C * conv(B * x)), [B; C; x] = in_proj(xn); state (L - 1, n_embd) floats */
typedef struct {
    oxl_weight in_proj;     /* (3 n_embd, n_embd): rows [B; C; x] */
    oxl_weight out_proj;    /* (n_embd, n_embd) */
    const float *kernel;    /* (n_embd, L): channel c's taps, oldest first */
    int L;                  /* kernel width (shortconv.l_cache), 2 .. OXL_CONV_MAX_L */
} oxl_shortconv;

/* Qwen3-Next's gated DeltaNet block (layers/deltanet.h): per row, [q | k | v] = wqkv(xn) with q and k n_k_heads
 * heads of d_k and v n_v_heads heads of d_v (conv_dim = 2 n_k_heads d_k + n_v_heads d_v values), z = wgate(xn)
 * (n_v_heads d_v), w_ba(xn) per key head [b (r) | a (r)], r = n_v_heads / n_k_heads. Then the causal conv
 * (width L) + SiLU over [q | k | v], q and k L2-normalised (q / sqrt(d_k)), beta = sigmoid(b),
 * g = a_neg * softplus(a + dt_bias), the delta rule per value head, o = rms_norm(o) * norm * silu(z) per value
 * head, out = w_out(o). State: the conv state (L - 1, conv_dim), then S (n_v_heads, d_v, d_k). */
typedef struct {
    oxl_weight wqkv;        /* (conv_dim, n_embd) */
    oxl_weight wgate;       /* (n_v_heads d_v, n_embd) */
    oxl_weight w_ba;        /* (2 n_v_heads, n_embd) */
    oxl_weight w_out;       /* (n_embd, n_v_heads d_v) */
    const float *conv;      /* (conv_dim, L) */
    const float *a_neg;     /* (n_v_heads): -exp(A_log) */
    const float *dt_bias;   /* (n_v_heads) */
    const float *norm;      /* (d_v) */
    int L, n_k_heads, n_v_heads, d_k, d_v;
    int heads_tiled;        /* 0: value head h reads key head h / r (transformers' order, qwen3next); 1: key head
                               h % n_k_heads (llama.cpp's qwen35 files, whose value heads are reordered so), and
                               w_ba's rows per key head g are [b | a] of its value heads g, g + n_k_heads, ... */
} oxl_deltanet;

/* DeepSeek-V2/V3's multi-head latent attention (layers/mla.h): q = wq(xn), or wq_b(rms_norm(wq_a(xn)) *
 * q_a_norm), per head [nope (d_nope) | pe (d_rope)]; [c (r) | k_pe (d_rope)] = wkv_a(xn), c RMS-normed with
 * kv_a_norm; the cache holds [c | k_pe] (the layer's head_dim = r + d_rope, one KV head); per head h
 * q_abs_h = W_kb_h q_nope_h with wk_b's slab h (r, d_nope), and o_h = W_vb_h lat_h with wv_b's slab h (d_v, r). */
typedef struct {
    oxl_weight wq;          /* (n_head (d_nope + d_rope), n_embd), or absent beside wq_a / wq_b */
    oxl_weight wq_a;        /* (q_lora_rank, n_embd) */
    oxl_weight wq_b;        /* (n_head (d_nope + d_rope), q_lora_rank) */
    const float *q_a_norm;  /* (q_lora_rank) */
    oxl_weight wkv_a;       /* (r + d_rope, n_embd) */
    const float *kv_a_norm; /* (r) */
    oxl_weight wk_b;        /* (n_head r, d_nope) */
    oxl_weight wv_b;        /* (n_head d_v, r) */
    int q_lora_rank;        /* 0 without wq_a / wq_b */
    int kv_lora_rank, d_nope, d_rope, d_v;
} oxl_mla;

typedef struct {
    /* attention block */
    const float *attn_norm, *attn_norm_b;   /* pre-attention norm weight / bias (b may be NULL); attn_norm NULL: the
                                                block reads x itself (olmo2), as the FFN does without ffn_norm */
    oxl_weight wq, wk, wv, wo;               /* wq may hold the fused QKV (wk.data == NULL then) */
    const float *bq, *bk, *bv, *bo;          /* biases or NULL */
    const float *q_norm, *k_norm;            /* per-head RMS norm weights (head_dim) or NULL */
    const float *post_attn_norm;             /* norm of the attention output before the residual */
    /* feed-forward block */
    const float *ffn_norm, *ffn_norm_b;
    oxl_weight w_gate, w_up, w_down;         /* no gate: up -> act -> down; w_up may hold fused gate|up */
    const float *b_up, *b_down, *b_gate;
    const float *post_ffn_norm;
    int fused_gate_up;                       /* w_up rows = 2 * n_ff: [gate; up] (phi3) */
    int act;                                 /* OXL_ACT_* */
    int parallel_residual;                   /* x + attn(n(x)) + ffn(n'(x)): n' = ffn_norm where given (gptneox),
                                                else attn_norm (command-r, falcon) */
    /* attention parameters */
    int n_head, n_head_kv, head_dim;
    float attn_scale;                        /* multiplies q.k */
    float attn_softcap;                      /* 0: none; else s = c * tanh(s / c) */
    int sliding_window;                      /* 0: none; else attend to pos - p < window */
    const float *attn_sinks;                 /* (n_head) or NULL: per query head a learned logit that joins every
                                                softmax's denominator and adds no value (gpt-oss) */
    oxl_rope rope;
    int qk_norm_full;                        /* q_norm / k_norm span all of q_dim / kv_dim (olmoe), not a head */
    int qk_norm_layer;                       /* q/k norms are LayerNorms without bias (stablelm), not RMS norms */
    int qk_norm_head_weights;                /* q_norm (q_dim), k_norm (kv_dim): each head its own weights (stablelm) */
    const float *alibi_slopes;               /* (n_head) ALiBi: score += slope_h * (key pos - query pos) (bloom), or NULL */
    /* sparse experts: n_expert > 0 makes the FFN a mixture; the dense w_gate / w_up / w_down above are then
     * its shared expert (absent: w_up.data == NULL), weighted by sigmoid(shexp_gate . xn) where given */
    int n_expert, n_expert_used, n_ff_exp;
    int gating;                              /* OXL_GATING_* */
    int norm_topk;                           /* the chosen experts' weights renormalised to sum 1 */
    float expert_scale;                      /* multiplies the chosen weights */
    oxl_weight router;                       /* ffn_gate_inp (n_expert, n_embd) */
    oxl_weight exp_gate, exp_up;             /* every expert's rows stacked: (n_expert * n_ff_exp, n_embd) */
    oxl_weight exp_down;                     /* (n_expert * n_embd, n_ff_exp) */
    const float *shexp_gate;                 /* (n_embd) or NULL */
    /* the layer's kind: which mixer runs before the FFN (layers/ssm.h for Mamba-2) */
    int kind;                                /* OXL_LAYER_* */
    /* Mamba-2 mixer (kind OXL_LAYER_MAMBA2): attn_norm is its pre-norm; then ssm_in gives the rows
     * [z (d_inner) | xBC (conv_dim) | dt (n_head)], the causal conv + SiLU over xBC, the selective scan, the gate
     * and grouped RMS norm (ssm_norm), ssm_out. A Mamba-2 layer has an FFN after it only where w_up or experts
     * are given (granitehybrid); the attention fields above are unused (n_head = n_head_kv = head_dim = 0). */
    oxl_weight ssm_in;                       /* (2 d_inner + 2 n_group d_state + n_head, n_embd) */
    oxl_weight ssm_out;                      /* (n_embd, d_inner) */
    const float *ssm_conv1d, *ssm_conv1d_b;  /* (conv_dim, d_conv), (conv_dim) */
    const float *ssm_a, *ssm_d, *ssm_dt_b;   /* per head: A (negative), D, dt bias */
    const float *ssm_norm;                   /* (d_inner) or NULL */
    int ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_group, ssm_n_head;
    /* LFM2's gated short convolution (kind OXL_LAYER_SHORTCONV): attn_norm is its pre-norm, then the FFN as
     * in an attention layer; the attention fields above are unused (n_head = n_head_kv = head_dim = 0) */
    oxl_shortconv conv;
    /* Qwen3-Next's gated DeltaNet (kind OXL_LAYER_DELTANET): attn_norm is its pre-norm, then the FFN */
    oxl_deltanet dn;
    /* an attention layer's output gate (qwen3next): wq's rows are per head [q (head_dim) | gate (head_dim)],
     * and the attention output is multiplied by sigmoid(gate) before wo */
    int attn_gate;
    int64_t state_off;                       /* the layer's recurrent state within a slot (floats) */
    int kv_layer;                            /* attention layers: the index of its K/V in the cache (the
                                                attention layers in order; recurrent layers have none) */
    float residual_scale;                    /* 0 (none) or multiplies the mixer's and the FFN's outputs before
                                                each residual add (granite's residual_multiplier) */
    /* post-norm blocks (bert, nomic-bert; layers/encoder.h): attn_norm / ffn_norm NULL (the branch reads x
     * itself), then x = norm(x + attn) with attn_out_norm and x = norm(x + ffn) with layer_out_norm */
    const float *attn_out_norm, *attn_out_norm_b;
    const float *layer_out_norm, *layer_out_norm_b;
    const float *router_b;                   /* (n_expert) added to the router logits, or NULL */
    const float *exp_gate_b, *exp_up_b;      /* (n_expert * n_ff_exp) per-expert biases, or NULL (gpt-oss) */
    const float *exp_down_b;                 /* (n_expert * n_embd), or NULL */
    float act_alpha, act_limit;              /* OXL_ACT_SWIGLU_OAI's parameters */
    float router_eps;                        /* OXL_GATING_SPARSEMIXER's jitter epsilon */
    const float *sel_bias;                   /* (n_expert) added to the gated probabilities for the choice only,
                                                the weights stay unbiased (lfm2moe's expert_bias, llama.cpp's
                                                exp_probs_b), or NULL */
    /* DeepSeek-V3's group-limited routing: with n_group > 1 groups of n_expert / n_group experts, only the
     * n_group_used groups of the highest selection scores (the sum of a group's two best) are chosen from */
    int n_group, n_group_used;
    /* multi-head latent attention (kind OXL_LAYER_MLA): n_head heads, n_head_kv = 1, head_dim = r + d_rope (the
     * cache row); wo reads n_head d_v values; rope rotates d_rope values; attn_norm is its pre-norm */
    oxl_mla mla;
} oxl_layer;

/* What a layer's mixer is (the norms, residuals and FFN around it are the same for every kind; a mixer with
 * neither w_up nor experts has no FFN after it: mamba2, nemotron_h's Mamba-2 and attention blocks). A recurrent
 * kind keeps a fixed-size state per sequence in the state pool (oxl_state_pool) instead of KV: MAMBA2 its conv
 * and SSM states (layers/ssm.h), SHORTCONV its conv state (L - 1, n_embd) (layers/shortconv.h), DELTANET its
 * conv state and delta-rule state (layers/deltanet.h). MLA is attention whose cache row is the compressed latent
 * (layers/mla.h): its K pages hold [c | k_pe], and it reads its values from those same rows (never V). */
enum { OXL_LAYER_ATTENTION = 0, OXL_LAYER_MAMBA2 = 1, OXL_LAYER_SHORTCONV = 2, OXL_LAYER_DELTANET = 3,
       OXL_LAYER_FFN = 4,     /* FFN: no mixer, the block is x += ffn(ffn_norm(x)) (nemotron_h's MLP blocks) */
       OXL_LAYER_MLA = 5 };

/* How a router turns its logits into the chosen experts' weights (llama.cpp's expert_gating_func values):
 * SOFTMAX: softmax over all experts, the top k kept; SIGMOID: sigmoid of each, the top k kept;
 * SOFTMAX_WEIGHT: the top k logits, softmax over those. Then optional renormalisation and scale.
 * SPARSEMIXER (Phi-3.5-MoE, not a llama.cpp value; k = 2): the best logit, then the best of the others, each
 * weighted by its softmax over the logits within router_eps of it (relative: (best - l) / max(|l|, best) <=
 * 2 router_eps), as transformers' sparsemixer in eval mode. */
enum { OXL_GATING_SOFTMAX = 1, OXL_GATING_SIGMOID = 2, OXL_GATING_SOFTMAX_WEIGHT = 3, OXL_GATING_SPARSEMIXER = 4 };
#define OXL_MAX_EXPERTS 512

typedef struct {
    int n_embd, n_layer, n_vocab, n_ff_max, q_dim_max, kv_dim;
    int norm_type;          /* OXL_NORM_* for every norm */
    float norm_eps;
    const void *tok_embd;   /* (n_vocab, n_embd) of tok_embd_type */
    int tok_embd_type;
    float embd_scale;       /* 1, or sqrt(n_embd) for gemma */
    const void *pos_embd;   /* learned absolute positions (n_pos, n_embd) of pos_embd_type added to the token
                               embeddings (gpt2), or NULL; positions >= n_pos are refused */
    int pos_embd_type, n_pos;
    const float *embd_norm, *embd_norm_b;   /* a norm of the embeddings before the first layer (bloom), or NULL */
    const oxl_layer *layers;
    const float *out_norm, *out_norm_b;
    oxl_weight output;      /* (n_vocab, n_embd); may alias tok_embd */
    const float *output_b;  /* (n_vocab) added to the logits, or NULL (phimoe) */
    float final_softcap;    /* 0: none */
    float logit_scale;      /* 1 unless the architecture scales logits (command-r) */
    int n_expert_max, n_expert_used_max, n_ff_exp_max;   /* over the layers; 0 without experts */
    int ssm_d_in_proj_max, ssm_conv_dim_max, ssm_d_inner_max; /* over the Mamba-2 layers; 0 without */
    int64_t state_floats;   /* floats of one sequence's recurrent state (every recurrent layer's); 0: none */
    /* encoders (layers/encoder.h): learned absolute positions, the token-type-0 row and a norm after the
     * embeddings; non_causal: every token attends to all of its sequence's tokens of the call and before */
    const float *type_embd; /* (n_embd), or NULL */
    int non_causal;
} oxl_model;

/* Recurrent state shared by every sequence of a batch, beside the KV pages: n_slots slots of slot_floats
 * floats, a sequence's slot holding every recurrent layer's state at that layer's state_off (layers/ssm.h
 * for a Mamba-2 layer's share, layers/shortconv.h for LFM2's conv). A sequence whose pos0 is 0 starts from the
 * zero state (the forward clears its share); otherwise its slot must hold the state after its first pos0 tokens. */
typedef struct {
    float *data;            /* (n_slots, slot_floats) */
    int n_slots;
    int64_t slot_floats;    /* >= the model's state_floats */
} oxl_state_pool;

/* KV storage shared by every sequence of a batch, in pages of OXL_KV_PAGE positions. Per KV layer (each attention
 * layer's kv_layer; recurrent layers keep their state in the state pool instead), K and V are
 * (n_head_kv, n_pages, OXL_KV_PAGE, head_dim): page p of KV head g holds that head's rows of OXL_KV_PAGE
 * positions contiguously, and pages taken in order (a single sequence's identity block table) make each KV
 * head's rows one contiguous stream for attention. A sequence reaches its positions through a block table:
 * position t lives in page pages[t / OXL_KV_PAGE], row t % OXL_KV_PAGE. Every layer has the cache's n_head_kv
 * and head_dim (oxl_forward_batch checks). */
#define OXL_KV_PAGE 64

typedef struct {
    int type;        /* OXL_TYPE_F16, OXL_TYPE_F32 or OXL_TYPE_Q8_0 (head_dim / 32 blocks per row) */
    int n_pages;     /* pages per layer and KV head */
    int n_layer;     /* KV layers: one per attention layer of the model (oxl_layer.kv_layer) */
    int n_head_kv, head_dim;
    void **k, **v;   /* per layer: (n_head_kv, n_pages, OXL_KV_PAGE, one row of head_dim values of type) */
} oxl_kv_cache;

/* LoRA: a low-rank update of a layer's projection, y += scale * B (A x), computed next to the product with
 * A x first (rank-r work; W itself is never modified or copied). One adapter is, per layer and projection,
 * A (rank, cols) and B transposed (rank, rows), both f32, or a = NULL where it leaves the projection alone. */
enum { OXL_LORA_Q, OXL_LORA_K, OXL_LORA_V, OXL_LORA_O, OXL_LORA_GATE, OXL_LORA_UP, OXL_LORA_DOWN, OXL_LORA_SLOTS };
#define OXL_LORA_MAX_RANK 4096

typedef struct {
    const void *a;     /* (rank, cols of the projection) */
    const void *bt;    /* (rank, rows of the projection): B transposed */
    int rank;
    int type;          /* of a and bt: OXL_TYPE_F32, or OXL_TYPE_F16 (half the bytes read per token) */
} oxl_lora_weight;

typedef struct {
    const oxl_lora_weight *w;   /* n_layer * OXL_LORA_SLOTS entries: [layer][slot]; OXL_LORA_Q is the fused QKV,
                                   OXL_LORA_UP the fused gate|up where a layer has them */
    float scale;                /* the user's scale * alpha / rank (alpha / sqrt(rank) for rsLoRA) */
} oxl_lora;

/* One sequence's share of a batched forward: n_tokens new tokens at positions pos0 .. pos0 + n_tokens - 1,
 * after the pos0 positions its block table already holds. */
typedef struct {
    const int32_t *tokens;
    int n_tokens;
    int pos0;
    const int32_t *pages;   /* block table: n_blocks page ids, covering at least pos0 + n_tokens positions */
    int n_blocks;
    int all_logits;         /* logits of every new token, else of the last one only */
    const oxl_lora *loras;  /* the adapters applied to this sequence's rows (n_loras, may be 0), in order */
    int n_loras;
    int state_slot;         /* its recurrent state's slot (models with recurrent layers; one sequence each) */
} oxl_batch_seq;

/* Scratch bytes for forwards of up to n_batch tokens in all, attending over up to n_ctx positions. */
int64_t oxl_forward_scratch_size(const oxl_model *m, int n_batch, int n_ctx, int n_threads);

/* One step for n_seqs sequences: every weight matrix is read once for all their tokens; attention stays per
 * sequence. logits: (n_out, n_vocab), n_out = the sum over sequences of (all_logits ? n_tokens : 1), in
 * sequence order. hidden (optional): (n_tokens in all, n_embd) final normed hidden states, for embeddings.
 * The logits of a position depend only on the tokens up to it, bit for bit, whatever else is in the batch,
 * however its tokens were split into calls and whatever n_threads: every output element is summed in one
 * fixed order (matrix products per element as vec_dot; attention in fixed page tiles and position chunks
 * merged in position order; recurrent layers one token after another, layers/ssm.h, layers/shortconv.h).
 * rs: the recurrent state pool, NULL for a model without recurrent layers.
 * Returns OXL_OK or an OXL_ERR_* code (bad token id, page outside the pool, scratch too small, ...). */
int oxl_forward_batch(const oxl_model *m, const oxl_kv_cache *kv, const oxl_state_pool *rs,
                      const oxl_batch_seq *seqs, int n_seqs,
                      float *logits, float *hidden, void *scratch, int64_t scratch_size, int n_threads);

#endif
