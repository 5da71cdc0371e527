/* The gated delta rule, token by token; the formula, the state layout and the summation order are in
 * deltanet.h. */
#include <math.h>

#include "deltanet.h"
#include "../forward_impl.h"

void oxl_deltanet_head(const oxl_kernel_table *kt, const float *q, const float *k, int64_t ld_qk, const float *v,
                       int64_t ld_v, const float *g, const float *beta, int64_t ld_gb, int n_tokens, int d_k,
                       int d_v, float *S, float *out, int64_t ld_out) {
    for (int t = 0; t < n_tokens; t++) {
        const float *qt = q + (int64_t)t * ld_qk, *kt_ = k + (int64_t)t * ld_qk, *vt = v + (int64_t)t * ld_v;
        const float decay = expf(g[(int64_t)t * ld_gb]), b = beta[(int64_t)t * ld_gb];
        float *ot = out + (int64_t)t * ld_out;
        for (int j = 0; j < d_v; j++) {
            float *Sj = S + (int64_t)j * d_k;
            for (int i = 0; i < d_k; i++) Sj[i] *= decay;
            const float kv = kt->ops.dot_f32(Sj, kt_, d_k);
            kt->ops.axpy(Sj, b * (vt[j] - kv), kt_, d_k);
            ot[j] = kt->ops.dot_f32(Sj, qt, d_k);
        }
    }
}

void oxl_l2_norm(float *x, int n, float eps) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] * x[i];
    const float inv = 1.0f / sqrtf(sum + eps);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* ---- the forward's phases (forward_impl.h) ---- */

#define DELTANET_L2_EPS 1e-6f   /* transformers' l2norm (FLA's) */

/* A DeltaNet layer's sizes and weights against the model, its state within the slot. */
int oxl_fwd_check_deltanet(const oxl_model *m, const oxl_layer *L) {
    const oxl_deltanet *d = &L->dn;
    if (d->n_k_heads <= 0 || d->n_v_heads <= 0 || d->n_v_heads % d->n_k_heads || d->d_k <= 0 ||
        d->d_k > OXL_DELTANET_MAX_DK || d->d_v <= 0 || d->L < 2 || d->L > OXL_CONV_MAX_L) return OXL_ERR_SHAPE;
    if (!d->wqkv.data || !d->wgate.data || !d->w_ba.data || !d->w_out.data || !d->conv || !d->a_neg ||
        !d->dt_bias || !d->norm || !L->attn_norm) return OXL_ERR_ARG;
    const int64_t cd = dn_conv_dim(d), vd = dn_value_dim(d);
    if (d->wqkv.rows != cd || d->wgate.rows != vd || d->w_ba.rows != 2 * (int64_t)d->n_v_heads ||
        d->wqkv.cols != m->n_embd || d->wgate.cols != m->n_embd || d->w_ba.cols != m->n_embd ||
        d->w_out.rows != m->n_embd || d->w_out.cols != vd) return OXL_ERR_SHAPE;
    const int64_t need = cd * (d->L - 1) + vd * d->d_k;
    if (L->state_off < 0 || L->state_off + need > m->state_floats) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* [q | k | v] (n, conv_dim), z (n, value_dim), [b | a] (n, 2 n_v_heads) from xn (quantized by phase_attn_norm) */
void oxl_fwd_phase_deltanet_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_deltanet *d = &L->dn;
    const scratch_layout *S = F->S;
    const int n = F->n;
    matmul_share(kt, &d->wqkv, act_for(&T->acts, kt, &d->wqkv, F->xn), n, (float *)(F->base + S->dn_qkv),
                 d->wqkv.rows, next_counter(F, T), T->nth);
    matmul_share(kt, &d->wgate, act_for(&T->acts, kt, &d->wgate, F->xn), n, (float *)(F->base + S->dn_z),
                 d->wgate.rows, next_counter(F, T), T->nth);
    matmul_share(kt, &d->w_ba, act_for(&T->acts, kt, &d->w_ba, F->xn), n, (float *)(F->base + S->dn_ba),
                 d->w_ba.rows, next_counter(F, T), T->nth);
    sync_threads(F, T);
    (void)il;
}

#define DN_CONV_CHANNELS 256   /* channels per conv work item */

/* the conv + SiLU per (sequence, channel block) from the sequence's conv state (zero at pos0 0); then per row
 * q and k L2-normalised (q / sqrt(d_k)) and [b | a] turned into [beta | g] */
void oxl_fwd_phase_deltanet_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_deltanet *d = &L->dn;
    const scratch_layout *S = F->S;
    const int cd = (int)dn_conv_dim(d), nk = d->n_k_heads, nv = d->n_v_heads, r = nv / nk;
    const float *qkv = (const float *)(F->base + S->dn_qkv);
    float *cv = (float *)(F->base + S->dn_conv);
    const int n_blocks = (cd + DN_CONV_CHANNELS - 1) / DN_CONV_CHANNELS;
    for (int64_t it = T->ith; it < (int64_t)F->n_seqs * n_blocks; it += T->nth) {
        const int s = (int)(it / n_blocks), c0 = (int)(it % n_blocks) * DN_CONV_CHANNELS;
        const int c1 = OXL_MIN(cd, c0 + DN_CONV_CHANNELS);
        float *cst = seq_state(F, s) + L->state_off;   /* (L - 1, conv_dim) */
        if (F->seqs[s].pos0 == 0)
            for (int k = 0; k < d->L - 1; k++) memset(cst + (int64_t)k * cd + c0, 0, (size_t)(c1 - c0) * 4);
        const int64_t r0 = F->seq_row0[s];
        F->kt->ops.causal_conv(qkv + r0 * cd, cd, cv + r0 * cd, cd, F->seqs[s].n_tokens, cst, cd, d->conv, NULL, d->L,
                               c0, c1, 1);
    }
    sync_threads(F, T);
    const float *ba = (const float *)(F->base + S->dn_ba);
    float *bg = (float *)(F->base + S->dn_bg);
    const float q_scale = 1.0f / sqrtf((float)d->d_k);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *row = cv + i * cd;
        for (int h = 0; h < 2 * nk; h++) oxl_l2_norm(row + (int64_t)h * d->d_k, d->d_k, DELTANET_L2_EPS);
        for (int j = 0; j < nk * d->d_k; j++) row[j] *= q_scale;
        const float *bai = ba + i * 2 * nv;
        float *bgi = bg + i * 2 * nv;
        for (int h = 0; h < nv; h++) {   /* value head h: its key head g and rank j within g, its b and a at
                                            [g: b (r) | a (r)] */
            const int g = d->heads_tiled ? h % nk : h / r, j = d->heads_tiled ? h / nk : h % r;
            const float b = bai[g * 2 * r + j], a = bai[g * 2 * r + r + j] + d->dt_bias[h];
            const float softplus = a > 20.0f ? a : log1pf(expf(a));
            bgi[h] = 1.0f / (1.0f + expf(-b));
            bgi[nv + h] = d->a_neg[h] * softplus;
        }
    }
    sync_threads(F, T);
    (void)il;
}

/* the delta rule per (sequence, value head) from the sequence's state (zero at pos0 0): out (n, value_dim) */
void oxl_fwd_phase_deltanet_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_deltanet *d = &L->dn;
    const scratch_layout *S = F->S;
    const int cd = (int)dn_conv_dim(d), vd = (int)dn_value_dim(d), nk = d->n_k_heads, nv = d->n_v_heads;
    const int r = nv / nk, dk = d->d_k, dv = d->d_v;
    const float *cv = (const float *)(F->base + S->dn_conv), *bg = (const float *)(F->base + S->dn_bg);
    float *out = (float *)(F->base + S->dn_out);
    for (int64_t it = T->ith; it < (int64_t)F->n_seqs * nv; it += T->nth) {
        const int s = (int)(it / nv), h = (int)(it % nv), g = d->heads_tiled ? h % nk : h / r;
        float *st = seq_state(F, s) + L->state_off + (int64_t)cd * (d->L - 1) + (int64_t)h * dv * dk;
        if (F->seqs[s].pos0 == 0) memset(st, 0, (size_t)dv * dk * 4);
        const int64_t r0 = F->seq_row0[s];
        const float *row = cv + r0 * cd;
        oxl_deltanet_head(F->kt, row + (int64_t)g * dk, row + (int64_t)(nk + g) * dk, cd,
                          row + (int64_t)2 * nk * dk + (int64_t)h * dv, cd, bg + r0 * 2 * nv + nv + h,
                          bg + r0 * 2 * nv + h, 2 * nv, F->seqs[s].n_tokens, dk, dv, st, out + r0 * vd + (int64_t)h * dv,
                          vd);
    }
    sync_threads(F, T);
    (void)il;
}

/* out = rms_norm(out) * norm * silu(z) per value head, quantized; tmp (n, n_embd) = out w_out^T */
void oxl_fwd_phase_deltanet_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_deltanet *d = &L->dn;
    const int vd = (int)dn_value_dim(d), dv = d->d_v;
    float *out = (float *)(F->base + F->S->dn_out);
    const float *z = (const float *)(F->base + F->S->dn_z);
    const oxl_weight *ws[1] = {&d->w_out};
    act_set_init(&T->acts, kt, F->base, F->S, ws, 1);
    for (int64_t i = T->t0; i < T->t1; i++)
        for (int h = 0; h < d->n_v_heads; h++) {
            float *o = out + i * vd + (int64_t)h * dv;
            const float *zh = z + i * vd + (int64_t)h * dv;
            kt->ops.rms_norm(o, d->norm, o, dv, F->m->norm_eps);
            kt->ops.silu_mul(zh, o, o, dv);   /* o = silu(z) o */
        }
    act_set_fill(&T->acts, kt, out, vd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    matmul_share(kt, &d->w_out, act_for(&T->acts, kt, &d->w_out, out), F->n, F->tmp, F->m->n_embd,
                 next_counter(F, T), T->nth);
    sync_threads(F, T);
    (void)il;
}
