/* LFM2's gated short convolution; layouts and summation order in shortconv.h. */
#include "shortconv.h"
#include "../forward_impl.h"

void oxl_shortconv_rows(const oxl_kernel_table *kt, const float *bcx, int64_t ld_bcx, int n_tokens, int n_embd,
                        const float *w, int L, float *state, float *y, int64_t ldy, int c0, int c1) {
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] = row[c] * row[2 * n_embd + c];   /* B * x */
    }
    kt->ops.causal_conv(y, ldy, y, ldy, n_tokens, state, n_embd, w, NULL, L, c0, c1, 0);
    for (int t = 0; t < n_tokens; t++) {
        const float *row = bcx + (int64_t)t * ld_bcx;
        float *yt = y + (int64_t)t * ldy;
        for (int c = c0; c < c1; c++) yt[c] *= row[n_embd + c];   /* C * conv */
    }
}

/* ---- the forward's phases (forward_impl.h) ---- */

/* An LFM2 conv layer's weights against the model, its state within the slot. */
int oxl_fwd_check_shortconv(const oxl_model *m, const oxl_layer *L) {
    const oxl_shortconv *c = &L->conv;
    if (!c->in_proj.data || !c->out_proj.data || !c->kernel || !L->attn_norm) return OXL_ERR_ARG;
    if (c->L < 2 || c->L > OXL_CONV_MAX_L || c->in_proj.rows != 3 * (int64_t)m->n_embd ||
        c->in_proj.cols != m->n_embd || c->out_proj.rows != m->n_embd || c->out_proj.cols != m->n_embd)
        return OXL_ERR_SHAPE;
    if (L->state_off < 0 || L->state_off + (int64_t)m->n_embd * (c->L - 1) > m->state_floats) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* LFM2's conv block: tmp (n, n_embd) = out_proj(C * conv(B * x)), [B | C | x] = in_proj(xn) (n, 3 n_embd) in
 * rec; the gated conv (n, n_embd) after it. The conv runs per sequence over its rows in order, each thread a
 * range of channels of every sequence (layers/shortconv.h: channels are independent, so the split changes
 * nothing), from and into the sequence's conv state. */
void oxl_fwd_phase_shortconv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_shortconv *c = &L->conv;
    const int n = F->n, n_embd = F->m->n_embd, nth = T->nth;
    float *bcx = (float *)(F->base + F->S->rec), *y = bcx + (int64_t)n * 3 * n_embd;
    matmul_share(kt, &c->in_proj, act_for(&T->acts, kt, &c->in_proj, F->xn), n, bcx, 3 * n_embd,
                 next_counter(F, T), nth);
    sync_threads(F, T);
    int64_t c0, c1;
    oxl_split_range(n_embd, nth, T->ith, 16, &c0, &c1);
    if (c0 < c1)
        for (int s = 0; s < F->n_seqs; s++) {
            const int r0 = F->seq_row0[s];
            float *state = seq_state(F, s) + L->state_off;   /* (L - 1, n_embd) */
            if (F->seqs[s].pos0 == 0)   /* a new sequence: the zero state */
                for (int k = 0; k < c->L - 1; k++) memset(state + k * n_embd + c0, 0, (size_t)(c1 - c0) * 4);
            oxl_shortconv_rows(kt, bcx + (int64_t)r0 * 3 * n_embd, 3 * n_embd, F->seqs[s].n_tokens, n_embd,
                               c->kernel, c->L, state, y + (int64_t)r0 * n_embd, n_embd, (int)c0, (int)c1);
        }
    const oxl_weight *out_ws[1] = {&c->out_proj};
    act_set_init(&T->acts, kt, F->base, F->S, out_ws, 1);
    sync_threads(F, T);
    act_set_fill(&T->acts, kt, y, n_embd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    matmul_share(kt, &c->out_proj, act_for(&T->acts, kt, &c->out_proj, y), n, F->tmp, n_embd,
                 next_counter(F, T), nth);
    sync_threads(F, T);
}
