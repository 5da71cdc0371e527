/* The fused forward pass: every layer of a batch of tokens in one OpenMP parallel region. Here: the scratch
 * layout, the barrier, the batch's checks, the embeddings, each layer kind's list of phases (layer_phases) and the
 * logits; the phases themselves live in layers/, one file per layer kind (forward_impl.h lists them). */
#include <math.h>
#include <stdlib.h>

#include "forward_impl.h"
#include "layers/encoder.h"

#if OXL_HAVE_OPENMP
#include <omp.h>
#endif
#include <sched.h>
#include <stdatomic.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OXL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define OXL_PAUSE() __asm__ volatile("yield")
#else
#define OXL_PAUSE() ((void)0)
#endif

/* The barrier between the steps of a forward. A short spin keeps the latency of an idle machine
 * (a step is often only microseconds of work), then the waiting thread yields its core: when other
 * processes compete for the cores, a thread spinning for the one that was descheduled would only
 * delay it (OpenMP's default long spin made a 2-thread decode 10x slower than 1 thread then). */
#define BARRIER_SPINS 2000

struct step_barrier {
    atomic_int count;
    atomic_int sense;
    int n;
};

void oxl_fwd_barrier_wait(step_barrier *b, int *local_sense) {
    if (b->n <= 1) return;
    const int s = !*local_sense;
    *local_sense = s;
    if (atomic_fetch_add(&b->count, 1) == b->n - 1) {
        atomic_store(&b->count, 0);
        atomic_store(&b->sense, s);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&b->sense, memory_order_acquire) != s) {
        if (++spins < BARRIER_SPINS) OXL_PAUSE();
        else sched_yield();
    }
}

#define ALIGN 64

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* Bytes of the largest activation row for `cols` values over every activation type. */
static int64_t max_act_row(int64_t cols) {
    const int types[] = {OXL_TYPE_Q8_0, OXL_TYPE_Q8_1, OXL_TYPE_Q8_K, OXL_TYPE_F32};
    int64_t best = 0;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        const oxl_type_traits *t = oxl_type_info(types[i]);
        const int64_t blocks = (cols + t->blck_size - 1) / t->blck_size;
        best = OXL_MAX(best, blocks * (int64_t)t->type_size);
    }
    return best;
}

/* the most query heads that share one KV head, over the layers */
static int group_max(const oxl_model *m) {
    int g = 1;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].n_head_kv > 0) g = OXL_MAX(g, m->layers[il].n_head / m->layers[il].n_head_kv);
    return g;
}

static int head_dim_max(const oxl_model *m) {
    int hd = 1;
    for (int il = 0; il < m->n_layer; il++) hd = OXL_MAX(hd, m->layers[il].head_dim);
    return hd;
}

/* floats of one (row, KV head) partial: (m, l, o[head_dim]) for each query head of the group */
static int64_t item_floats(const oxl_model *m) { return (int64_t)group_max(m) * (head_dim_max(m) + 2); }

/* floats per row a recurrent layer's phase needs: LFM2's conv, in_proj's [B | C | x] and the gated conv */
static int64_t rec_row_floats(const oxl_model *m) {
    int64_t f = 0;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].kind == OXL_LAYER_SHORTCONV) f = OXL_MAX(f, 4 * (int64_t)m->n_embd);
    return f;
}

static scratch_layout layout(const oxl_model *m, int n_batch, int n_ctx, int n_threads) {
    scratch_layout s;
    int64_t cd_max = 0, vd_max = 0, nv_max = 0, any_gate = 0;   /* DeltaNet widths; gated attention */
    for (int il = 0; il < m->n_layer; il++) {
        const oxl_layer *L = &m->layers[il];
        any_gate |= L->kind == OXL_LAYER_ATTENTION && L->attn_gate;
        if (L->kind != OXL_LAYER_DELTANET) continue;
        cd_max = OXL_MAX(cd_max, dn_conv_dim(&L->dn));
        vd_max = OXL_MAX(vd_max, dn_value_dim(&L->dn));
        nv_max = OXL_MAX(nv_max, L->dn.n_v_heads);
    }
    int64_t off = 0;
    const int64_t n = n_batch;
    const int64_t widest = OXL_MAX(OXL_MAX(OXL_MAX(OXL_MAX(m->n_embd, m->n_ff_max), m->q_dim_max),
                                           m->ssm_d_inner_max), vd_max);
    const int64_t G = group_max(m), hd = head_dim_max(m);
    int64_t mla_qa = 0, mla_kv = 0, mla_q = 0, mla_heads = 0, mla_act = 0;   /* per row */
    for (int il = 0; il < m->n_layer; il++) {
        const oxl_layer *L = &m->layers[il];
        if (L->kind != OXL_LAYER_MLA) continue;
        const oxl_mla *a = &L->mla;
        mla_qa = OXL_MAX(mla_qa, a->q_lora_rank);
        mla_kv = OXL_MAX(mla_kv, a->kv_lora_rank + a->d_rope);
        mla_q = OXL_MAX(mla_q, (int64_t)L->n_head * (a->d_nope + a->d_rope));
        mla_heads = OXL_MAX(mla_heads, (int64_t)L->n_head * (a->kv_lora_rank + a->d_rope));
        mla_act = OXL_MAX(mla_act, L->n_head * OXL_MAX(max_act_row(a->d_nope), max_act_row(a->kv_lora_rank)));
        mla_act = OXL_MAX(mla_act, max_act_row(a->q_lora_rank));
    }
#define TAKE(field, bytes) do { s.field = off; off += align_up(bytes); } while (0)
    TAKE(x, n * m->n_embd * 4);
    TAKE(xn, n * m->n_embd * 4);
    TAKE(q, n * OXL_MAX(m->q_dim_max, 1) * 4 * 3);  /* room for a fused QKV output */
    TAKE(k, n * m->kv_dim * 4);
    TAKE(v, n * m->kv_dim * 4);
    TAKE(attn, n * m->q_dim_max * 4);
    TAKE(tmp, n * m->n_embd * 4);
    TAKE(gate, n * m->n_ff_max * 4 * 2);           /* room for a fused gate|up output */
    TAKE(up, n * m->n_ff_max * 4);
    s.act_bytes = n * max_act_row(widest);
    for (int i = 0; i < MAX_ACT_TYPES; i++) TAKE(act[i], s.act_bytes);
    TAKE(rope, (int64_t)n_threads * 2 * OXL_MAX(m->q_dim_max, m->kv_dim) * 4);
    /* per thread, for H query heads: a tile's scores (H, page) and output (H, hd), a running and a chunk partial
     * (H, hd + 2), the packed queries (H, hd) */
    const int64_t H = OXL_MAX(G, ATTN_PACK_HEADS);
    s.tls_floats = H * OXL_KV_PAGE + H * hd + 2 * H * (hd + 2) + H * hd;
    TAKE(tls, (int64_t)n_threads * s.tls_floats * 4);
    int n_kv_max = 1;
    for (int il = 0; il < m->n_layer; il++) n_kv_max = OXL_MAX(n_kv_max, m->layers[il].n_head_kv);
    const int64_t items = OXL_MIN(n, SPLIT_ATTN_MAX_ROWS) * n_kv_max * (int64_t)(n_ctx / ATTN_CHUNK + 2);
    s.part_floats = OXL_MIN(items * item_floats(m), (int64_t)SPLIT_ATTN_MAX_FLOATS);
    TAKE(part, s.part_floats * 4);
    TAKE(rows, 4 * n * 4);   /* each row's sequence, position and token; the rows that get logits */
    TAKE(rec, n * rec_row_floats(m) * 4);
    TAKE(qgate, any_gate ? n * m->q_dim_max * 4 : 0);
    TAKE(dn_qkv, n * cd_max * 4);
    TAKE(dn_conv, n * cd_max * 4);
    TAKE(dn_z, n * vd_max * 4);
    TAKE(dn_ba, n * 2 * nv_max * 4);
    TAKE(dn_bg, n * 2 * nv_max * 4);
    TAKE(dn_out, n * vd_max * 4);
    const int64_t ne = m->n_expert_max, nk = n * m->n_expert_used_max, ffe = m->n_ff_exp_max;
    TAKE(r_logits, n * ne * 4);
    TAKE(sel_exp, nk * 4);
    TAKE(sel_w, nk * 4);
    TAKE(sel_pos, nk * 4);
    TAKE(g_row, nk * 4);
    TAKE(exp_off, (ne + 1) * 4);
    TAKE(used, (ne + 1) * 4);
    TAKE(g_act[0], nk * max_act_row(m->n_embd));
    TAKE(g_act[1], nk * max_act_row(m->n_embd));
    TAKE(g_gate, nk * ffe * 4);
    TAKE(g_up, nk * ffe * 4);
    TAKE(g_hact, nk * max_act_row(OXL_MAX(ffe, 1)));
    TAKE(g_out, nk * m->n_embd * 4);
    TAKE(moe_out, ne ? n * m->n_embd * 4 : 0);
    TAKE(ssm_zxbcdt, n * m->ssm_d_in_proj_max * 4);
    TAKE(ssm_xbc, n * m->ssm_conv_dim_max * 4);
    TAKE(ssm_y, n * m->ssm_d_inner_max * 4);
    TAKE(mla_qa, n * mla_qa * 4);
    TAKE(mla_kv, n * mla_kv * 4);
    TAKE(mla_q, n * mla_q * 4);
    TAKE(mla_qabs, n * mla_heads * 4);
    TAKE(mla_lat, n * mla_heads * 4);
    TAKE(mla_act, n * mla_act);
#undef TAKE
    s.total = off + ALIGN;
    return s;
}

int64_t oxl_forward_scratch_size(const oxl_model *m, int n_batch, int n_ctx, int n_threads) {
    if (!m || n_batch <= 0 || n_ctx <= 0 || n_threads <= 0) return -1;
    return layout(m, n_batch, n_ctx, n_threads).total;
}

/* ---- the forward ---- */

/* Validates the batch; n_rows: its tokens, n_out: rows that get logits, max_pos: the last position. */
static int check_batch(const oxl_model *m, const oxl_kv_cache *kv, const oxl_state_pool *rs,
                       const oxl_batch_seq *seqs, int n_seqs, int *n_rows, int *n_out, int *max_pos) {
    if (!m || !kv || !seqs || n_seqs <= 0 || !kv->k || !kv->v || kv->n_pages <= 0) return OXL_ERR_ARG;
    if (kv->type != OXL_TYPE_F16 && kv->type != OXL_TYPE_F32 && kv->type != OXL_TYPE_Q8_0) return OXL_ERR_TYPE;
    if (kv->head_dim <= 0 || kv_row_bytes(kv) < 0) return OXL_ERR_SHAPE;   /* Q8_0: head_dim a multiple of 32 */
    for (int il = 0; il < m->n_layer; il++) {   /* the cache's layout must be the attention layers' */
        const oxl_layer *L = &m->layers[il];
        if (L->kind == OXL_LAYER_ATTENTION) {
            if (L->n_head_kv != kv->n_head_kv || L->head_dim != kv->head_dim) return OXL_ERR_ARG;
            if (L->kv_layer < 0 || L->kv_layer >= kv->n_layer) return OXL_ERR_ARG;
            /* a gated layer's wq holds [q | gate] per head, beside separate K and V (and no Q bias) */
            if (L->attn_gate && (!L->wk.data || L->bq || L->wq.rows != 2 * (int64_t)L->n_head * L->head_dim))
                return OXL_ERR_SHAPE;
        } else if (L->kind == OXL_LAYER_MAMBA2) {
            const int rc = oxl_fwd_check_mamba2(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_SHORTCONV) {
            const int rc = oxl_fwd_check_shortconv(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_DELTANET) {
            const int rc = oxl_fwd_check_deltanet(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_MLA) {
            if (L->n_head_kv != kv->n_head_kv || L->head_dim != kv->head_dim) return OXL_ERR_ARG;
            if (L->kv_layer < 0 || L->kv_layer >= kv->n_layer) return OXL_ERR_ARG;
            const int rc = oxl_fwd_check_mla(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_FFN) {
            if (!L->w_up.data || !L->w_down.data || !L->ffn_norm) return OXL_ERR_ARG;
        } else {
            return OXL_ERR_ARG;
        }
    }
    if (m->state_floats > 0) {   /* recurrent layers: every sequence has its own slot */
        if (!rs || !rs->data || rs->n_slots <= 0 || rs->slot_floats < m->state_floats) return OXL_ERR_ARG;
        for (int s = 0; s < n_seqs; s++) {
            if (seqs[s].state_slot < 0 || seqs[s].state_slot >= rs->n_slots) return OXL_ERR_ARG;
            for (int t = 0; t < s; t++)
                if (seqs[t].state_slot == seqs[s].state_slot) return OXL_ERR_ARG;
        }
    }
    for (int il = 0; il < m->n_layer; il++) {   /* experts: the sizes the scratch was laid out for */
        const oxl_layer *L = &m->layers[il];
        if (L->n_expert == 0) continue;
        if (L->n_expert < 0 || L->n_expert > OXL_MAX_EXPERTS || L->n_expert > m->n_expert_max ||
            L->n_expert_used < 1 || L->n_expert_used > L->n_expert || L->n_expert_used > m->n_expert_used_max ||
            L->n_ff_exp < 1 || L->n_ff_exp > m->n_ff_exp_max) return OXL_ERR_SHAPE;
        if (!L->router.data || !L->exp_gate.data || !L->exp_up.data || !L->exp_down.data) return OXL_ERR_ARG;
        if (L->router.rows != L->n_expert || L->router.cols != m->n_embd ||
            L->exp_gate.rows != (int64_t)L->n_expert * L->n_ff_exp || L->exp_gate.cols != m->n_embd ||
            L->exp_up.rows != L->exp_gate.rows || L->exp_up.cols != m->n_embd ||
            L->exp_down.rows != (int64_t)L->n_expert * m->n_embd || L->exp_down.cols != L->n_ff_exp) return OXL_ERR_SHAPE;
        if (L->gating < OXL_GATING_SOFTMAX || L->gating > OXL_GATING_SPARSEMIXER) return OXL_ERR_ARG;
        if (L->gating == OXL_GATING_SPARSEMIXER && L->n_expert_used != 2) return OXL_ERR_ARG;
        if (L->n_group > 1 && (L->n_expert % L->n_group || L->n_group_used < 1 || L->n_group_used > L->n_group ||
                               (int64_t)L->n_group_used * (L->n_expert / L->n_group) < L->n_expert_used))
            return OXL_ERR_SHAPE;
    }
    int64_t rows = 0, outs = 0;
    int last = 0;
    for (int s = 0; s < n_seqs; s++) {
        const oxl_batch_seq *q = &seqs[s];
        if (!q->tokens || !q->pages || q->n_tokens <= 0 || q->pos0 < 0 || q->n_blocks <= 0) return OXL_ERR_ARG;
        const int64_t end = (int64_t)q->pos0 + q->n_tokens;
        if (end > (int64_t)q->n_blocks * OXL_KV_PAGE || end > INT32_MAX / 2) return OXL_ERR_SIZE;
        for (int64_t b = 0; b < (end + OXL_KV_PAGE - 1) / OXL_KV_PAGE; b++)
            if (q->pages[b] < 0 || q->pages[b] >= kv->n_pages) return OXL_ERR_ARG;
        for (int i = 0; i < q->n_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= m->n_vocab) return OXL_ERR_ARG;
        if (q->n_loras < 0 || (q->n_loras > 0 && !q->loras)) return OXL_ERR_ARG;
        for (int a = 0; a < q->n_loras; a++) {
            if (!q->loras[a].w) return OXL_ERR_ARG;
            for (int j = 0; j < m->n_layer * OXL_LORA_SLOTS; j++) {
                const oxl_lora_weight *lw = &q->loras[a].w[j];
                if (lw->a && (!lw->bt || lw->rank <= 0 || lw->rank > OXL_LORA_MAX_RANK ||
                              (lw->type != OXL_TYPE_F32 && lw->type != OXL_TYPE_F16))) return OXL_ERR_ARG;
            }
        }
        rows += q->n_tokens;
        outs += q->all_logits ? q->n_tokens : 1;
        last = OXL_MAX(last, (int)end - 1);
        if (m->pos_embd && end > m->n_pos) return OXL_ERR_SIZE;   /* no embedding for that position */
        if (rows > INT32_MAX / 2) return OXL_ERR_SIZE;
    }
    *n_rows = (int)rows;
    *n_out = (int)outs;
    *max_pos = last;
    return OXL_OK;
}

/* x[i] = embd[token of row i] * embd_scale */
static void phase_embed(const fwd_state *F, fwd_thread *T) {
    const oxl_model *m = F->m;
    const int n_embd = m->n_embd;
    const int64_t row = oxl_row_size(m->tok_embd_type, n_embd);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *xi = F->x + i * n_embd;
        F->kt->type[m->tok_embd_type].to_float((const char *)m->tok_embd + F->row_tok[i] * row, xi, n_embd);
        if (m->embd_scale != 1.0f)
            for (int j = 0; j < n_embd; j++) xi[j] *= m->embd_scale;
        if (m->type_embd || m->pos_embd) {   /* + the token-type-0 row (encoders) then the learned position's
                                                embedding (gpt2, bert), via xn (free until the first norm) */
            float *pi = NULL;
            if (m->pos_embd) {
                pi = F->xn + i * n_embd;
                const int64_t prow = oxl_row_size(m->pos_embd_type, n_embd);
                F->kt->type[m->pos_embd_type].to_float((const char *)m->pos_embd + F->row_pos[i] * prow, pi, n_embd);
            }
            oxl_encoder_embd_add(xi, m->type_embd, pi, n_embd);
        }
        if (m->embd_norm) norm_row(F->kt, m, xi, m->embd_norm, m->embd_norm_b, xi, n_embd);
    }
}

/* The phases of one layer, in order; returns how many. */
#define MAX_LAYER_PHASES 12
static int layer_phases(const oxl_layer *L, fwd_phase *ph) {
    int k = 0;
    if (L->kind == OXL_LAYER_MAMBA2) {
        ph[k++] = oxl_fwd_phase_ssm_norm;
        ph[k++] = oxl_fwd_phase_ssm_in;
        ph[k++] = oxl_fwd_phase_ssm_conv;
        ph[k++] = oxl_fwd_phase_ssm_scan;
        ph[k++] = oxl_fwd_phase_ssm_out;
    } else if (L->kind == OXL_LAYER_SHORTCONV) {
        ph[k++] = oxl_fwd_phase_attn_norm;
        ph[k++] = oxl_fwd_phase_shortconv;
    } else if (L->kind == OXL_LAYER_DELTANET) {
        ph[k++] = oxl_fwd_phase_attn_norm;
        ph[k++] = oxl_fwd_phase_deltanet_in;
        ph[k++] = oxl_fwd_phase_deltanet_conv;
        ph[k++] = oxl_fwd_phase_deltanet_scan;
        ph[k++] = oxl_fwd_phase_deltanet_out;
    } else if (L->kind == OXL_LAYER_MLA) {
        ph[k++] = oxl_fwd_phase_attn_norm;
        ph[k++] = oxl_fwd_phase_mla_in;
        ph[k++] = oxl_fwd_phase_mla_rope_store;
        ph[k++] = oxl_fwd_phase_mla_attention;
        ph[k++] = oxl_fwd_phase_attn_out;
    } else if (L->kind == OXL_LAYER_ATTENTION) {
        ph[k++] = oxl_fwd_phase_attn_norm;
        ph[k++] = oxl_fwd_phase_qkv;
        ph[k++] = oxl_fwd_phase_rope_store;
        ph[k++] = oxl_fwd_phase_attention;
        ph[k++] = oxl_fwd_phase_attn_out;
    }
    if (L->kind == OXL_LAYER_FFN) {   /* no mixer: the FFN reads x itself, normed */
        ph[k++] = oxl_fwd_phase_block_ffn_norm;
        ph[k++] = oxl_fwd_phase_ffn;
        ph[k++] = oxl_fwd_phase_ffn_residual;
        return k;
    }
    if (!L->w_up.data && L->n_expert == 0) {   /* no FFN after the mixer (mamba2, nemotron_h) */
        if (L->kind == OXL_LAYER_ATTENTION)   /* Mamba-2's ssm_out adds its own */
            ph[k++] = oxl_fwd_phase_mixer_residual;
        return k;
    }
    ph[k++] = oxl_fwd_phase_ffn_norm;
    if (L->n_expert > 0) {
        ph[k++] = oxl_fwd_phase_experts;   /* with the shared expert, if any */
    } else {
        ph[k++] = oxl_fwd_phase_ffn;
    }
    ph[k++] = oxl_fwd_phase_ffn_residual;
    return k;
}

/* final norm: of every row into `hidden` if asked, and of the rows that get logits (compacted in xn), then
 * logits = xn output^T, soft-capped and scaled where the model says so */
static void phase_logits(const fwd_state *F, fwd_thread *T) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_model *m = F->m;
    const int n_embd = m->n_embd, n_out = F->n_out, ith = T->ith, nth = T->nth;
    float *xn = F->xn, *hidden = F->hidden, *logits = F->logits;
    const oxl_weight *out_ws[1] = {&m->output};
    act_set_init(&T->acts, kt, F->base, F->S, out_ws, 1);
    if (hidden) {
        for (int64_t i = T->t0; i < T->t1; i++) {
            if (m->out_norm) norm_row(kt, m, F->x + i * n_embd, m->out_norm, m->out_norm_b, hidden + i * n_embd, n_embd);
            else memcpy(hidden + i * n_embd, F->x + i * n_embd, (size_t)n_embd * 4);   /* encoders: no final norm */
        }
        sync_threads(F, T);
    }
    if (!logits) return;
    int64_t ob, oe;
    oxl_split_range(n_out, nth, ith, 1, &ob, &oe);
    for (int64_t o = ob; o < oe; o++) {
        const int64_t r = F->out_rows[o];
        if (hidden) memcpy(xn + o * n_embd, hidden + r * n_embd, (size_t)n_embd * 4);
        else if (m->out_norm) norm_row(kt, m, F->x + r * n_embd, m->out_norm, m->out_norm_b, xn + o * n_embd, n_embd);
        else memcpy(xn + o * n_embd, F->x + r * n_embd, (size_t)n_embd * 4);
    }
    act_set_fill(&T->acts, kt, xn, n_embd, (int)ob, (int)oe);
    sync_threads(F, T);
    matmul_share(kt, &m->output, act_for(&T->acts, kt, &m->output, xn), n_out, logits, m->n_vocab,
                 next_counter(F, T), nth);
    if (m->final_softcap > 0.0f || m->logit_scale != 1.0f || m->output_b) {
        sync_threads(F, T);
        int64_t b, e;
        oxl_split_range((int64_t)n_out * m->n_vocab, nth, ith, 64, &b, &e);
        const float c = m->final_softcap, sc = m->logit_scale;
        for (int64_t i = b; i < e; i++) {
            float l = (m->output_b ? logits[i] + m->output_b[i % m->n_vocab] : logits[i]) * sc;
            if (c > 0.0f) l = c * tanhf(l / c);
            logits[i] = l;
        }
    }
}

/* One thread's whole forward: embeddings, each layer's phases, logits. */
static void forward_thread(const fwd_state *F, int ith, int nth) {
    const oxl_model *m = F->m;
    fwd_thread T;
    memset(&T, 0, sizeof(T));
    T.ith = ith;
    T.nth = nth;
    T.cs = (float *)(F->base + F->S->rope) + (int64_t)ith * 2 * OXL_MAX(m->q_dim_max, m->kv_dim);
    const int G = group_max(m), hd = head_dim_max(m);
    const int64_t H = OXL_MAX(G, ATTN_PACK_HEADS);
    T.w.scores = (float *)(F->base + F->S->tls) + (int64_t)ith * F->S->tls_floats;
    T.w.tile = T.w.scores + H * OXL_KV_PAGE;
    T.w.state = T.w.tile + H * hd;
    T.w.chunk = T.w.state + H * (hd + 2);
    T.w.qpack = T.w.chunk + H * (hd + 2);
    oxl_split_range(F->n, nth, ith, 1, &T.t0, &T.t1);

    phase_embed(F, &T);
    fwd_phase phases[MAX_LAYER_PHASES];
    for (int il = 0; il < m->n_layer; il++) {
        const oxl_layer *L = &m->layers[il];
        const int k = layer_phases(L, phases);
        for (int p = 0; p < k; p++) phases[p](F, &T, L, il);
    }
    phase_logits(F, &T);
}

int oxl_forward_batch(const oxl_model *m, const oxl_kv_cache *kv, const oxl_state_pool *rs,
                      const oxl_batch_seq *seqs, int n_seqs,
                      float *logits, float *hidden, void *scratch_raw, int64_t scratch_size, int n_threads) {
    int n = 0, n_out = 0, max_pos = 0;
    int rc = check_batch(m, kv, rs, seqs, n_seqs, &n, &n_out, &max_pos);
    if (rc) return rc;
    if (n_threads < 1) n_threads = 1;
    const scratch_layout S = layout(m, n, max_pos + 1, n_threads);
    if (!scratch_raw || scratch_size < S.total) return OXL_ERR_SIZE;
    char *base = (char *)(((uintptr_t)scratch_raw + ALIGN - 1) / ALIGN * ALIGN);

    /* the rows of the batch: sequence by sequence, token by token */
    int *row_seq = (int *)(base + S.rows), *row_pos = row_seq + n, *row_tok = row_seq + 2 * n;
    int *out_rows = row_seq + 3 * n;   /* rows whose logits are wanted, in output order */
    for (int s = 0, r = 0, o = 0; s < n_seqs; s++)
        for (int i = 0; i < seqs[s].n_tokens; i++, r++) {
            row_seq[r] = s;
            row_pos[r] = seqs[s].pos0 + i;
            row_tok[r] = seqs[s].tokens[i];
            if (seqs[s].all_logits || i == seqs[s].n_tokens - 1) out_rows[o++] = r;
        }
    int any_lora = 0;
    for (int s = 0; s < n_seqs; s++) any_lora |= seqs[s].n_loras > 0;
    int *seq_row0 = malloc((size_t)n_seqs * sizeof(int));
    if (!seq_row0) return OXL_ERR_NOMEM;
    for (int s = 0, r = 0; s < n_seqs; r += seqs[s].n_tokens, s++) seq_row0[s] = r;
    /* LoRA's A x of up to three products of one phase (q, k, v; gate, up), for every row's adapters */
    const int64_t lt = any_lora ? oxl_fwd_lora_t_floats(m, seqs, n_seqs) : 0;
    float *lora_t = NULL;
    if (lt > 0 && !(lora_t = malloc((size_t)(3 * lt) * sizeof(float)))) {
        free(seq_row0);
        return OXL_ERR_NOMEM;
    }

    /* one work counter per product and per attention: at most 13 per layer (q, k, v, attention, o, gate, up,
     * down; the experts' router, gate|up, down; latent attention's q_a, q_b, kv_a, k_b, v_b, attention, o) and
     * the output; 16 leaves room */
    const int n_counters = m->n_layer * 16 + 1;
    atomic_int counters[n_counters];
    for (int i = 0; i < n_counters; i++) atomic_init(&counters[i], 0);

    step_barrier barrier;
    atomic_init(&barrier.count, 0);
    atomic_init(&barrier.sense, 0);
    barrier.n = 1;

    fwd_state F = {
        .m = m, .kv = kv, .rs = m->state_floats > 0 ? rs : NULL, .seqs = seqs, .n_seqs = n_seqs,
        .seq_row0 = seq_row0, .kt = oxl_kernels(), .S = &S, .base = base, .n = n, .n_out = n_out,
        .x = (float *)(base + S.x), .xn = (float *)(base + S.xn), .tmp = (float *)(base + S.tmp),
        .attn = (float *)(base + S.attn), .gate = (float *)(base + S.gate), .up = (float *)(base + S.up),
        .qbuf = (float *)(base + S.q), .kbuf = (float *)(base + S.k), .vbuf = (float *)(base + S.v),
        .parts = (float *)(base + S.part), .logits = logits, .hidden = hidden,
        .row_seq = row_seq, .row_pos = row_pos, .row_tok = row_tok, .out_rows = out_rows,
        .istride = item_floats(m), .any_lora = any_lora,
        .lt = {lora_t, lora_t ? lora_t + lt : NULL, lora_t ? lora_t + 2 * lt : NULL},
        .counters = counters, .barrier = &barrier,
    };
#if OXL_HAVE_OPENMP
#pragma omp parallel num_threads(n_threads)
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
#pragma omp single
        barrier.n = nth;  /* the runtime may give fewer threads than asked; single ends in a barrier */
        forward_thread(&F, ith, nth);
    }
#else
    forward_thread(&F, 0, 1);
#endif
    free(lora_t);
    free(seq_row0);
    return OXL_OK;
}
