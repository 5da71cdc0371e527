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

/* scores (group, cnt) = attn_scale * (the group's query heads qg) . (the cnt consecutive K rows at K),
 * soft-capped where the layer says so */
static void group_scores(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, const char *K,
                         const float *qg, int cnt, float *scores) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_scores_f16_group(qg, group, (const oxl_half *)K, hd, cnt, hd, L->attn_scale, scores);
    } else if (kv->type == OXL_TYPE_Q8_0) {
        kt->ops.attn_scores_q8_0_group(qg, group, K, kv_row_bytes(kv), cnt, hd, L->attn_scale, scores);
    } else {
        const float *Kf = (const float *)K;
        for (int k = 0; k < group; k++)
            for (int t = 0; t < cnt; t++)
                scores[k * cnt + t] = L->attn_scale * kt->ops.dot_f32(qg + k * hd, Kf + (int64_t)t * hd, hd);
    }
    if (L->attn_softcap > 0.0f)
        for (int t = 0; t < group * cnt; t++) scores[t] = L->attn_softcap * tanhf(scores[t] / L->attn_softcap);
}

/* out (group, hd) = weights (group, cnt) . (the cnt consecutive V rows at V) */
static void group_values(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, const char *V,
                         const float *weights, int cnt, float *out) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_values_f16_group(weights, group, (const oxl_half *)V, hd, cnt, hd, out);
    } else if (kv->type == OXL_TYPE_Q8_0) {
        kt->ops.attn_values_q8_0_group(weights, group, V, kv_row_bytes(kv), cnt, hd, out);
    } else {
        const float *Vf = (const float *)V;
        memset(out, 0, (size_t)group * hd * 4);
        for (int k = 0; k < group; k++)
            for (int t = 0; t < cnt; t++) kt->ops.axpy(out + k * hd, weights[k * cnt + t], Vf + (int64_t)t * hd, hd);
    }
}

/* The partial (per query head of the group: m, l, o[hd]) of one chunk's positions [t_begin, t_end) for the
 * group of KV head g, walked in page tiles with an online softmax. pages: the sequence's block table. */
static void attn_chunk(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                       const int32_t *pages, const float *qg, int g, int pos, int t_begin, int t_end, float *part,
                       const attn_tls *w) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    const int64_t stride = hd + 2;
    for (int k = 0; k < group; k++) {
        part[k * stride] = -INFINITY;
        part[k * stride + 1] = 0.0f;
        memset(part + k * stride + 2, 0, (size_t)hd * 4);
    }
    for (int t0 = t_begin; t0 < t_end;) {
        const int row = t0 % OXL_KV_PAGE, cnt = OXL_MIN(OXL_KV_PAGE - row, t_end - t0);
        const int page = pages[t0 / OXL_KV_PAGE];
        group_scores(kt, L, kv, kv_row(kv, kv->k[layer], g, page, row), qg, cnt, w->scores);
        if (L->alibi_slopes)   /* the query at pos: key t0 + t is (pos - t0 - t) positions back */
            for (int k = 0; k < group; k++) {
                const float slope = L->alibi_slopes[g * group + k];
                for (int t = 0; t < cnt; t++) w->scores[k * cnt + t] += slope * (float)(t0 + t - pos);
            }
        float cs[group];   /* per head: how much the running output shrinks for the new max */
        for (int k = 0; k < group; k++) {
            float *ph = part + k * stride, *sk = w->scores + k * cnt;
            float m_tile = -INFINITY;
            for (int t = 0; t < cnt; t++) m_tile = sk[t] > m_tile ? sk[t] : m_tile;
            const float m_new = ph[0] > m_tile ? ph[0] : m_tile;
            cs[k] = expf(ph[0] - m_new);   /* 0 on the first tile (m = -inf) */
            ph[1] = ph[1] * cs[k] + kt->ops.exp_shift_sum(sk, cnt, m_new);
            ph[0] = m_new;
        }
        group_values(kt, L, kv, kv_row(kv, kv->v[layer], g, page, row), w->scores, cnt, w->tile);
        for (int k = 0; k < group; k++) {
            float *o = part + k * stride + 2;
            const float *tk = w->tile + k * hd;
            for (int d = 0; d < hd; d++) o[d] = o[d] * cs[k] + tk[d];
        }
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

/* Attention of one query row (position pos, query q (q_dim), block table pages) for KV head g, whole: its
 * chunks one after another, folded as they come. out: the row's (q_dim) output. */
static void attn_item(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                      const int32_t *pages, const float *q, int g, int pos, float *out, const attn_tls *w) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    const int lo = attn_lo(L, pos), n_chunks = attn_chunks(lo, pos);
    const float *qg = q + (int64_t)g * group * hd;
    for (int c = 0; c < n_chunks; c++) {
        int tb, te;
        chunk_span(lo, pos, c, &tb, &te);
        attn_chunk(kt, L, kv, layer, pages, qg, g, pos, tb, te, c == 0 ? w->state : w->chunk, w);
        if (c > 0) attn_fold(w->state, w->chunk, group, hd);
    }
    attn_finish(w->state, group, hd, L->attn_sinks ? L->attn_sinks + g * group : NULL, out + (int64_t)g * group * hd);
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
        /* (row, KV head) items one at a time: a causal item's cost grows with its position, so contiguous
         * shares would leave the first thread idle */
        for (int64_t it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < (int64_t)n * nkv;
             it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
            const int r = (int)(it / nkv), g = (int)(it % nkv);
            attn_item(kt, L, kv, L->kv_layer, F->seqs[row_seq[r]].pages, qsrc + (int64_t)r * q_dim, g, attn_hi(F, r),
                      out + (int64_t)r * q_dim, &T->w);
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
