/* Mamba-2's mixer kernels; the order they compute in is written down in ssm.h. */
#include <math.h>
#include <string.h>

#include "layers/ssm.h"
#include "../forward_impl.h"

/* softplus as ggml computes it for the scan: the identity above 20 */
static inline float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

void oxl_ssm_scan_head(const oxl_kernel_table *kt, const float *xbc, int64_t ld_xbc, const float *dt, int64_t ld_dt,
                       float *y, int64_t ld_y,
                       int n, float *state, int h, int head_dim, int d_inner, int d_state, int n_head, int n_group,
                       float A, float D, float dt_bias) {
    const int g = h / (n_head / n_group);
    float xdt[head_dim > 0 ? head_dim : 1];
    for (int t = 0; t < n; t++) {
        const float *row = xbc + (int64_t)t * ld_xbc;
        const float *x = row + (int64_t)h * head_dim;
        const float *B = row + d_inner + (int64_t)g * d_state;
        const float *C = row + d_inner + (int64_t)n_group * d_state + (int64_t)g * d_state;
        const float dts = softplus(dt[(int64_t)t * ld_dt + h] + dt_bias);
        const float dA = expf(dts * A);
        float *yt = y + (int64_t)t * ld_y + (int64_t)h * head_dim;
        for (int i = 0; i < head_dim; i++) {
            xdt[i] = x[i] * dts;
            yt[i] = 0.0f;
        }
        kt->ops.ssm_scan_states(state, B, C, xdt, dA, yt, d_state, head_dim, t == 0);   /* then it is in cache */
        for (int i = 0; i < head_dim; i++) yt[i] = yt[i] + D * x[i];
    }
}

void oxl_ssm_gated_norm(const oxl_kernel_table *kt, float *y, const float *z, const float *w, int d_inner, int n_group,
                        float eps) {
    kt->ops.silu_mul(z, y, y, d_inner);   /* y = silu(z) y */
    if (!w) return;
    const int gs = d_inner / n_group;
    for (int g = 0; g < n_group; g++)
        kt->ops.rms_norm(y + (int64_t)g * gs, w + (int64_t)g * gs, y + (int64_t)g * gs, gs, eps);
}

/* ---- the forward's phases (forward_impl.h) ---- */

/* A Mamba-2 layer's sizes against each other, its weights and the model's maxima (which sized the scratch). */
int oxl_fwd_check_mamba2(const oxl_model *m, const oxl_layer *L) {
    const int64_t di = L->ssm_d_inner, ds = L->ssm_d_state, ng = L->ssm_n_group, nh = L->ssm_n_head;
    if (di <= 0 || ds <= 0 || ng <= 0 || nh <= 0 || L->ssm_d_conv < 1 || L->ssm_d_conv > OXL_CONV_MAX_L) return OXL_ERR_SHAPE;
    if (di % nh || nh % ng || di % ng) return OXL_ERR_SHAPE;
    const int64_t conv_dim = di + 2 * ng * ds, d_in_proj = di + conv_dim + nh;
    if (di > m->ssm_d_inner_max || conv_dim > m->ssm_conv_dim_max || d_in_proj > m->ssm_d_in_proj_max) return OXL_ERR_SHAPE;
    if (!L->ssm_in.data || !L->ssm_out.data || !L->ssm_conv1d || !L->ssm_a || !L->ssm_d || !L->ssm_dt_b || !L->attn_norm)
        return OXL_ERR_ARG;
    if (L->ssm_in.rows != d_in_proj || L->ssm_in.cols != m->n_embd || L->ssm_out.rows != m->n_embd ||
        L->ssm_out.cols != di) return OXL_ERR_SHAPE;
    const int64_t need = (int64_t)(L->ssm_d_conv - 1) * conv_dim + nh * ds * (di / nh);
    if (L->state_off < 0 || L->state_off + need > m->state_floats) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* xn = norm(x); quantized for the input projection */
void oxl_fwd_phase_ssm_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int n_embd = F->m->n_embd;
    const oxl_weight *ws[1] = {&L->ssm_in};
    act_set_init(&T->acts, F->kt, F->base, F->S, ws, 1);
    for (int64_t i = T->t0; i < T->t1; i++)
        norm_row(F->kt, F->m, F->x + i * n_embd, L->attn_norm, L->attn_norm_b, F->xn + i * n_embd, n_embd);
    act_set_fill(&T->acts, F->kt, F->xn, n_embd, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    (void)il;
}

/* zxbcdt (n, d_in_proj) = xn ssm_in^T */
void oxl_fwd_phase_ssm_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    float *zx = (float *)(F->base + F->S->ssm_zxbcdt);
    matmul_share(F->kt, &L->ssm_in, act_for(&T->acts, F->kt, &L->ssm_in, F->xn), F->n, zx, L->ssm_in.rows,
                 next_counter(F, T), T->nth);
    sync_threads(F, T);
    (void)il;
}

#define SSM_CONV_CHANNELS 256   /* channels per conv work item */

/* xbc (n, conv_dim) = SiLU(conv(xBC) + b), per (sequence, channel block); a sequence at position 0 starts
 * from a zero conv state */
void oxl_fwd_phase_ssm_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int di = L->ssm_d_inner, ds = L->ssm_d_state, ng = L->ssm_n_group, dc = L->ssm_d_conv;
    const int conv_dim = di + 2 * ng * ds;
    const int64_t ld_in = L->ssm_in.rows;
    const float *zx = (const float *)(F->base + F->S->ssm_zxbcdt);
    float *xbc = (float *)(F->base + F->S->ssm_xbc);
    const int n_blocks = (conv_dim + SSM_CONV_CHANNELS - 1) / SSM_CONV_CHANNELS;
    for (int64_t it = T->ith; it < (int64_t)F->n_seqs * n_blocks; it += T->nth) {
        const int s = (int)(it / n_blocks), c0 = (int)(it % n_blocks) * SSM_CONV_CHANNELS;
        const int c1 = OXL_MIN(conv_dim, c0 + SSM_CONV_CHANNELS);
        float *cst = seq_state(F, s) + L->state_off;
        if (F->seqs[s].pos0 == 0)
            for (int k = 0; k < dc - 1; k++) memset(cst + (int64_t)k * conv_dim + c0, 0, (size_t)(c1 - c0) * 4);
        const int64_t r0 = F->seq_row0[s];
        F->kt->ops.causal_conv(zx + r0 * ld_in + di, ld_in, xbc + r0 * conv_dim, conv_dim, F->seqs[s].n_tokens, cst,
                               conv_dim, L->ssm_conv1d, L->ssm_conv1d_b, dc, c0, c1, 1);
    }
    sync_threads(F, T);
    (void)il;
}

/* y (n, d_inner) = the selective scan, per (sequence, head); a sequence at position 0 starts from a zero
 * ssm state. Each thread takes one contiguous range of the (sequence, head) items: a sequence's heads lie one
 * after another in its slot, so the thread streams one run of state memory and the scan's prefetch past a
 * head's end reads the head it scans next. */
void oxl_fwd_phase_ssm_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int di = L->ssm_d_inner, ds = L->ssm_d_state, ng = L->ssm_n_group, nh = L->ssm_n_head;
    const int conv_dim = di + 2 * ng * ds, hd = di / nh;
    const int64_t ld_in = L->ssm_in.rows;
    const float *zx = (const float *)(F->base + F->S->ssm_zxbcdt);
    const float *xbc = (const float *)(F->base + F->S->ssm_xbc);
    float *y = (float *)(F->base + F->S->ssm_y);
    int64_t it0, it1;
    oxl_split_range((int64_t)F->n_seqs * nh, T->nth, T->ith, 1, &it0, &it1);
    for (int64_t it = it0; it < it1; it++) {
        const int s = (int)(it / nh), h = (int)(it % nh);
        float *hst = seq_state(F, s) + L->state_off + (int64_t)(L->ssm_d_conv - 1) * conv_dim + (int64_t)h * ds * hd;
        if (F->seqs[s].pos0 == 0) memset(hst, 0, (size_t)ds * hd * 4);
        const int64_t r0 = F->seq_row0[s];
        oxl_ssm_scan_head(F->kt, xbc + r0 * conv_dim, conv_dim, zx + r0 * ld_in + di + conv_dim, ld_in, y + r0 * di, di,
                          F->seqs[s].n_tokens, hst, h, hd, di, ds, nh, ng, L->ssm_a[h], L->ssm_d[h], L->ssm_dt_b[h]);
    }
    sync_threads(F, T);
    (void)il;
}

/* y = grouped RMS norm of y * silu(z), quantized; tmp (n, n_embd) = y ssm_out^T; without an FFN after the
 * mixer, x += tmp here */
void oxl_fwd_phase_ssm_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const int di = L->ssm_d_inner, n_embd = F->m->n_embd;
    const int64_t ld_in = L->ssm_in.rows;
    const float *zx = (const float *)(F->base + F->S->ssm_zxbcdt);
    float *y = (float *)(F->base + F->S->ssm_y);
    const oxl_weight *ws[1] = {&L->ssm_out};
    act_set_init(&T->acts, kt, F->base, F->S, ws, 1);
    for (int64_t i = T->t0; i < T->t1; i++)
        oxl_ssm_gated_norm(kt, y + i * di, zx + i * ld_in, L->ssm_norm, di, L->ssm_n_group, F->m->norm_eps);
    act_set_fill(&T->acts, kt, y, di, (int)T->t0, (int)T->t1);
    sync_threads(F, T);
    matmul_share(kt, &L->ssm_out, act_for(&T->acts, kt, &L->ssm_out, y), F->n, F->tmp, n_embd, next_counter(F, T),
                 T->nth);
    sync_threads(F, T);
    if (!L->w_up.data && L->n_expert == 0) {
        for (int64_t i = T->t0; i < T->t1; i++) {
            scale_residual(L, F->tmp + i * n_embd, n_embd);
            kt->ops.add(F->x + i * n_embd, F->tmp + i * n_embd, n_embd);
        }
        if (il == F->m->n_layer - 1) sync_threads(F, T);
    }
}
