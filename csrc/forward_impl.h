/* The forward's private state and the helpers its phases share (not installed, not for Cython).
 *
 * forward.c holds the scratch layout, the barrier, the phase list of each layer kind (layer_phases), the
 * embeddings, the logits and oxl_forward_batch with its checks; each layer kind's phases live in its own file
 * under layers/ (attention.c, ffn.c, moe.c, ssm.c, shortconv.c, deltanet.c, mla.c; LoRA's products in lora.c).
 * The helpers below are static inline: they run in every phase's inner loops (a copy per file keeps them
 * inlined as they were when everything was one file). */
#ifndef OXL_FORWARD_IMPL_H
#define OXL_FORWARD_IMPL_H

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "forward.h"
#include "matmul.h"

#define MAX_ACT_TYPES 3

/* Attention runs in tiles of one KV page (OXL_KV_PAGE positions) with an online softmax, the tiles grouped
 * into chunks of ATTN_CHUNK positions whose partial results (per query head: max m, sum l, unnormalized output
 * o) are folded in position order. Tiles and chunks are fixed on absolute positions, so a query's attention is
 * one fixed sequence of float operations whatever the call computing it: a step of a few rows (decode, a
 * speculative verify) spreads its (row, KV head, chunk) items over the threads and folds them afterwards;
 * a longer one (prefill) gives each thread whole (row, KV head) items and folds as it goes. */
#define ATTN_CHUNK (4 * OXL_KV_PAGE)
#define SPLIT_ATTN_MAX_ROWS 16
/* A longer step's rows of one sequence go in blocks whose query heads (rows x a KV head's group) number at most
 * this: each K and V tile is read and converted once for the whole block (attention.c: attn_block) */
#define ATTN_PACK_HEADS 16
static inline int attn_block_rows(int group) { return group >= ATTN_PACK_HEADS ? 1 : ATTN_PACK_HEADS / group; }
#define SPLIT_ATTN_MAX_FLOATS (8 << 20)   /* the split's partials: at most 32 MB, else items stay whole */

/* The scratch layout, computed the same way by the size query and by the forward. */
typedef struct {
    int64_t x, xn, q, k, v, attn, tmp, gate, up, act[MAX_ACT_TYPES], rope, tls, part, rows, rec, qgate, total;
    /* Qwen3-Next's DeltaNet: [q | k | v] in, the conv's output, z, [b | a] per key head, [beta | g], the output */
    int64_t dn_qkv, dn_conv, dn_z, dn_ba, dn_bg, dn_out;
    int64_t act_bytes, tls_floats, part_floats;
    /* experts: router logits, each (row, slot)'s expert, weight and gathered position, the gathered rows'
     * token rows, per expert its first gathered position, the used experts, the gathered inputs (one per
     * activation type of gate and up), gate, up, down's input and output, and the routed sum */
    int64_t r_logits, sel_exp, sel_w, sel_pos, g_row, exp_off, used, g_act[2], g_gate, g_up, g_hact, g_out, moe_out;
    /* Mamba-2: the input projection's rows [z | xBC | dt], the conv's output, the scan's output */
    int64_t ssm_zxbcdt, ssm_xbc, ssm_y;
    /* latent attention: wq_a's output, [c | k_pe], q [nope | pe] per head, the absorbed queries [q_abs | q_pe]
     * and the attention's latent outputs per head (r + d_rope each), the per-head products' inputs head-major */
    int64_t mla_qa, mla_kv, mla_q, mla_qabs, mla_lat, mla_act;
} scratch_layout;

static inline int64_t dn_conv_dim(const oxl_deltanet *d) { return 2 * (int64_t)d->n_k_heads * d->d_k + (int64_t)d->n_v_heads * d->d_v; }
static inline int64_t dn_value_dim(const oxl_deltanet *d) { return (int64_t)d->n_v_heads * d->d_v; }

/* ---- small helpers run by one thread on its share ---- */

static inline void norm_row(const oxl_kernel_table *kt, const oxl_model *m, const float *x, const float *w,
                            const float *b, float *y, int n) {
    if (!w) {   /* a block without this norm reads x itself (olmo2) */
        if (y != x) memcpy(y, x, (size_t)n * 4);
        return;
    }
    if (m->norm_type == OXL_NORM_LAYER) kt->ops.layer_norm(x, w, b, y, n, m->norm_eps);
    else kt->ops.rms_norm(x, w, y, n, m->norm_eps);
}

/* Activation buffers for the weights that read one input: distinct vec_dot types share nothing. */
typedef struct {
    int type[MAX_ACT_TYPES];
    void *buf[MAX_ACT_TYPES];
    int count;
} act_set;

static inline void act_set_init(act_set *a, const oxl_kernel_table *kt, char *base, const scratch_layout *s,
                                const oxl_weight *const *ws, int nw) {
    a->count = 0;
    for (int i = 0; i < nw; i++) {
        if (!ws[i] || !ws[i]->data) continue;
        const int vdt = kt->type[ws[i]->type].vec_dot_type;
        if (vdt == OXL_TYPE_F32) continue;
        int seen = 0;
        for (int j = 0; j < a->count; j++) seen |= a->type[j] == vdt;
        if (seen) continue;
        a->type[a->count] = vdt;
        a->buf[a->count] = base + s->act[a->count];
        a->count++;
    }
}

/* Quantize rows [r0, r1) of x (stride cols) into every activation type of the set. */
static inline void act_set_fill(const act_set *a, const oxl_kernel_table *kt, const float *x, int64_t cols, int r0, int r1) {
    for (int j = 0; j < a->count; j++) {
        const int64_t row = oxl_row_size(a->type[j], cols);
        for (int r = r0; r < r1; r++) kt->type[a->type[j]].from_float(x + (int64_t)r * cols, (char *)a->buf[j] + r * row, cols);
    }
}

static inline const void *act_for(const act_set *a, const oxl_kernel_table *kt, const oxl_weight *w, const float *x) {
    const int vdt = kt->type[w->type].vec_dot_type;
    if (vdt == OXL_TYPE_F32) return x;
    for (int j = 0; j < a->count; j++)
        if (a->type[j] == vdt) return a->buf[j];
    return NULL; /* unreachable when the set was built from the same weights */
}

/* Chunks of a product are handed out dynamically: a static half each left one thread waiting for
 * the other at every barrier whenever their speeds differed (a descheduled vCPU, a slower memory path),
 * which perf showed as a fifth of decode time spent spinning. A chunk is at least CHUNK_MIN_BYTES of
 * weights, so the atomic per chunk stays negligible, and at most CHUNKS_PER_THREAD per thread. */
#define CHUNKS_PER_THREAD 8
#define CHUNK_MIN_BYTES (32 << 10)

/* Y (n, ldy) [:, 0:rows) = X W^T, shared by the nth threads that all call this with the same `next`
 * (a counter zeroed before the parallel region, one per product of the forward). */
static inline void matmul_share(const oxl_kernel_table *kt, const oxl_weight *w, const void *xq, int n, float *Y,
                                int64_t ldy, atomic_int *next, int nth) {
    const int64_t align = n == 1 && !w->packed ? 4 : 16;   /* a repacked range starts at OXL_REPACK_ROW_ALIGN */
    const int64_t row_bytes = oxl_row_size(w->type, w->cols);
    int64_t n_chunks = OXL_MIN((int64_t)nth * CHUNKS_PER_THREAD, w->rows * row_bytes / CHUNK_MIN_BYTES);
    n_chunks = OXL_MIN(OXL_MAX(n_chunks, nth), (w->rows + align - 1) / align);
    for (int c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); c < n_chunks;
         c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        int64_t b, e;
        oxl_split_range(w->rows, (int)n_chunks, c, align, &b, &e);
        if (b >= e) continue;
        if (w->packed && !oxl_gemm_packed_range(kt, w->type, w->packed, w->cols, xq, n, Y, ldy, b, e)) continue;
        if (n == 1 && !kt->type[w->type].gemm_one_row) oxl_gemv_range(kt, w->type, w->data, w->cols, xq, Y, b, e);
        else oxl_gemm_range(kt, w->type, w->data, w->cols, xq, n, Y, ldy, b, e);
    }
}

/* a branch's output times the layer's residual scale (granite), before it joins the residual stream */
static inline void scale_residual(const oxl_layer *L, float *y, int n) {
    if (L->residual_scale == 0.0f || L->residual_scale == 1.0f) return;
    for (int i = 0; i < n; i++) y[i] *= L->residual_scale;
}

static inline void add_bias(float *y, const float *b, int n_rows, int cols, int64_t ld, int r0, int r1) {
    if (!b) return;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < cols; i++) y[(int64_t)r * ld + i] += b[i];
    (void)n_rows;
}

/* cos/sin for the n_rot/2 rotation pairs of one position, as ggml computes them (iterated theta). */
static inline void rope_cache(const oxl_rope *r, int pos, float *cs) {
    const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
    float theta = (float)pos;
    for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        float theta_interp = r->freq_scale * theta_extrap;
        float t = theta_interp, mscale = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            const float y = (i0 / 2 - r->corr_low) / OXL_MAX(0.001f, r->corr_high - r->corr_low);
            const float ramp = 1.0f - OXL_MIN(1.0f, OXL_MAX(0.0f, y));
            const float mix = ramp * r->ext_factor;
            t = theta_interp * (1 - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        cs[i0] = cosf(t) * mscale;
        cs[i0 + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

static inline void rope_apply(const oxl_rope *r, const float *cs, float *x) {
    if (r->mode == OXL_ROPE_NEOX) {
        const int half = r->n_rot / 2;
        for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
            const int i = i0 / 2;
            const float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cs[i0] - x1 * cs[i0 + 1];
            x[i + half] = x0 * cs[i0 + 1] + x1 * cs[i0];
        }
    } else {
        for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
            const float x0 = x[i0], x1 = x[i0 + 1];
            x[i0] = x0 * cs[i0] - x1 * cs[i0 + 1];
            x[i0 + 1] = x0 * cs[i0 + 1] + x1 * cs[i0];
        }
    }
}

/* bytes of one KV head's row of one position */
static inline int64_t kv_row_bytes(const oxl_kv_cache *kv) { return oxl_row_size(kv->type, kv->head_dim); }

/* row `row` of page `page` of KV head g within a layer's K or V */
static inline char *kv_row(const oxl_kv_cache *kv, void *layer_base, int g, int page, int row) {
    return (char *)layer_base + (((int64_t)g * kv->n_pages + page) * OXL_KV_PAGE + row) * kv_row_bytes(kv);
}

/* Per-thread buffers of attention, each for up to max(group, ATTN_PACK_HEADS) query heads: a tile's scores and
 * output, a running and a chunk partial, a block's queries packed */
typedef struct {
    float *scores, *tile, *state, *chunk, *qpack;
} attn_tls;

/* chunks of one expert's matrix of `rows` rows: each at least CHUNK_MIN_BYTES, 16-row aligned */
static inline int expert_chunks(const oxl_weight *w, int64_t rows, int nth) {
    const int64_t bytes = rows * oxl_row_size(w->type, w->cols);
    int64_t c = OXL_MIN((int64_t)nth * CHUNKS_PER_THREAD, bytes / CHUNK_MIN_BYTES);
    return (int)OXL_MIN(OXL_MAX(c, 1), (rows + 15) / 16);
}

/* ---- the phases ----
 *
 * A forward is a list of phases over one shared state: the embeddings, then per layer the phases its kind
 * lists (layer_phases), then the logits. Every thread runs every phase; a phase ends with the barrier(s) its
 * output needs before the next one reads it. A new layer kind is a new phase in that list. */

/* The barrier between the steps of a forward (forward.c): every thread of the region calls it, with its own
 * sense flag. */
typedef struct step_barrier step_barrier;
void oxl_fwd_barrier_wait(step_barrier *b, int *local_sense);

/* What every phase reads and writes, shared by the threads: the call, the scratch buffers, the batch rows. */
typedef struct {
    const oxl_model *m;
    const oxl_kv_cache *kv;
    const oxl_state_pool *rs;       /* recurrent state, or NULL */
    const oxl_batch_seq *seqs;
    int n_seqs;
    const int *seq_row0;            /* each sequence's first row */
    const oxl_kernel_table *kt;
    const scratch_layout *S;
    char *base;
    int n, n_out;                   /* rows of the step; rows that get logits */
    float *x, *xn, *tmp, *attn, *gate, *up, *qbuf, *kbuf, *vbuf, *parts, *logits, *hidden;
    const int *row_seq, *row_pos, *row_tok, *out_rows;   /* each row's sequence, position, token; logit rows */
    int64_t istride;                /* floats of one (row, KV head [, chunk]) attention partial */
    int any_lora;
    float *lt[3];                   /* LoRA's A x of up to three products of one phase */
    atomic_int *counters;           /* one work counter per product, taken in the same order by every thread */
    step_barrier *barrier;
} fwd_state;

/* One thread's view: its index and rows, its buffers, and what a layer's phases hand on to the next. */
typedef struct {
    int ith, nth, local_sense, call;
    int64_t t0, t1;                 /* this thread's rows */
    float *cs;                      /* RoPE cos/sin */
    attn_tls w;
    act_set acts;                   /* the quantized input of the next products */
    float *q, *k, *v;               /* the layer's Q, K, V rows (strided in a fused QKV) */
    int64_t ldq, ldk, ldv;
} fwd_thread;

typedef void (*fwd_phase)(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

static inline void sync_threads(const fwd_state *F, fwd_thread *T) {
    oxl_fwd_barrier_wait(F->barrier, &T->local_sense);
}

/* the slot floats of sequence s */
static inline float *seq_state(const fwd_state *F, int s) {
    return F->rs->data + (int64_t)F->seqs[s].state_slot * F->rs->slot_floats;
}

/* the next product's work counter */
static inline atomic_int *next_counter(const fwd_state *F, fwd_thread *T) { return &F->counters[T->call++]; }

/* ---- each layer kind's phases (fwd_phase), in its file under layers/ ---- */

/* layers/attention.c (also the norm before every mixer, and the output projection MLA shares) */
void oxl_fwd_phase_attn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_qkv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_attn_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
/* K or V rows of one position (n_head_kv * head_dim floats) into a layer of the paged cache */
void oxl_fwd_store_kv(const oxl_kv_cache *kv, const oxl_kernel_table *kt, void *layer_base, int page, int row,
                      const float *src);
/* out (n, n_head head_dim) = attention of the queries qsrc over the cache kv; ends with a barrier */
void oxl_fwd_attend(const fwd_state *F, fwd_thread *T, const oxl_layer *L, const oxl_kv_cache *kv, const float *qsrc,
                    float *out);

/* layers/ffn.c: the residual adds, the norms before an FFN, the dense FFN and its activations */
void oxl_fwd_phase_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_mixer_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_block_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ffn(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ffn_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
/* y (n) = the layer's activation of g, times u where gated (u NULL: ungated) */
void oxl_fwd_activate(const oxl_kernel_table *kt, const oxl_layer *L, const float *g, const float *u, float *y, int n);

/* layers/moe.c: the router, the experts and the shared expert */
void oxl_fwd_phase_experts(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

/* layers/ssm.c: Mamba-2 */
int oxl_fwd_check_mamba2(const oxl_model *m, const oxl_layer *L);
void oxl_fwd_phase_ssm_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ssm_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ssm_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ssm_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_ssm_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

/* layers/shortconv.c: LFM2's conv block */
int oxl_fwd_check_shortconv(const oxl_model *m, const oxl_layer *L);
void oxl_fwd_phase_shortconv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

/* layers/deltanet.c: Qwen3-Next's gated DeltaNet */
int oxl_fwd_check_deltanet(const oxl_model *m, const oxl_layer *L);
void oxl_fwd_phase_deltanet_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_deltanet_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_deltanet_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_deltanet_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

/* layers/mla.c: multi-head latent attention */
int oxl_fwd_check_mla(const oxl_model *m, const oxl_layer *L);
void oxl_fwd_phase_mla_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_mla_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);
void oxl_fwd_phase_mla_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

/* layers/lora.c: LoRA's products, riding on a base product's phase (lora.c: how they split) */
void oxl_fwd_lora_down(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
                       int slot, const oxl_weight *w, const float *x, int64_t ldx, float *t, int ith, int nth);
void oxl_fwd_lora_up(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
                     int slot, const oxl_weight *w, const float *t, float *Y, int64_t ldy, int ith, int nth);
int64_t oxl_fwd_lora_t_floats(const oxl_model *m, const oxl_batch_seq *seqs, int n_seqs);

#endif
