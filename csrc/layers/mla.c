/* Multi-head latent attention's per-head products (layout and summation order in mla.h). */
#include <string.h>

#include "mla.h"
#include "../matmul.h"
#include "../forward_impl.h"

int64_t oxl_mla_act_row_size(int vdt, int64_t cols) {
    return vdt == OXL_TYPE_F32 ? cols * 4 : oxl_row_size(vdt, cols);
}

void oxl_mla_act_row(const oxl_kernel_table *kt, int vdt, const float *x, int64_t cols, void *dst) {
    if (vdt == OXL_TYPE_F32) memcpy(dst, x, (size_t)cols * 4);
    else kt->type[vdt].from_float(x, dst, cols);
}

void oxl_mla_head_range(const oxl_kernel_table *kt, int type, const void *W, int64_t rows_h, int64_t cols, int h,
                        const void *xq, int n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    const char *Wh = (const char *)W + (int64_t)h * rows_h * oxl_row_size(type, cols);
    if (n == 1 && !kt->type[type].gemm_one_row) oxl_gemv_range(kt, type, Wh, cols, xq, Y, r0, r1);
    else oxl_gemm_range(kt, type, Wh, cols, xq, n, Y, ldy, r0, r1);
}

/* ---- the forward's phases (forward_impl.h) ---- */

/* A latent attention layer's sizes against each other and its weights. */
int oxl_fwd_check_mla(const oxl_model *m, const oxl_layer *L) {
    const oxl_mla *a = &L->mla;
    const int64_t nh = L->n_head, r = a->kv_lora_rank, qk = (int64_t)a->d_nope + a->d_rope;
    if (nh <= 0 || L->n_head_kv != 1 || r <= 0 || a->d_nope <= 0 || a->d_rope <= 0 || a->d_rope % 2 ||
        a->d_v <= 0 || a->q_lora_rank < 0 || L->head_dim != r + a->d_rope || L->rope.n_rot != a->d_rope ||
        nh * a->d_v > m->q_dim_max) return OXL_ERR_SHAPE;
    if (!L->attn_norm || !a->kv_a_norm || !a->wkv_a.data || !a->wk_b.data || !a->wv_b.data || !L->wo.data ||
        (a->q_lora_rank ? !a->wq_a.data || !a->wq_b.data || !a->q_a_norm : !a->wq.data)) return OXL_ERR_ARG;
    const oxl_weight *wq = a->q_lora_rank ? &a->wq_b : &a->wq;
    if (a->q_lora_rank && (a->wq_a.rows != a->q_lora_rank || a->wq_a.cols != m->n_embd ||
                           a->wq_b.cols != a->q_lora_rank)) return OXL_ERR_SHAPE;
    if (!a->q_lora_rank && wq->cols != m->n_embd) return OXL_ERR_SHAPE;
    if (wq->rows != nh * qk || a->wkv_a.rows != r + a->d_rope || a->wkv_a.cols != m->n_embd ||
        a->wk_b.rows != nh * r || a->wk_b.cols != a->d_nope || a->wv_b.rows != nh * a->d_v || a->wv_b.cols != r ||
        L->wo.rows != m->n_embd || L->wo.cols != nh * a->d_v) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* kv (n, r + d_rope) = xn wkv_a^T; q (n, n_head (d_nope + d_rope)) = xn wq^T, or wq_b(rms_norm(xn wq_a^T)) */
void oxl_fwd_phase_mla_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_mla *a = &L->mla;
    const scratch_layout *S = F->S;
    const int n = F->n, nth = T->nth;
    float *kv = (float *)(F->base + S->mla_kv), *q = (float *)(F->base + S->mla_q);
    matmul_share(kt, &a->wkv_a, act_for(&T->acts, kt, &a->wkv_a, F->xn), n, kv, a->wkv_a.rows, next_counter(F, T), nth);
    if (a->q_lora_rank) {
        float *qa = (float *)(F->base + S->mla_qa);
        matmul_share(kt, &a->wq_a, act_for(&T->acts, kt, &a->wq_a, F->xn), n, qa, a->q_lora_rank, next_counter(F, T),
                     nth);
        sync_threads(F, T);
        const int vdt = kt->type[a->wq_b.type].vec_dot_type;
        const int64_t rb = oxl_mla_act_row_size(vdt, a->q_lora_rank);
        char *qa_act = F->base + S->mla_act;
        for (int64_t i = T->t0; i < T->t1; i++) {
            float *row = qa + i * a->q_lora_rank;
            kt->ops.rms_norm(row, a->q_a_norm, row, a->q_lora_rank, F->m->norm_eps);
            oxl_mla_act_row(kt, vdt, row, a->q_lora_rank, qa_act + i * rb);
        }
        sync_threads(F, T);
        matmul_share(kt, &a->wq_b, qa_act, n, q, a->wq_b.rows, next_counter(F, T), nth);
    } else {
        matmul_share(kt, &a->wq, act_for(&T->acts, kt, &a->wq, F->xn), n, q, a->wq.rows, next_counter(F, T), nth);
    }
    sync_threads(F, T);
    (void)il;
}

/* Y_h (n, rows_h) = x_h W_h^T for each head h < nh of the head-major weight w (rows_h rows a head), the threads
 * taking (head, row chunk) items off the phase's next counter: head h's n activation rows at xq + h n rb (rb
 * bytes each), its outputs at Y + h y_head, ldy floats a token apart. The chunks split rows only: each output's
 * sum is the kernel's, whatever the thread count. */
static void mla_heads(const fwd_state *F, fwd_thread *T, const oxl_weight *w, int nh, int64_t rows_h, const char *xq,
                      int64_t rb, float *Y, int64_t y_head, int64_t ldy) {
    const int n = F->n, c_h = expert_chunks(w, rows_h, T->nth);
    atomic_int *next = next_counter(F, T);
    for (int it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < nh * c_h;
         it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        const int h = it / c_h, ch = it % c_h;
        int64_t b, e;
        oxl_split_range(rows_h, c_h, ch, 16, &b, &e);
        if (b < e)
            oxl_mla_head_range(F->kt, w->type, w->data, rows_h, w->cols, h, xq + (int64_t)h * n * rb, n, Y + h * y_head,
                               ldy, b, e);
    }
}

/* per row: c RMS-normed, k_pe rotated, [c | k_pe] into the cache; each head's q_pe rotated into its absorbed query
 * [q_abs | q_pe] (qabs), its q_nope quantized head-major for wk_b; then q_abs_h = W_kb_h q_nope_h, the threads
 * taking (head, row chunk) items */
void oxl_fwd_phase_mla_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_mla *a = &L->mla;
    const scratch_layout *S = F->S;
    const int n = F->n, nh = L->n_head, r = a->kv_lora_rank, dn = a->d_nope, dr = a->d_rope;
    const int64_t qk = dn + dr, hd = L->head_dim, ld_abs = (int64_t)nh * hd;
    float *kv = (float *)(F->base + S->mla_kv), *q = (float *)(F->base + S->mla_q);
    float *qabs = (float *)(F->base + S->mla_qabs);
    char *qn_act = F->base + S->mla_act;
    const int vdt = kt->type[a->wk_b.type].vec_dot_type;
    const int64_t rb = oxl_mla_act_row_size(vdt, dn);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *c = kv + i * hd, *qi = q + i * nh * qk;
        kt->ops.rms_norm(c, a->kv_a_norm, c, r, F->m->norm_eps);
        rope_cache(&L->rope, F->row_pos[i], T->cs);
        rope_apply(&L->rope, T->cs, c + r);
        const int p = F->row_pos[i], page = F->seqs[F->row_seq[i]].pages[p / OXL_KV_PAGE], prow = p % OXL_KV_PAGE;
        oxl_fwd_store_kv(F->kv, kt, F->kv->k[L->kv_layer], page, prow, c);
        for (int h = 0; h < nh; h++) {
            float *pe = qabs + i * ld_abs + h * hd + r;
            memcpy(pe, qi + h * qk + dn, (size_t)dr * 4);
            rope_apply(&L->rope, T->cs, pe);
            oxl_mla_act_row(kt, vdt, qi + h * qk, dn, qn_act + ((int64_t)h * n + i) * rb);
        }
    }
    sync_threads(F, T);
    mla_heads(F, T, &a->wk_b, nh, r, qn_act, rb, qabs, hd, ld_abs);
    sync_threads(F, T);
    (void)il;
}

/* lat (n, n_head (r + d_rope)) = attention of the absorbed queries over the latent rows, which are the values too
 * (the cache's K pages read as V); then o_h = W_vb_h lat_h (the first r values of each head's output) into attn
 * (n, n_head d_v), the threads taking (head, row chunk) items */
void oxl_fwd_phase_mla_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_mla *a = &L->mla;
    const scratch_layout *S = F->S;
    const int n = F->n, nh = L->n_head, r = a->kv_lora_rank, dv = a->d_v;
    const int64_t hd = L->head_dim, ld_lat = (int64_t)nh * hd;
    float *lat = (float *)(F->base + S->mla_lat);
    oxl_kv_cache latent = *F->kv;
    latent.v = latent.k;
    oxl_fwd_attend(F, T, L, &latent, (const float *)(F->base + S->mla_qabs), lat);
    char *lat_act = F->base + S->mla_act;
    const int vdt = kt->type[a->wv_b.type].vec_dot_type;
    const int64_t rb = oxl_mla_act_row_size(vdt, r);
    for (int64_t i = T->t0; i < T->t1; i++)
        for (int h = 0; h < nh; h++) oxl_mla_act_row(kt, vdt, lat + i * ld_lat + h * hd, r, lat_act + ((int64_t)h * n + i) * rb);
    sync_threads(F, T);
    mla_heads(F, T, &a->wv_b, nh, dv, lat_act, rb, F->attn, dv, (int64_t)nh * dv);
    sync_threads(F, T);
    (void)il;
}
