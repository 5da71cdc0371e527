/* The dense FFN and what surrounds every FFN: the residual adds, the norms before it, the activations. */
#include "../forward_impl.h"

void oxl_fwd_activate(const oxl_kernel_table *kt, const oxl_layer *L, const float *g, const float *u, float *y, int n) {
    switch (L->act) {
    case OXL_ACT_SWIGLU_OAI: {
        const float alpha = L->act_alpha, limit = L->act_limit;
        for (int i = 0; i < n; i++) {
            const float gi = g[i] < limit ? g[i] : limit;
            const float ui = u ? (u[i] < -limit ? -limit : u[i] > limit ? limit : u[i]) : 0.0f;
            y[i] = (ui + 1.0f) * (gi / (1.0f + expf(-alpha * gi)));
        }
        break;
    }
    case OXL_ACT_RELU_SQR:
        for (int i = 0; i < n; i++) {
            const float r = g[i] > 0.0f ? g[i] : 0.0f;
            y[i] = u ? r * r * u[i] : r * r;
        }
        break;
    case OXL_ACT_GELU_TANH: kt->ops.gelu_mul(g, u, y, n); break;
    case OXL_ACT_GELU_ERF: kt->ops.gelu_erf_mul(g, u, y, n); break;
    default:
        if (u) kt->ops.silu_mul(g, u, y, n);
        else {
            for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i]));
        }
    }
}

/* x += attention output (biased, post-normed); xn = the FFN's normed input, quantized for gate and up */
void oxl_fwd_phase_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_model *m = F->m;
    const int n_embd = m->n_embd;
    const oxl_weight *ffn_ws[5] = {&L->w_gate, &L->w_up, &L->router, &L->exp_gate, &L->exp_up};
    act_set_init(&T->acts, kt, F->base, F->S, ffn_ws, 5);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *ti = F->tmp + i * n_embd, *xi = F->x + i * n_embd;
        add_bias(ti, L->bo, 1, n_embd, 0, 0, 1);
        if (L->post_attn_norm) norm_row(kt, m, ti, L->post_attn_norm, NULL, ti, n_embd);
        scale_residual(L, ti, n_embd);
        if (L->parallel_residual) {
            /* ffn reads x normed by its own norm, or by attention's: recompute it, then x += attn */
            const int own = L->ffn_norm != NULL;
            norm_row(kt, m, xi, own ? L->ffn_norm : L->attn_norm, own ? L->ffn_norm_b : L->attn_norm_b,
                     F->xn + i * n_embd, n_embd);
            kt->ops.add(xi, ti, n_embd);
        } else {
            kt->ops.add(xi, ti, n_embd);
            if (L->attn_out_norm) norm_row(kt, m, xi, L->attn_out_norm, L->attn_out_norm_b, xi, n_embd);
            if (L->ffn_norm) norm_row(kt, m, xi, L->ffn_norm, L->ffn_norm_b, F->xn + i * n_embd, n_embd);
            else memcpy(F->xn + i * n_embd, xi, (size_t)n_embd * 4);   /* post-norm: the FFN reads x */
        }
    }
    act_set_fill(&T->acts, kt, F->xn, n_embd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    (void)il;
}

/* a mixer with no FFN after it (nemotron_h's attention blocks): x += its output, as phase_ffn_norm adds it */
void oxl_fwd_phase_mixer_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int n_embd = F->m->n_embd;
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *ti = F->tmp + i * n_embd, *xi = F->x + i * n_embd;
        add_bias(ti, L->bo, 1, n_embd, 0, 0, 1);
        if (L->post_attn_norm) norm_row(kt, F->m, ti, L->post_attn_norm, NULL, ti, n_embd);
        scale_residual(L, ti, n_embd);
        kt->ops.add(xi, ti, n_embd);
    }
    sync_threads(F, T);
    (void)il;
}

/* a block with no mixer (OXL_LAYER_FFN): xn = ffn_norm(x), quantized for the FFN; nothing to add to x first */
void oxl_fwd_phase_block_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int n_embd = F->m->n_embd;
    const oxl_weight *ffn_ws[2] = {&L->w_gate, &L->w_up};
    act_set_init(&T->acts, kt, F->base, F->S, ffn_ws, 2);
    for (int64_t i = T->t0; i < T->t1; i++)
        norm_row(kt, F->m, F->x + i * n_embd, L->ffn_norm, L->ffn_norm_b, F->xn + i * n_embd, n_embd);
    act_set_fill(&T->acts, kt, F->xn, n_embd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    (void)il;
}

/* the dense FFN: tmp (n, n_embd) = down(act(gate(xn)) * up(xn)); LoRA on each */
void oxl_fwd_phase_ffn(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int n = F->n, n_embd = F->m->n_embd, ith = T->ith, nth = T->nth;
    const float *xn = F->xn;
    float *gate = F->gate, *up = F->up;
    /* gate and up projections: (n, n_ff) each, or fused (n, 2 n_ff) */
    const int n_ff = L->fused_gate_up ? (int)(L->w_up.rows / 2) : (int)L->w_up.rows;
    const int64_t ldu = L->w_up.rows;
    if (L->w_gate.data)
        matmul_share(kt, &L->w_gate, act_for(&T->acts, kt, &L->w_gate, xn), n, gate, n_ff, next_counter(F, T), nth);
    matmul_share(kt, &L->w_up, act_for(&T->acts, kt, &L->w_up, xn), n, up, ldu, next_counter(F, T), nth);
    if (F->any_lora) {   /* all of a fused gate|up */
        oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_UP, &L->w_up, xn, n_embd, F->lt[0], ith, nth);
        if (L->w_gate.data)
            oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_GATE, &L->w_gate, xn, n_embd, F->lt[1],
                              ith, nth);
    }
    sync_threads(F, T);
    if (F->any_lora) {
        oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_UP, &L->w_up, F->lt[0], up, ldu, ith, nth);
        if (L->w_gate.data)
            oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_GATE, &L->w_gate, F->lt[1], gate, n_ff, ith, nth);
        sync_threads(F, T);
    }

    /* h = act(gate) * up, quantized for the down projection; h lives in gate */
    const oxl_weight *down_ws[1] = {&L->w_down};
    act_set_init(&T->acts, kt, F->base, F->S, down_ws, 1);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *ui = up + i * ldu, *gi;
        if (L->fused_gate_up) {
            gi = ui;          /* [gate | up] */
            ui = ui + n_ff;
        } else {
            gi = L->w_gate.data ? gate + i * n_ff : NULL;
        }
        add_bias(ui, L->b_up, 1, n_ff, 0, 0, 1);
        if (gi) add_bias(gi, L->b_gate, 1, n_ff, 0, 0, 1);
        float *hi = gate + i * n_ff;
        if (gi) oxl_fwd_activate(kt, L, gi, ui, hi, n_ff);
        else oxl_fwd_activate(kt, L, ui, NULL, hi, n_ff);
    }
    act_set_fill(&T->acts, kt, gate, n_ff, (int)T->t0, (int)T->t1);
    sync_threads(F, T);

    matmul_share(kt, &L->w_down, act_for(&T->acts, kt, &L->w_down, gate), n, F->tmp, n_embd, next_counter(F, T), nth);
    if (F->any_lora)
        oxl_fwd_lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_DOWN, &L->w_down, gate, n_ff, F->lt[0], ith, nth);
    sync_threads(F, T);
    if (F->any_lora) {
        oxl_fwd_lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_DOWN, &L->w_down, F->lt[0], F->tmp, n_embd, ith, nth);
        sync_threads(F, T);
    }
}

/* x += FFN output (biased, post-normed) */
void oxl_fwd_phase_ffn_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int n_embd = F->m->n_embd;
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *ti = F->tmp + i * n_embd;
        add_bias(ti, L->b_down, 1, n_embd, 0, 0, 1);
        if (L->post_ffn_norm) norm_row(F->kt, F->m, ti, L->post_ffn_norm, NULL, ti, n_embd);
        scale_residual(L, ti, n_embd);
        F->kt->ops.add(F->x + i * n_embd, ti, n_embd);
        if (L->layer_out_norm)
            norm_row(F->kt, F->m, F->x + i * n_embd, L->layer_out_norm, L->layer_out_norm_b, F->x + i * n_embd, n_embd);
    }
    /* the next layer starts with this thread's own rows again (norm, quantize), so only the
     * final norm, which splits rows differently, needs everyone's residual first */
    if (il == F->m->n_layer - 1) sync_threads(F, T);
}
