/* Mixture of experts: the router (softmax, sigmoid or sparsemixer gating, selection bias, expert groups) and
 * the grouped expert products, the shared expert's sum. */
#include "../forward_impl.h"

/* ---- sparse experts ----
 *
 * As ggml-cpu's mul_mat_id: the router picks each row's k experts; the step's (row, expert) pairs are
 * bucketed by expert once (expert order, rows in order within one); each chosen expert's gate, up and down
 * rows are then read once for all of its rows by the ordinary multi-row kernel, the threads taking
 * (expert, row chunk) items from one counter; experts nobody chose are never touched. The plan repacks the
 * stacked experts like any other matrix where each expert is whole groups of OXL_REPACK_ROW_ALIGN rows
 * (ForwardPlan): a few rows per expert, the common case of a batch, are then what the repacked kernels do
 * best, and one row reads the copy as fast as a dense matrix. Each product element is
 * the float vec_dot gives for it (matmul.h), and a row's output is its experts' outputs summed in the order
 * the router ranked them, so a token's result does not depend on the other rows of the step or the threads. */

/* rows [r0, r1) of the expert product Y (n, ldy) = X W_e^T, W_e = rows [e * rows_e, (e + 1) * rows_e) of w; from
 * the repacked copy where the plan made one (r0 a multiple of OXL_REPACK_ROW_ALIGN, as the callers split, and
 * rows_e one too, so that each expert's rows are whole interleaved groups: the same floats as the file's rows) */
static void expert_range(const oxl_kernel_table *kt, const oxl_weight *w, int64_t rows_e, int e, const void *xq,
                         int n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    if (w->packed && rows_e % OXL_REPACK_ROW_ALIGN == 0) {
        const char *Pe = (const char *)w->packed + (int64_t)e * rows_e * oxl_repacked_row_size(kt, w->type, w->cols);
        if (!oxl_gemm_packed_range(kt, w->type, Pe, w->cols, xq, n, Y, ldy, r0, r1)) return;
    }
    const char *We = (const char *)w->data + (int64_t)e * rows_e * oxl_row_size(w->type, w->cols);
    if (n == 1 && !kt->type[w->type].gemm_one_row) oxl_gemv_range(kt, w->type, We, w->cols, xq, Y, r0, r1);
    else oxl_gemm_range(kt, w->type, We, w->cols, xq, n, Y, ldy, r0, r1);
}

/* sparsemixer's weight of the best remaining logit l[best] (the taken ones -inf): its softmax over the logits
 * close enough to it, 1 / sum over e of exp(l[e] - l[best]) for (l[best] - l[e]) / max(|l[e]|, l[best]) <= 2 eps */
static float sparsemixer_weight(const float *l, int ne, int best, float eps) {
    const float mx = l[best];
    float sum = 0.0f;
    for (int e = 0; e < ne; e++) {
        const float a = fabsf(l[e]), factor = a > mx ? a : mx;
        if (l[e] != -INFINITY && !((mx - l[e]) / factor > 2.0f * eps)) sum += expf(l[e] - mx);
    }
    return 1.0f / sum;
}

/* Group-limited routing (DeepSeek-V2/V3, llama.cpp's n_expert_groups): a group's score is, for V3's sigmoid router
 * ("noaux_tc"), the sum of its two best selection scores (its one where a group has one expert), for V2's softmax
 * router ("group_limited_greedy") its best score, as DeepSeek's and transformers' code rank them (llama.cpp
 * 0.3.36 sums the two best for V2 too); the n_group_used best groups (ties to the lower index) keep their
 * experts' scores, the others' become -inf. */
static void route_groups(const oxl_layer *L, float *sc) {
    const int ng = L->n_group, per = L->n_expert / ng;
    float gs[OXL_MAX_EXPERTS];
    int keep[OXL_MAX_EXPERTS];
    for (int g = 0; g < ng; g++) {
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (sc[e] > b1) { b2 = b1; b1 = sc[e]; }
            else if (sc[e] > b2) b2 = sc[e];
        }
        gs[g] = per > 1 && L->gating == OXL_GATING_SIGMOID ? b1 + b2 : b1;
        keep[g] = 0;
    }
    for (int j = 0; j < L->n_group_used; j++) {
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
        keep[best] = 1;
    }
    for (int g = 0; g < ng; g++)
        if (!keep[g])
            for (int e = g * per; e < (g + 1) * per; e++) sc[e] = -INFINITY;
}

/* The router's choice for one row: sel (k experts, best first, ties to the lower index) and their weights. */
static void route_row(const oxl_layer *L, float *logits, int32_t *sel, float *w) {
    const int ne = L->n_expert, k = L->n_expert_used;
    float *p = logits;   /* probabilities in place */
    if (L->gating == OXL_GATING_SPARSEMIXER) {   /* k == 2 (checked when the plan is built) */
        for (int j = 0; j < k; j++) {
            int best = 0;
            for (int e = 1; e < ne; e++) best = p[e] > p[best] ? e : best;
            sel[j] = best;
            w[j] = sparsemixer_weight(p, ne, best, L->router_eps);
            p[best] = -INFINITY;
        }
        return;
    }
    if (L->gating == OXL_GATING_SIGMOID) {
        for (int e = 0; e < ne; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
    } else if (L->gating == OXL_GATING_SOFTMAX) {
        float mx = -INFINITY, sum = 0.0f;
        for (int e = 0; e < ne; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < ne; e++) sum += (p[e] = expf(p[e] - mx));
        const float inv = 1.0f / sum;
        for (int e = 0; e < ne; e++) p[e] *= inv;
    }
    /* the choice is made on sc: the probabilities, or plus the selection bias (DeepSeek-V3's, lfm2moe's) and
     * within the best groups; the weights are the probabilities */
    float biased[OXL_MAX_EXPERTS];
    const float *sc = p;
    if (L->sel_bias || L->n_group > 1) {
        for (int e = 0; e < ne; e++) biased[e] = p[e] + (L->sel_bias ? L->sel_bias[e] : 0.0f);
        if (L->n_group > 1) route_groups(L, biased);
        sc = biased;
    }
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < ne; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || sc[e] > sc[best])) best = e;
        }
        sel[j] = best;
        w[j] = p[best];
    }
    if (L->gating == OXL_GATING_SOFTMAX_WEIGHT) {   /* softmax over the chosen logits (sel[0] is the largest) */
        float sum = 0.0f;
        const float mx = w[0];
        for (int j = 0; j < k; j++) sum += (w[j] = expf(w[j] - mx));
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (L->norm_topk) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += w[j];
        sum = OXL_MAX(sum, 6.103515625e-5f);   /* as llama.cpp clamps it */
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (L->expert_scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= L->expert_scale;
}

/* beside a shared expert: tmp = routed + sigmoid(shexp_gate . xn) * shared (or + shared without the gate), rows
 * [r0, r1) */
static void shared_expert_sum(const fwd_state *F, const oxl_layer *L, int64_t r0, int64_t r1) {
    const int n_embd = F->m->n_embd;
    const float *moe = (const float *)(F->base + F->S->moe_out);
    for (int64_t i = r0; i < r1; i++) {
        float *y = F->tmp + i * n_embd;
        const float *r = moe + i * n_embd;
        float s = 1.0f;
        if (L->shexp_gate) s = 1.0f / (1.0f + expf(-F->kt->ops.dot_f32(L->shexp_gate, F->xn + i * n_embd, n_embd)));
        for (int d = 0; d < n_embd; d++) y[d] = r[d] + s * y[d];
    }
}

/* The shared expert's h = act(gate (+ b_gate)) * (up (+ b_up)) of rows [r0, r1) into F->gate, quantized for its
 * down projection into T's activation set: the dense FFN's (ffn.c) arithmetic, without LoRA */
static void shared_expert_act(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int64_t r0, int64_t r1) {
    const oxl_kernel_table *kt = F->kt;
    const int n_ff = (int)L->w_up.rows;
    const oxl_weight *down_ws[1] = {&L->w_down};
    act_set_init(&T->acts, kt, F->base, F->S, down_ws, 1);
    for (int64_t i = r0; i < r1; i++) {
        float *gi = F->gate + i * n_ff, *ui = F->up + i * n_ff;
        add_bias(ui, L->b_up, 1, n_ff, 0, 0, 1);
        add_bias(gi, L->b_gate, 1, n_ff, 0, 0, 1);
        oxl_fwd_activate(kt, L, gi, ui, gi, n_ff);
    }
    act_set_fill(&T->acts, kt, F->gate, n_ff, (int)r0, (int)r1);
}

/* The mixture: tmp (n, n_embd) = sum over each row's chosen experts of weight * down(act(gate(xn)) * up(xn)), and
 * the shared expert's output beside it where the layer has one; xn quantized by phase_ffn_norm.
 *
 * A shared expert (a gated FFN, no LoRA on the step) runs inside the phase's own steps, so that a layer of
 * experts costs five barriers, not eight: its gate and up while one thread routes the rows, its
 * activation beside the experts', its down product beside theirs; every product element and sum is the one
 * the dense FFN's phase and the separate sum gave (the same kernels, rows and order). Otherwise (LoRA on the
 * step, a fused gate|up or an ungated shared expert) the dense FFN's phase and the sum follow the experts. */
void oxl_fwd_phase_experts(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const scratch_layout *S = F->S;
    char *base = F->base;
    const int n = F->n, n_embd = F->m->n_embd, ith = T->ith, nth = T->nth;
    const int ne = L->n_expert, k = L->n_expert_used, ff = L->n_ff_exp;
    float *r_logits = (float *)(base + S->r_logits), *sel_w = (float *)(base + S->sel_w);
    int32_t *sel_exp = (int32_t *)(base + S->sel_exp), *sel_pos = (int32_t *)(base + S->sel_pos);
    int32_t *g_row = (int32_t *)(base + S->g_row), *exp_off = (int32_t *)(base + S->exp_off);
    int32_t *used = (int32_t *)(base + S->used);   /* used[0]: how many; then the experts in order */
    float *g_gate = (float *)(base + S->g_gate), *g_up = (float *)(base + S->g_up), *g_out = (float *)(base + S->g_out);
    char *g_hact = base + S->g_hact;
    const int shared = L->w_up.data != NULL;
    const int fuse = shared && !F->any_lora && !L->fused_gate_up && L->w_gate.data;
    float *out = shared ? (float *)(base + S->moe_out) : F->tmp;

    /* router logits (n, n_expert), then each row's choice */
    matmul_share(kt, &L->router, act_for(&T->acts, kt, &L->router, F->xn), n, r_logits, ne, next_counter(F, T), nth);
    sync_threads(F, T);

    /* one thread (a step's routing is a few thousand operations, a barrier costs more): each row's choice,
     * then the (row, slot) pairs bucketed by expert (each pair's gathered position, each position's token
     * row), then the quantized inputs of gate and up gathered into those positions */
    const oxl_weight *gu[2] = {&L->exp_gate, &L->exp_up};
    const void *g_in[2];
    for (int j = 0; j < 2; j++) {
        g_in[j] = base + S->g_act[j];
        if (j == 1 && kt->type[gu[1]->type].vec_dot_type == kt->type[gu[0]->type].vec_dot_type) g_in[1] = g_in[0];
    }
    if (ith == 0) {
        for (int i = 0; i < n; i++) {
            if (L->router_b) kt->ops.add(r_logits + (int64_t)i * ne, L->router_b, ne);
            route_row(L, r_logits + (int64_t)i * ne, sel_exp + (int64_t)i * k, sel_w + (int64_t)i * k);
        }
        for (int e = 0; e <= ne; e++) exp_off[e] = 0;
        for (int64_t q = 0; q < (int64_t)n * k; q++) exp_off[sel_exp[q] + 1]++;
        used[0] = 0;
        for (int e = 0; e < ne; e++) {
            if (exp_off[e + 1]) used[1 + used[0]++] = e;
            exp_off[e + 1] += exp_off[e];
        }
        /* shifted by one, exp_off[e + 1] is the start of e: a cursor that ends at e's end */
        for (int e = ne; e > 0; e--) exp_off[e] = exp_off[e - 1];
        exp_off[0] = 0;
        for (int64_t q = 0; q < (int64_t)n * k; q++) {
            const int e = sel_exp[q], pos = exp_off[e + 1]++;
            sel_pos[q] = pos;
            g_row[pos] = (int32_t)(q / k);
        }
        for (int j = 0; j < 2 && (j == 0 || g_in[1] != g_in[0]); j++) {
            const int64_t rb = oxl_row_size(kt->type[gu[j]->type].vec_dot_type, n_embd);
            const char *src = (const char *)act_for(&T->acts, kt, gu[j], F->xn);
            for (int64_t q = 0; q < (int64_t)n * k; q++)
                memcpy((char *)g_in[j] + q * rb, src + (int64_t)g_row[q] * rb, (size_t)rb);
        }
    }
    if (fuse) {   /* the shared expert's gate and up (n, n_ff): thread 0 joins when the routing is done */
        const int n_ff = (int)L->w_up.rows;
        matmul_share(kt, &L->w_gate, act_for(&T->acts, kt, &L->w_gate, F->xn), n, F->gate, n_ff,
                     next_counter(F, T), nth);
        matmul_share(kt, &L->w_up, act_for(&T->acts, kt, &L->w_up, F->xn), n, F->up, n_ff, next_counter(F, T), nth);
    }
    sync_threads(F, T);

    /* gate and up of every chosen expert: (expert, chunk) items, gate's then up's, from one counter */
    const int n_used = used[0];
    const int c_gu = expert_chunks(&L->exp_gate, ff, nth);
    {
        atomic_int *next = next_counter(F, T);
        const int n_items = 2 * n_used * c_gu;
        for (int it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < n_items;
             it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
            const int j = it / (n_used * c_gu), u = (it / c_gu) % n_used, c = it % c_gu;
            const int e = used[1 + u], p0 = exp_off[e], cnt = exp_off[e + 1] - p0;
            const oxl_weight *w = gu[j];
            const int64_t rb = oxl_row_size(kt->type[w->type].vec_dot_type, n_embd);
            int64_t b, end;
            oxl_split_range(ff, c_gu, c, 16, &b, &end);
            if (b >= end) continue;
            expert_range(kt, w, ff, e, (const char *)g_in[j] + (int64_t)p0 * rb, cnt,
                         (j ? g_up : g_gate) + (int64_t)p0 * ff, ff, b, end);
        }
    }
    sync_threads(F, T);

    /* h = act(gate (+ bias)) * (up (+ bias)) per position, quantized for down; threads split the (row, slot)
     * pairs, each pair its own position (sel_pos) and expert (sel_exp) */
    const int hvdt = kt->type[L->exp_down.type].vec_dot_type;
    const int64_t hrb = oxl_row_size(hvdt, ff);
    {
        int64_t b, e;
        oxl_split_range((int64_t)n * k, nth, ith, 1, &b, &e);
        for (int64_t q = b; q < e; q++) {
            const int64_t pos = sel_pos[q], ex = sel_exp[q];
            float *h = g_gate + pos * ff, *u = g_up + pos * ff;
            if (L->exp_gate_b) kt->ops.add(h, L->exp_gate_b + ex * ff, ff);
            if (L->exp_up_b) kt->ops.add(u, L->exp_up_b + ex * ff, ff);
            oxl_fwd_activate(kt, L, h, u, h, ff);
            if (hvdt != OXL_TYPE_F32) kt->type[hvdt].from_float(h, g_hact + pos * hrb, ff);
        }
    }
    if (fuse) shared_expert_act(F, T, L, T->t0, T->t1);
    sync_threads(F, T);
    const void *h_in = hvdt == OXL_TYPE_F32 ? (const void *)g_gate : (const void *)g_hact;

    /* down of every chosen expert: (n * k, n_embd) */
    const int c_d = expert_chunks(&L->exp_down, n_embd, nth);
    {
        atomic_int *next = next_counter(F, T);
        const int n_items = n_used * c_d;
        for (int it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < n_items;
             it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
            const int u = it / c_d, c = it % c_d;
            const int e = used[1 + u], p0 = exp_off[e], cnt = exp_off[e + 1] - p0;
            int64_t b, end;
            oxl_split_range(n_embd, c_d, c, 16, &b, &end);
            if (b >= end) continue;
            expert_range(kt, &L->exp_down, n_embd, e, (const char *)h_in + (int64_t)p0 * hrb, cnt,
                         g_out + (int64_t)p0 * n_embd, n_embd, b, end);
        }
    }
    if (fuse)   /* the shared expert's down: tmp (n, n_embd) */
        matmul_share(kt, &L->w_down, act_for(&T->acts, kt, &L->w_down, F->gate), n, F->tmp, n_embd,
                     next_counter(F, T), nth);
    sync_threads(F, T);

    /* each row: its experts' outputs (+ their down biases), weighted, summed in the router's order */
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *y = out + i * n_embd;
        memset(y, 0, (size_t)n_embd * 4);
        for (int j = 0; j < k; j++) {
            float *o = g_out + (int64_t)sel_pos[i * k + j] * n_embd;
            if (L->exp_down_b) kt->ops.add(o, L->exp_down_b + (int64_t)sel_exp[i * k + j] * n_embd, n_embd);
            kt->ops.axpy(y, sel_w[i * k + j], o, n_embd);
        }
    }
    if (fuse) {
        shared_expert_sum(F, L, T->t0, T->t1);
    } else if (shared) {   /* the dense FFN's phase (LoRA, fused gate|up), then the sum */
        oxl_fwd_phase_ffn(F, T, L, il);
        shared_expert_sum(F, L, T->t0, T->t1);
    }
}
