/* Attention over the paged KV cache: the norm before a mixer, the Q, K, V products, RoPE and the cache stores,
 * the attention itself in fixed page tiles and chunks (forward_impl.h: ATTN_CHUNK), the output projection. */
#include "../forward_impl.h"

/* runs of a decode step's attention items a thread takes at once: its even share cut in this many */
#define ATTN_GRAINS_PER_THREAD 4

/* chunks a query at pos attends to, from the one holding its first position lo */
static inline int attn_chunks(int lo, int pos) { return pos / ATTN_CHUNK - lo / ATTN_CHUNK + 1; }

/* K or V rows of one position (n_head_kv * head_dim floats) into a layer of the paged cache */
void oxl_fwd_store_kv(const oxl_kv_cache *kv, const oxl_kernel_table *kt, void *layer_base, int page, int row,
                      const float *src) {
    const int hd = kv->head_dim;
    for (int g = 0; g < kv->n_head_kv; g++) {
        char *dst = kv_row(kv, layer_base, g, page, row);
        if (kv->type == OXL_TYPE_F16) kt->ops.fp32_to_fp16(src + g * hd, (oxl_half *)dst, hd);
        else if (kv->type == OXL_TYPE_Q8_0) kt->type[OXL_TYPE_Q8_0].from_float(src + g * hd, dst, hd);
        else memcpy(dst, src + g * hd, (size_t)hd * 4);
    }
}

/* the first cache position a query at `pos` attends to */
static inline int attn_lo(const oxl_layer *L, int pos) {
    return L->sliding_window > 0 ? OXL_MAX(0, pos - L->sliding_window + 1) : 0;
}

/* scores (G, cnt) = attn_scale * (G query heads qg, contiguous) . (the cnt consecutive K rows at K), soft-capped
 * where the layer says so: a GQA group's heads, or a block's rows' groups packed (every score depends on its own
 * query and K row only, kernels.h) */
static void group_scores(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, const char *K,
                         const float *qg, int G, int cnt, float *scores) {
    const int hd = L->head_dim;
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_scores_f16_group(qg, G, (const oxl_half *)K, hd, cnt, hd, L->attn_scale, scores);
    } else if (kv->type == OXL_TYPE_Q8_0) {
        kt->ops.attn_scores_q8_0_group(qg, G, K, kv_row_bytes(kv), cnt, hd, L->attn_scale, scores);
    } else {
        const float *Kf = (const float *)K;
        for (int k = 0; k < G; k++)
            for (int t = 0; t < cnt; t++)
                scores[k * cnt + t] = L->attn_scale * kt->ops.dot_f32(qg + k * hd, Kf + (int64_t)t * hd, hd);
    }
    if (L->attn_softcap > 0.0f)
        for (int t = 0; t < G * cnt; t++) scores[t] = L->attn_softcap * tanhf(scores[t] / L->attn_softcap);
}

/* out (G, hd) = weights (G, cnt) . (the cnt consecutive V rows at V) */
static void group_values(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, const char *V,
                         const float *weights, int G, int cnt, float *out) {
    const int hd = L->head_dim;
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_values_f16_group(weights, G, (const oxl_half *)V, hd, cnt, hd, out);
    } else if (kv->type == OXL_TYPE_Q8_0) {
        kt->ops.attn_values_q8_0_group(weights, G, V, kv_row_bytes(kv), cnt, hd, out);
    } else {
        const float *Vf = (const float *)V;
        memset(out, 0, (size_t)G * hd * 4);
        for (int k = 0; k < G; k++)
            for (int t = 0; t < cnt; t++) kt->ops.axpy(out + k * hd, weights[k * cnt + t], Vf + (int64_t)t * hd, hd);
    }
}

/* a partial (per query head: m, l, o[hd]) of `heads` heads, empty */
static void part_clear(float *part, int heads, int hd) {
    for (int k = 0; k < heads; k++) {
        part[k * (hd + 2)] = -INFINITY;
        part[k * (hd + 2) + 1] = 0.0f;
        memset(part + k * (hd + 2) + 2, 0, (size_t)hd * 4);
    }
}

/* the online softmax of one tile for the group's heads of a query at pos: scores sk (group, ld), cnt of them
 * used, ALiBi added, turned into weights; part's m and l updated; cs: per head, how much the running output
 * shrinks for the new max */
static void tile_softmax(const oxl_kernel_table *kt, const oxl_layer *L, int g, int pos, int t0, float *sk, int64_t ld,
                         int cnt, float *part, float *cs) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    const int64_t stride = hd + 2;
    if (L->alibi_slopes)   /* the query at pos: key t0 + t is (pos - t0 - t) positions back */
        for (int k = 0; k < group; k++) {
            const float slope = L->alibi_slopes[g * group + k];
            for (int t = 0; t < cnt; t++) sk[k * ld + t] += slope * (float)(t0 + t - pos);
        }
    for (int k = 0; k < group; k++) {
        float *ph = part + k * stride, *s = sk + k * ld;
        float m_tile = -INFINITY;
        for (int t = 0; t < cnt; t++) m_tile = s[t] > m_tile ? s[t] : m_tile;
        const float m_new = ph[0] > m_tile ? ph[0] : m_tile;
        cs[k] = expf(ph[0] - m_new);   /* 0 on the first tile (m = -inf) */
        ph[1] = ph[1] * cs[k] + kt->ops.exp_shift_sum(s, cnt, m_new);
        ph[0] = m_new;
    }
}

/* o = o * cs + tile for the group's heads of a partial */
static void part_rescale_add(float *part, const float *tile, const float *cs, int group, int hd) {
    for (int k = 0; k < group; k++) {
        float *o = part + k * (hd + 2) + 2;
        const float *tk = tile + k * hd;
        for (int d = 0; d < hd; d++) o[d] = o[d] * cs[k] + tk[d];
    }
}

/* The partial (per query head of the group: m, l, o[hd]) of one chunk's positions [t_begin, t_end) for the
 * group of KV head g, walked in page tiles with an online softmax. pages: the sequence's block table. */
static void attn_chunk(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                       const int32_t *pages, const float *qg, int g, int pos, int t_begin, int t_end, float *part,
                       const attn_tls *w) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    part_clear(part, group, hd);
    for (int t0 = t_begin; t0 < t_end;) {
        const int row = t0 % OXL_KV_PAGE, cnt = OXL_MIN(OXL_KV_PAGE - row, t_end - t0);
        const int page = pages[t0 / OXL_KV_PAGE];
        group_scores(kt, L, kv, kv_row(kv, kv->k[layer], g, page, row), qg, group, cnt, w->scores);
        float cs[group];
        tile_softmax(kt, L, g, pos, t0, w->scores, cnt, cnt, part, cs);
        group_values(kt, L, kv, kv_row(kv, kv->v[layer], g, page, row), w->scores, group, cnt, w->tile);
        part_rescale_add(part, w->tile, cs, group, hd);
        t0 += cnt;
    }
}

/* acc = acc (+) b: two partials of the same query heads over consecutive chunks, folded in position order */
static void attn_fold(float *acc, const float *b, int group, int hd) {
    const int64_t stride = hd + 2;
    for (int k = 0; k < group; k++) {
        float *pa = acc + k * stride;
        const float *pb = b + k * stride;
        const float mx = pa[0] > pb[0] ? pa[0] : pb[0];
        const float ca = expf(pa[0] - mx), cb = expf(pb[0] - mx);
        pa[0] = mx;
        pa[1] = pa[1] * ca + pb[1] * cb;
        for (int d = 0; d < hd; d++) pa[2 + d] = pa[2 + d] * ca + pb[2 + d] * cb;
    }
}

/* out (group, hd) = o / l of each head's folded partial; with sinks (the group's heads' sink logits), l first
 * gains exp(sink) on the partial's scale: o / (l + exp(sink - m)), computed at the larger of m and sink */
static void attn_finish(const float *part, int group, int hd, const float *sinks, float *out) {
    const int64_t stride = hd + 2;
    for (int k = 0; k < group; k++) {
        float inv = 1.0f / part[k * stride + 1];
        if (sinks) {
            const float m = part[k * stride], s = sinks[k], mx = m > s ? m : s, c = expf(m - mx);
            inv = c / (part[k * stride + 1] * c + expf(s - mx));
        }
        for (int d = 0; d < hd; d++) out[k * hd + d] = part[k * stride + 2 + d] * inv;
    }
}

/* The chunk range [c_begin, c_end) of positions [lo, pos] of chunk index c */
static inline void chunk_span(int lo, int pos, int c, int *t_begin, int *t_end) {
    const int c0 = (lo / ATTN_CHUNK + c) * ATTN_CHUNK;
    *t_begin = OXL_MAX(lo, c0);
    *t_end = OXL_MIN(pos + 1, c0 + ATTN_CHUNK);
}

/* Attention of nq rows of one sequence that share their first position lo (queries q + i ldq at positions pos[i],
 * outputs out + i ldo) for KV head g, each as attn_chunk's chunks folded in order: the rows' group heads are packed into
 * one group of nq * group heads, so each K and V tile is read (and converted) once for the block. A row's tiles
 * are the block's, cut at its own last position: each score and each output sum over a tile depend on their
 * own query and weights only (kernels.h), the softmax runs per row over its own keys, and a row whose tile is
 * cut short gets its own values call over its own keys, so every float is the one a row alone (a decode step's
 * split items) gets. */
static void attn_block(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                       const int32_t *pages, const float *q, int64_t ldq, const int *pos, int nq, int g, float *out,
                       int64_t ldo, const attn_tls *w) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv, heads = nq * group;
    const int64_t pstride = (int64_t)group * (hd + 2);   /* one row's partial */
    const int lo = attn_lo(L, pos[0]);
    int pmax = pos[0];
    for (int i = 0; i < nq; i++) {
        pmax = OXL_MAX(pmax, pos[i]);
        memcpy(w->qpack + (int64_t)i * group * hd, q + i * ldq + (int64_t)g * group * hd, (size_t)group * hd * 4);
    }
    const int n_chunks = attn_chunks(lo, pmax);
    for (int c = 0; c < n_chunks; c++) {
        int tb, te_max;
        chunk_span(lo, pmax, c, &tb, &te_max);
        float *part = c == 0 ? w->state : w->chunk;
        part_clear(part, heads, hd);
        for (int t0 = tb; t0 < te_max;) {
            const int row = t0 % OXL_KV_PAGE, cnt = OXL_MIN(OXL_KV_PAGE - row, te_max - t0);
            const int page = pages[t0 / OXL_KV_PAGE];
            const char *Vt = kv_row(kv, kv->v[layer], g, page, row);
            group_scores(kt, L, kv, kv_row(kv, kv->k[layer], g, page, row), w->qpack, heads, cnt, w->scores);
            float cs[heads];
            int cnt_i[nq];   /* each row's keys in this tile: cnt, fewer where its last position cuts it, or none */
            for (int i = 0; i < nq; i++) {
                cnt_i[i] = OXL_MIN(cnt, pos[i] + 1 - t0);
                if (cnt_i[i] > 0)
                    tile_softmax(kt, L, g, pos[i], t0, w->scores + (int64_t)i * group * cnt, cnt, cnt_i[i],
                                 part + i * pstride, cs + i * group);
            }
            /* runs of rows with the whole tile share one values call; a cut row has its own */
            for (int i = 0; i < nq;) {
                float *pi = w->scores + (int64_t)i * group * cnt, *ti = w->tile + (int64_t)i * group * hd;
                if (cnt_i[i] <= 0) {
                    i++;
                    continue;
                }
                if (cnt_i[i] < cnt) {   /* its weights (group, cnt_i) made contiguous in place */
                    for (int k = 1; k < group; k++)
                        memmove(pi + (int64_t)k * cnt_i[i], pi + (int64_t)k * cnt, (size_t)cnt_i[i] * 4);
                    group_values(kt, L, kv, Vt, pi, group, cnt_i[i], ti);
                    part_rescale_add(part + i * pstride, ti, cs + i * group, group, hd);
                    i++;
                    continue;
                }
                int j = i + 1;
                while (j < nq && cnt_i[j] == cnt) j++;
                group_values(kt, L, kv, Vt, pi, (j - i) * group, cnt, ti);
                for (; i < j; i++)
                    part_rescale_add(part + i * pstride, w->tile + (int64_t)i * group * hd, cs + i * group, group, hd);
            }
            t0 += cnt;
        }
        if (c > 0)   /* rows whose last position lies in this chunk or after it */
            for (int i = 0; i < nq; i++)
                if (pos[i] >= tb) attn_fold(w->state + i * pstride, w->chunk + i * pstride, group, hd);
    }
    for (int i = 0; i < nq; i++)
        attn_finish(w->state + i * pstride, group, hd, L->attn_sinks ? L->attn_sinks + g * group : NULL,
                    out + i * ldo + (int64_t)g * group * hd);
}

/* xn = norm(x); quantized for Q, K, V (or the recurrent block's input projection) */
void oxl_fwd_phase_attn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int n_embd = F->m->n_embd;
    const oxl_weight *qkv_ws[3] = {&L->wq, &L->wk, &L->wv};
    const oxl_weight *conv_ws[1] = {&L->conv.in_proj};
    const oxl_weight *dn_ws[3] = {&L->dn.wqkv, &L->dn.wgate, &L->dn.w_ba};
    const oxl_weight *mla_ws[3] = {&L->mla.wq, &L->mla.wq_a, &L->mla.wkv_a};
    if (L->kind == OXL_LAYER_MLA) act_set_init(&T->acts, F->kt, F->base, F->S, mla_ws, 3);
    else if (L->kind == OXL_LAYER_SHORTCONV) act_set_init(&T->acts, F->kt, F->base, F->S, conv_ws, 1);
    else if (L->kind == OXL_LAYER_DELTANET) act_set_init(&T->acts, F->kt, F->base, F->S, dn_ws, 3);
    else act_set_init(&T->acts, F->kt, F->base, F->S, qkv_ws, 3);
    for (int64_t i = T->t0; i < T->t1; i++)
        norm_row(F->kt, F->m, F->x + i * n_embd, L->attn_norm, L->attn_norm_b, F->xn + i * n_embd, n_embd);
    act_set_fill(&T->acts, F->kt, F->xn, n_embd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    (void)il;
}

/* Q, K, V projections: (n, q_dim), (n, kv_dim), (n, kv_dim), or one fused (n, q_dim + 2 kv_dim); LoRA */
void oxl_fwd_phase_qkv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int n = F->n, n_embd = F->m->n_embd, ith = T->ith, nth = T->nth;
    const int hd = L->head_dim, q_dim = L->n_head * hd, kv_dim = L->n_head_kv * hd;
    const int fused_qkv = L->wk.data == NULL;
    const float *xn = F->xn;
    T->q = F->qbuf, T->k = F->kbuf, T->v = F->vbuf;
    T->ldq = L->attn_gate ? 2 * q_dim : q_dim, T->ldk = kv_dim, T->ldv = kv_dim;   /* gated: [q | gate] per head */
    if (fused_qkv) {
        const int64_t ld = L->wq.rows;  /* q_dim + 2 kv_dim */
        matmul_share(kt, &L->wq, act_for(&T->acts, kt, &L->wq, xn), n, F->qbuf, ld, next_counter(F, T), nth);
        T->k = F->qbuf + q_dim;
        T->v = F->qbuf + q_dim + kv_dim;
        T->ldq = T->ldk = T->ldv = ld;
    } else {
        matmul_share(kt, &L->wq, act_for(&T->acts, kt, &L->wq, xn), n, T->q, T->ldq, next_counter(F, T), nth);
        matmul_share(kt, &L->wk, act_for(&T->acts, kt, &L->wk, xn), n, T->k, T->ldk, next_counter(F, T), nth);
        matmul_share(kt, &L->wv, act_for(&T->acts, kt, &L->wv, xn), n, T->v, T->ldv, next_counter(F, T), nth);
    }
    if (F->any_lora) {   /* the fused QKV where a layer has one */
        oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_Q, &L->wq, xn, n_embd, F->lt[0], ith, nth);
        if (!fused_qkv) {
            oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_K, &L->wk, xn, n_embd, F->lt[1], ith, nth);
            oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_V, &L->wv, xn, n_embd, F->lt[2], ith, nth);
        }
    }
    sync_threads(F, T);
    if (F->any_lora) {
        oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_Q, &L->wq, F->lt[0], T->q, T->ldq, ith, nth);
        if (!fused_qkv) {
            oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_K, &L->wk, F->lt[1], T->k, T->ldk, ith, nth);
            oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_V, &L->wv, F->lt[2], T->v, T->ldv, ith, nth);
        }
        sync_threads(F, T);
    }
}

/* LayerNorm (no bias) of each of n_heads heads of x in place, with the heads' own weights if the layer says so */
static void qk_layer_norm(const oxl_kernel_table *kt, const oxl_layer *L, const float *w, float *x, int n_heads,
                          float eps) {
    const int hd = L->head_dim;
    for (int h = 0; h < n_heads; h++)
        kt->ops.layer_norm(x + h * hd, w + (L->qk_norm_head_weights ? h * hd : 0), NULL, x + h * hd, hd, eps);
}

/* biases, per-head q/k norms, RoPE, then K and V into the cache; split by row */
void oxl_fwd_phase_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_kv_cache *kv = F->kv;
    const int hd = L->head_dim, q_dim = L->n_head * hd, kv_dim = L->n_head_kv * hd;
    const int fused_qkv = L->wk.data == NULL;
    const float eps = F->m->norm_eps;
    float *qgate = (float *)(F->base + F->S->qgate);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *qi = T->q + i * T->ldq, *ki = T->k + i * T->ldk, *vi = T->v + i * T->ldv;
        if (L->attn_gate) {   /* [q | gate] per head: q compacted into attn (as a fused QKV's), the gate aside */
            float *qc = F->attn + i * q_dim;
            for (int h = 0; h < L->n_head; h++) {
                memcpy(qc + h * hd, qi + 2 * h * hd, (size_t)hd * 4);
                memcpy(qgate + i * q_dim + h * hd, qi + 2 * h * hd + hd, (size_t)hd * 4);
            }
            qi = qc;
        }
        add_bias(qi, L->bq, 1, q_dim, 0, 0, 1);
        add_bias(ki, L->bk, 1, kv_dim, 0, 0, 1);
        add_bias(vi, L->bv, 1, kv_dim, 0, 0, 1);
        if (L->q_norm && L->qk_norm_full) kt->ops.rms_norm(qi, L->q_norm, qi, q_dim, eps);
        else if (L->q_norm && L->qk_norm_layer) qk_layer_norm(kt, L, L->q_norm, qi, L->n_head, eps);
        else if (L->q_norm)
            for (int h = 0; h < L->n_head; h++) kt->ops.rms_norm(qi + h * hd, L->q_norm, qi + h * hd, hd, eps);
        if (L->k_norm && L->qk_norm_full) kt->ops.rms_norm(ki, L->k_norm, ki, kv_dim, eps);
        else if (L->k_norm && L->qk_norm_layer) qk_layer_norm(kt, L, L->k_norm, ki, L->n_head_kv, eps);
        else if (L->k_norm)
            for (int h = 0; h < L->n_head_kv; h++) kt->ops.rms_norm(ki + h * hd, L->k_norm, ki + h * hd, hd, eps);
        if (L->rope.mode != OXL_ROPE_NONE) {
            rope_cache(&L->rope, F->row_pos[i], T->cs);
            for (int h = 0; h < L->n_head; h++) rope_apply(&L->rope, T->cs, qi + h * hd);
            for (int h = 0; h < L->n_head_kv; h++) rope_apply(&L->rope, T->cs, ki + h * hd);
        }
        const int p = F->row_pos[i], page = F->seqs[F->row_seq[i]].pages[p / OXL_KV_PAGE], prow = p % OXL_KV_PAGE;
        oxl_fwd_store_kv(kv, kt, kv->k[L->kv_layer], page, prow, ki);
        oxl_fwd_store_kv(kv, kt, kv->v[L->kv_layer], page, prow, vi);
        /* attention reads q contiguously: compact strided rows of a fused QKV */
        if (fused_qkv && !L->attn_gate) memmove(F->attn + i * q_dim, qi, (size_t)q_dim * 4);
    }
    sync_threads(F, T);
}

/* the last position row r attends to: its own (causal), or its sequence's last of the call (encoders) */
static inline int attn_hi(const fwd_state *F, int r) {
    if (!F->m->non_causal) return F->row_pos[r];
    const oxl_batch_seq *sq = &F->seqs[F->row_seq[r]];
    return sq->pos0 + sq->n_tokens - 1;
}

/* out (n, n_head head_dim) = attention of the queries qsrc (n, n_head head_dim) over the cache kv, in the fixed
 * tile and chunk order; ends with a barrier */
void oxl_fwd_attend(const fwd_state *F, fwd_thread *T, const oxl_layer *L, const oxl_kv_cache *kv, const float *qsrc,
                    float *out) {
    const oxl_kernel_table *kt = F->kt;
    const int n = F->n, ith = T->ith, nth = T->nth;
    const int hd = L->head_dim, q_dim = L->n_head * hd;
    const int *row_seq = F->row_seq;
    const int64_t istride = F->istride;
    float *parts = F->parts;
    const int group = L->n_head / L->n_head_kv, nkv = L->n_head_kv;
    /* items are handed out from a counter, as products' chunks are: a descheduled thread or rows of unequal
     * lengths (a server's sequences) leave no thread waiting at the barrier for a fixed share; which thread
     * computes an item changes none of its floats */
    atomic_int *next = next_counter(F, T);
    /* a few rows: (row, KV head, chunk) items over the threads, folded after a barrier, if their
     * partials fit; every thread computes the same item table */
    int item0[SPLIT_ATTN_MAX_ROWS + 1];
    int split = n <= SPLIT_ATTN_MAX_ROWS;
    if (split) {
        item0[0] = 0;
        for (int r = 0; r < n; r++)
            item0[r + 1] = item0[r] + nkv * attn_chunks(attn_lo(L, attn_hi(F, r)), attn_hi(F, r));
        split = (int64_t)item0[n] * istride <= F->S->part_floats;
    }
    if (split) {
        /* runs of ATTN_GRAINS_PER_THREAD-th of a thread's share: each thread streams whole runs of chunks
         * (the prefetcher follows), a few runs each */
        const int n_items = item0[n];
        const int grain = OXL_MAX(1, n_items / (nth * ATTN_GRAINS_PER_THREAD));
        for (int ib = grain * atomic_fetch_add_explicit(next, 1, memory_order_relaxed); ib < n_items;
             ib = grain * atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
            const int ie = OXL_MIN(n_items, ib + grain);
            int r = 0;
            while (ib >= item0[r + 1]) r++;
            for (int it = ib; it < ie; it++) {
                while (it >= item0[r + 1]) r++;
                const int p = attn_hi(F, r), lo = attn_lo(L, p), nc = attn_chunks(lo, p);
                const int g = (it - item0[r]) / nc, c = (it - item0[r]) % nc;
                int tb, te;
                chunk_span(lo, p, c, &tb, &te);
                attn_chunk(kt, L, kv, L->kv_layer, F->seqs[row_seq[r]].pages,
                           qsrc + (int64_t)r * q_dim + (int64_t)g * group * hd, g, p, tb, te,
                           parts + (int64_t)it * istride, &T->w);
            }
        }
        sync_threads(F, T);
        for (int pr = ith; pr < n * nkv; pr += nth) {
            const int r = pr / nkv, g = pr % nkv;
            const int nc = (item0[r + 1] - item0[r]) / nkv;
            float *acc = parts + (int64_t)(item0[r] + g * nc) * istride;
            for (int c = 1; c < nc; c++) attn_fold(acc, acc + (int64_t)c * istride, group, hd);
            attn_finish(acc, group, hd, L->attn_sinks ? L->attn_sinks + g * group : NULL,
                        out + (int64_t)r * q_dim + (int64_t)g * group * hd);
        }
    } else {
        /* (block of rows, KV head) items one at a time: a causal item's cost grows with its position, so
         * contiguous shares would leave the first thread idle. Blocks are fixed runs of attn_block_rows rows,
         * cut where the sequence or the first attended position changes. */
        const int nb = attn_block_rows(group), n_blocks = (n + nb - 1) / nb;
        for (int64_t it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < (int64_t)n_blocks * nkv;
             it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
            const int b = (int)(it / nkv), g = (int)(it % nkv), r_end = OXL_MIN(n, (b + 1) * nb);
            for (int r0 = b * nb, r1; r0 < r_end; r0 = r1) {
                int pos[ATTN_PACK_HEADS];
                pos[0] = attn_hi(F, r0);
                for (r1 = r0 + 1; r1 < r_end && row_seq[r1] == row_seq[r0]; r1++) {
                    pos[r1 - r0] = attn_hi(F, r1);
                    if (attn_lo(L, pos[r1 - r0]) != attn_lo(L, pos[0])) break;
                }
                attn_block(kt, L, kv, L->kv_layer, F->seqs[row_seq[r0]].pages, qsrc + (int64_t)r0 * q_dim, q_dim, pos,
                           r1 - r0, g, out + (int64_t)r0 * q_dim, q_dim, &T->w);
            }
        }
    }
    sync_threads(F, T);
}

/* attention over the cache: attn (n, q_dim) */
void oxl_fwd_phase_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int q_dim = L->n_head * L->head_dim;
    const int q_compact = L->wk.data == NULL || L->attn_gate;   /* q already in attn (phase_rope_store) */
    /* xn is free now; keep q and out apart */
    oxl_fwd_attend(F, T, L, F->kv, q_compact ? F->attn : T->q, q_compact ? F->xn : F->attn);
    (void)il;
    if (q_compact) {
        for (int64_t i = T->t0; i < T->t1; i++) memcpy(F->attn + i * q_dim, F->xn + i * q_dim, (size_t)q_dim * 4);
    }
}

/* output projection: tmp (n, n_embd) = attn wo^T; LoRA */
void oxl_fwd_phase_attn_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int n = F->n, n_embd = F->m->n_embd;
    const int q_dim = L->kind == OXL_LAYER_MLA ? L->n_head * L->mla.d_v : L->n_head * L->head_dim;
    const oxl_weight *wo_ws[1] = {&L->wo};
    act_set_init(&T->acts, kt, F->base, F->S, wo_ws, 1);
    if (L->attn_gate) {   /* attn *= sigmoid(gate) */
        const float *qgate = (const float *)(F->base + F->S->qgate);
        for (int64_t i = T->t0; i < T->t1; i++)
            for (int d = 0; d < q_dim; d++)
                F->attn[i * q_dim + d] *= 1.0f / (1.0f + expf(-qgate[i * q_dim + d]));
    }
    act_set_fill(&T->acts, kt, F->attn, q_dim, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    matmul_share(kt, &L->wo, act_for(&T->acts, kt, &L->wo, F->attn), n, F->tmp, n_embd, next_counter(F, T), T->nth);
    if (F->any_lora)
        oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_O, &L->wo, F->attn, q_dim, F->lt[0], T->ith, T->nth);
    sync_threads(F, T);
    if (F->any_lora) {
        oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_O, &L->wo, F->lt[0], F->tmp, n_embd, T->ith, T->nth);
        sync_threads(F, T);
    }
}
