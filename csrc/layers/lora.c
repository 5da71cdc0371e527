/* LoRA's products in the forward: A x beside a base product, then scale * B (A x) added to its output. */
#include "../forward_impl.h"

/* LoRA on (layer il, slot), in two phases that ride on the barriers the base product already has:
 * lora_down, in the product's own phase (its input is ready), computes t = A x for every (row, adapter) of the
 * step, the rank-r dot products split across threads in contiguous runs (each t[k] whole on one thread);
 * lora_up, after the product's barrier, adds scale * B t to Y (n rows, ldy), every thread a 16-aligned share
 * of the outputs, adapters in order. Neither split changes what an element sums or in which order, so the
 * result does not depend on the thread count or on the other rows of the step. t holds each row's adapters'
 * ranks one after another, rows in order (the same walk in both phases). */
static int lora_active(const oxl_lora *lo, const oxl_lora_weight *lw) {
    return lw->a && lo->scale != 0.0f;
}

/* t = row k of A . x, and y += s * (row k of B transposed)[b, b + n], in the adapter's storage type (F16
 * only for values it holds exactly: half the bytes read per token). */
static float lora_dot(const oxl_kernel_table *kt, const oxl_lora_weight *lw, int64_t k, const float *x, int n) {
    if (lw->type == OXL_TYPE_F16) return kt->ops.dot_f16(x, (const oxl_half *)lw->a + k * n, n);
    return kt->ops.dot_f32((const float *)lw->a + k * n, x, n);
}

static void lora_axpy(const oxl_kernel_table *kt, const oxl_lora_weight *lw, int64_t k, int64_t len, int64_t b,
                      float *y, float s, int n) {
    if (lw->type == OXL_TYPE_F16) kt->ops.axpy_f16(y, s, (const oxl_half *)lw->bt + k * len + b, n);
    else kt->ops.axpy(y, s, (const float *)lw->bt + k * len + b, n);
}

void oxl_fwd_lora_down(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
                       int slot, const oxl_weight *w, const float *x, int64_t ldx, float *t, int ith, int nth) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const oxl_batch_seq *sq = &seqs[row_seq[i]];
        for (int a = 0; a < sq->n_loras; a++) {
            const oxl_lora_weight *lw = &sq->loras[a].w[il * OXL_LORA_SLOTS + slot];
            if (lora_active(&sq->loras[a], lw)) total += lw->rank;
        }
    }
    int64_t k0, k1;
    oxl_split_range(total, nth, ith, 1, &k0, &k1);
    int64_t off = 0;
    for (int i = 0; i < n && off < k1; i++) {
        const oxl_batch_seq *sq = &seqs[row_seq[i]];
        for (int a = 0; a < sq->n_loras && off < k1; a++) {
            const oxl_lora_weight *lw = &sq->loras[a].w[il * OXL_LORA_SLOTS + slot];
            if (!lora_active(&sq->loras[a], lw)) continue;
            const int64_t b = OXL_MAX(off, k0), e = OXL_MIN(off + lw->rank, k1);
            for (int64_t j = b; j < e; j++)
                t[j] = lora_dot(kt, lw, j - off, x + (int64_t)i * ldx, (int)w->cols);
            off += lw->rank;
        }
    }
}

void oxl_fwd_lora_up(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
                     int slot, const oxl_weight *w, const float *t, float *Y, int64_t ldy, int ith, int nth) {
    int64_t o0, o1;
    oxl_split_range(w->rows, nth, ith, 16, &o0, &o1);
    if (o0 >= o1) return;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const oxl_batch_seq *sq = &seqs[row_seq[i]];
        for (int a = 0; a < sq->n_loras; a++) {
            const oxl_lora *lo = &sq->loras[a];
            const oxl_lora_weight *lw = &lo->w[il * OXL_LORA_SLOTS + slot];
            if (!lora_active(lo, lw)) continue;
            for (int k = 0; k < lw->rank; k++)
                lora_axpy(kt, lw, k, w->rows, o0, Y + (int64_t)i * ldy + o0, lo->scale * t[off + k], (int)(o1 - o0));
            off += lw->rank;
        }
    }
}

/* Floats of t one slot needs at most: every row's adapters' largest ranks. */
int64_t oxl_fwd_lora_t_floats(const oxl_model *m, const oxl_batch_seq *seqs, int n_seqs) {
    int64_t total = 0;
    for (int s = 0; s < n_seqs; s++) {
        const oxl_batch_seq *sq = &seqs[s];
        int64_t per_row = 0;
        for (int a = 0; a < sq->n_loras; a++) {
            int r = 0;
            for (int j = 0; j < m->n_layer * OXL_LORA_SLOTS; j++)
                if (sq->loras[a].w[j].a) r = OXL_MAX(r, sq->loras[a].w[j].rank);
            per_row += r;
        }
        total += per_row * sq->n_tokens;
    }
    return total;
}
