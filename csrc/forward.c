/* The fused forward pass: every layer of a batch of tokens in one OpenMP parallel region. */
#include <math.h>
#include <stdlib.h>

#include "forward.h"
#include "layers/shortconv.h"
#include "layers/encoder.h"
#include "layers/ssm.h"
#include "matmul.h"

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

typedef struct {
    atomic_int count;
    atomic_int sense;
    int n;
} step_barrier;

static void barrier_wait(step_barrier *b, int *local_sense) {
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
#define DELTANET_L2_EPS 1e-6f   /* transformers' l2norm (FLA's) */
#define MAX_ACT_TYPES 3

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

/* Attention runs in tiles of one KV page (OXL_KV_PAGE positions) with an online softmax, the tiles grouped
 * into chunks of ATTN_CHUNK positions whose partial results (per query head: max m, sum l, unnormalized output
 * o) are folded in position order. Tiles and chunks are fixed on absolute positions, so a query's attention is
 * one fixed sequence of float operations whatever the call computing it: a step of a few rows (decode, a
 * speculative verify) spreads its (row, KV head, chunk) items over the threads and folds them afterwards;
 * a longer one (prefill) gives each thread whole (row, KV head) items and folds as it goes. */
#define ATTN_CHUNK (4 * OXL_KV_PAGE)
#define SPLIT_ATTN_MAX_ROWS 16
#define SPLIT_ATTN_MAX_FLOATS (8 << 20)   /* the split's partials: at most 32 MB, else items stay whole */

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

/* chunks a query at pos attends to, from the one holding its first position lo */
static inline int attn_chunks(int lo, int pos) { return pos / ATTN_CHUNK - lo / ATTN_CHUNK + 1; }

/* The scratch layout, computed the same way by the size query and by the forward. */
typedef struct {
    int64_t x, xn, q, k, v, attn, tmp, gate, up, act[MAX_ACT_TYPES], rope, tls, part, rows, rec, qgate, total;
    /* Qwen3-Next's DeltaNet: [q | k | v] in, the conv's output, z, [b | a] per key head, [beta | g], the output */
    int64_t dn_qkv, dn_conv, dn_z, dn_ba, dn_bg, dn_out;
    int64_t act_bytes, tls_floats, part_floats;
    /* experts: router logits, each (row, slot)'s expert, weight and gathered position, the gathered rows'
     * token rows, per expert its first gathered position, the used experts, the gathered inputs (one per
     * activation type of gate and up), gate, up, down's input and output, and the routed sum */
    int64_t r_logits, sel_exp, sel_w, sel_pos, g_row, exp_off, used, g_act[2], g_gate, g_up, g_hact, g_out, moe_out;
    /* Mamba-2: the input projection's rows [z | xBC | dt], the conv's output, the scan's output */
    int64_t ssm_zxbcdt, ssm_xbc, ssm_y;
    /* latent attention: wq_a's output, [c | k_pe], q [nope | pe] per head, the absorbed queries [q_abs | q_pe]
     * and the attention's latent outputs per head (r + d_rope each), the per-head products' inputs head-major */
    int64_t mla_qa, mla_kv, mla_q, mla_qabs, mla_lat, mla_act;
} scratch_layout;

/* floats per row a recurrent layer's phase needs: LFM2's conv, in_proj's [B | C | x] and the gated conv */
static int64_t rec_row_floats(const oxl_model *m) {
    int64_t f = 0;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].kind == OXL_LAYER_SHORTCONV) f = OXL_MAX(f, 4 * (int64_t)m->n_embd);
    return f;
}

static int64_t dn_conv_dim(const oxl_deltanet *d) { return 2 * (int64_t)d->n_k_heads * d->d_k + (int64_t)d->n_v_heads * d->d_v; }
static int64_t dn_value_dim(const oxl_deltanet *d) { return (int64_t)d->n_v_heads * d->d_v; }

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
    /* per thread: a tile's scores (G, page) and output (G, hd), a running and a chunk partial */
    s.tls_floats = G * OXL_KV_PAGE + G * hd + 2 * item_floats(m);
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

/* ---- small helpers run by one thread on its share ---- */

static void norm_row(const oxl_kernel_table *kt, const oxl_model *m, const float *x, const float *w,
                     const float *b, float *y, int n) {
    if (!w) {   /* a block without this norm reads x itself (olmo2) */
        if (y != x) memcpy(y, x, (size_t)n * 4);
        return;
    }
    if (m->norm_type == OXL_NORM_LAYER) kt->ops.layer_norm(x, w, b, y, n, m->norm_eps);
    else kt->ops.rms_norm(x, w, y, n, m->norm_eps);
}

/* Activation buffers for the weights that read one input: distinct vec_dot types share nothing. */
typedef struct {
    int type[MAX_ACT_TYPES];
    void *buf[MAX_ACT_TYPES];
    int count;
} act_set;

static void act_set_init(act_set *a, const oxl_kernel_table *kt, char *base, const scratch_layout *s,
                         const oxl_weight *const *ws, int nw) {
    a->count = 0;
    for (int i = 0; i < nw; i++) {
        if (!ws[i] || !ws[i]->data) continue;
        const int vdt = kt->type[ws[i]->type].vec_dot_type;
        if (vdt == OXL_TYPE_F32) continue;
        int seen = 0;
        for (int j = 0; j < a->count; j++) seen |= a->type[j] == vdt;
        if (seen) continue;
        a->type[a->count] = vdt;
        a->buf[a->count] = base + s->act[a->count];
        a->count++;
    }
}

/* Quantize rows [r0, r1) of x (stride cols) into every activation type of the set. */
static void act_set_fill(const act_set *a, const oxl_kernel_table *kt, const float *x, int64_t cols, int r0, int r1) {
    for (int j = 0; j < a->count; j++) {
        const int64_t row = oxl_row_size(a->type[j], cols);
        for (int r = r0; r < r1; r++) kt->type[a->type[j]].from_float(x + (int64_t)r * cols, (char *)a->buf[j] + r * row, cols);
    }
}

static const void *act_for(const act_set *a, const oxl_kernel_table *kt, const oxl_weight *w, const float *x) {
    const int vdt = kt->type[w->type].vec_dot_type;
    if (vdt == OXL_TYPE_F32) return x;
    for (int j = 0; j < a->count; j++)
        if (a->type[j] == vdt) return a->buf[j];
    return NULL; /* unreachable when the set was built from the same weights */
}

/* Chunks of a product are handed out dynamically: a static half each left one thread waiting for
 * the other at every barrier whenever their speeds differed (a descheduled vCPU, a slower memory path),
 * which perf showed as a fifth of decode time spent spinning. A chunk is at least CHUNK_MIN_BYTES of
 * weights, so the atomic per chunk stays negligible, and at most CHUNKS_PER_THREAD per thread. */
#define CHUNKS_PER_THREAD 8
#define CHUNK_MIN_BYTES (32 << 10)

/* Y (n, ldy) [:, 0:rows) = X W^T, shared by the nth threads that all call this with the same `next`
 * (a counter zeroed before the parallel region, one per product of the forward). */
static void matmul_share(const oxl_kernel_table *kt, const oxl_weight *w, const void *xq, int n, float *Y,
                         int64_t ldy, atomic_int *next, int nth) {
    const int64_t align = n == 1 && !w->packed ? 4 : 16;   /* a repacked range starts at OXL_REPACK_ROW_ALIGN */
    const int64_t row_bytes = oxl_row_size(w->type, w->cols);
    int64_t n_chunks = OXL_MIN((int64_t)nth * CHUNKS_PER_THREAD, w->rows * row_bytes / CHUNK_MIN_BYTES);
    n_chunks = OXL_MIN(OXL_MAX(n_chunks, nth), (w->rows + align - 1) / align);
    for (int c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); c < n_chunks;
         c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        int64_t b, e;
        oxl_split_range(w->rows, (int)n_chunks, c, align, &b, &e);
        if (b >= e) continue;
        if (w->packed && !oxl_gemm_packed_range(kt, w->type, w->packed, w->cols, xq, n, Y, ldy, b, e)) continue;
        if (n == 1 && !kt->type[w->type].gemm_one_row) oxl_gemv_range(kt, w->type, w->data, w->cols, xq, Y, b, e);
        else oxl_gemm_range(kt, w->type, w->data, w->cols, xq, n, Y, ldy, b, e);
    }
}

/* a branch's output times the layer's residual scale (granite), before it joins the residual stream */
static void scale_residual(const oxl_layer *L, float *y, int n) {
    if (L->residual_scale == 0.0f || L->residual_scale == 1.0f) return;
    for (int i = 0; i < n; i++) y[i] *= L->residual_scale;
}

static void add_bias(float *y, const float *b, int n_rows, int cols, int64_t ld, int r0, int r1) {
    if (!b) return;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < cols; i++) y[(int64_t)r * ld + i] += b[i];
    (void)n_rows;
}

/* cos/sin for the n_rot/2 rotation pairs of one position, as ggml computes them (iterated theta). */
static void rope_cache(const oxl_rope *r, int pos, float *cs) {
    const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
    float theta = (float)pos;
    for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        float theta_interp = r->freq_scale * theta_extrap;
        float t = theta_interp, mscale = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            const float y = (i0 / 2 - r->corr_low) / OXL_MAX(0.001f, r->corr_high - r->corr_low);
            const float ramp = 1.0f - OXL_MIN(1.0f, OXL_MAX(0.0f, y));
            const float mix = ramp * r->ext_factor;
            t = theta_interp * (1 - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        cs[i0] = cosf(t) * mscale;
        cs[i0 + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

static void rope_apply(const oxl_rope *r, const float *cs, float *x) {
    if (r->mode == OXL_ROPE_NEOX) {
        const int half = r->n_rot / 2;
        for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
            const int i = i0 / 2;
            const float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cs[i0] - x1 * cs[i0 + 1];
            x[i + half] = x0 * cs[i0 + 1] + x1 * cs[i0];
        }
    } else {
        for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
            const float x0 = x[i0], x1 = x[i0 + 1];
            x[i0] = x0 * cs[i0] - x1 * cs[i0 + 1];
            x[i0 + 1] = x0 * cs[i0 + 1] + x1 * cs[i0];
        }
    }
}

/* bytes of one KV head's row of one position */
static inline int64_t kv_row_bytes(const oxl_kv_cache *kv) { return oxl_row_size(kv->type, kv->head_dim); }

/* row `row` of page `page` of KV head g within a layer's K or V */
static inline char *kv_row(const oxl_kv_cache *kv, void *layer_base, int g, int page, int row) {
    return (char *)layer_base + (((int64_t)g * kv->n_pages + page) * OXL_KV_PAGE + row) * kv_row_bytes(kv);
}

/* K or V rows of one position (n_head_kv * head_dim floats) into a layer of the paged cache */
static void store_kv(const oxl_kv_cache *kv, const oxl_kernel_table *kt, void *layer_base, int page, int row,
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

/* Per-thread buffers of attention: a tile's scores and output, a running and a chunk partial. */
typedef struct {
    float *scores, *tile, *state, *chunk;
} attn_tls;

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

static void activate(const oxl_kernel_table *kt, const oxl_layer *L, const float *g, const float *u, float *y, int n) {
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

static void lora_down(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
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

static void lora_up(const oxl_kernel_table *kt, const oxl_batch_seq *seqs, const int *row_seq, int n, int il,
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
static int64_t lora_t_floats(const oxl_model *m, const oxl_batch_seq *seqs, int n_seqs) {
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

/* ---- the forward ---- */

/* An LFM2 conv layer's weights against the model, its state within the slot. */
static int check_shortconv(const oxl_model *m, const oxl_layer *L) {
    const oxl_shortconv *c = &L->conv;
    if (!c->in_proj.data || !c->out_proj.data || !c->kernel || !L->attn_norm) return OXL_ERR_ARG;
    if (c->L < 2 || c->L > OXL_CONV_MAX_L || c->in_proj.rows != 3 * (int64_t)m->n_embd ||
        c->in_proj.cols != m->n_embd || c->out_proj.rows != m->n_embd || c->out_proj.cols != m->n_embd)
        return OXL_ERR_SHAPE;
    if (L->state_off < 0 || L->state_off + (int64_t)m->n_embd * (c->L - 1) > m->state_floats) return OXL_ERR_SHAPE;
    return OXL_OK;
}

/* A DeltaNet layer's sizes and weights against the model, its state within the slot. */
static int check_deltanet(const oxl_model *m, const oxl_layer *L) {
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

/* A latent attention layer's sizes against each other and its weights. */
static int check_mla(const oxl_model *m, const oxl_layer *L) {
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

/* A Mamba-2 layer's sizes against each other, its weights and the model's maxima (which sized the scratch). */
static int check_mamba2(const oxl_model *m, const oxl_layer *L) {
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
            const int rc = check_mamba2(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_SHORTCONV) {
            const int rc = check_shortconv(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_DELTANET) {
            const int rc = check_deltanet(m, L);
            if (rc) return rc;
        } else if (L->kind == OXL_LAYER_MLA) {
            if (L->n_head_kv != kv->n_head_kv || L->head_dim != kv->head_dim) return OXL_ERR_ARG;
            if (L->kv_layer < 0 || L->kv_layer >= kv->n_layer) return OXL_ERR_ARG;
            const int rc = check_mla(m, L);
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

/* ---- the phases ----
 *
 * A forward is a list of phases over one shared state: the embeddings, then per layer the phases its kind
 * lists (layer_phases), then the logits. Every thread runs every phase; a phase ends with the barrier(s) its
 * output needs before the next one reads it. A new layer kind is a new phase in that list. */

/* What every phase reads and writes, shared by the threads: the call, the scratch buffers, the batch rows. */
typedef struct {
    const oxl_model *m;
    const oxl_kv_cache *kv;
    const oxl_state_pool *rs;       /* recurrent state, or NULL */
    const oxl_batch_seq *seqs;
    int n_seqs;
    const int *seq_row0;            /* each sequence's first row */
    const oxl_kernel_table *kt;
    const scratch_layout *S;
    char *base;
    int n, n_out;                   /* rows of the step; rows that get logits */
    float *x, *xn, *tmp, *attn, *gate, *up, *qbuf, *kbuf, *vbuf, *parts, *logits, *hidden;
    const int *row_seq, *row_pos, *row_tok, *out_rows;   /* each row's sequence, position, token; logit rows */
    int64_t istride;                /* floats of one (row, KV head [, chunk]) attention partial */
    int any_lora;
    float *lt[3];                   /* LoRA's A x of up to three products of one phase */
    atomic_int *counters;           /* one work counter per product, taken in the same order by every thread */
    step_barrier *barrier;
} fwd_state;

/* One thread's view: its index and rows, its buffers, and what a layer's phases hand on to the next. */
typedef struct {
    int ith, nth, local_sense, call;
    int64_t t0, t1;                 /* this thread's rows */
    float *cs;                      /* RoPE cos/sin */
    attn_tls w;
    act_set acts;                   /* the quantized input of the next products */
    float *q, *k, *v;               /* the layer's Q, K, V rows (strided in a fused QKV) */
    int64_t ldq, ldk, ldv;
} fwd_thread;

typedef void (*fwd_phase)(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il);

static void sync_threads(const fwd_state *F, fwd_thread *T) { barrier_wait(F->barrier, &T->local_sense); }

/* the slot floats of sequence s */
static float *seq_state(const fwd_state *F, int s) {
    return F->rs->data + (int64_t)F->seqs[s].state_slot * F->rs->slot_floats;
}

/* the next product's work counter */
static atomic_int *next_counter(const fwd_state *F, fwd_thread *T) { return &F->counters[T->call++]; }

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

/* xn = norm(x); quantized for Q, K, V (or the recurrent block's input projection) */
static void phase_attn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_qkv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
        lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_Q, &L->wq, xn, n_embd, F->lt[0], ith, nth);
        if (!fused_qkv) {
            lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_K, &L->wk, xn, n_embd, F->lt[1], ith, nth);
            lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_V, &L->wv, xn, n_embd, F->lt[2], ith, nth);
        }
    }
    sync_threads(F, T);
    if (F->any_lora) {
        lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_Q, &L->wq, F->lt[0], T->q, T->ldq, ith, nth);
        if (!fused_qkv) {
            lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_K, &L->wk, F->lt[1], T->k, T->ldk, ith, nth);
            lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_V, &L->wv, F->lt[2], T->v, T->ldv, ith, nth);
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
static void phase_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
        store_kv(kv, kt, kv->k[L->kv_layer], page, prow, ki);
        store_kv(kv, kt, kv->v[L->kv_layer], page, prow, vi);
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
static void attend(const fwd_state *F, fwd_thread *T, const oxl_layer *L, const oxl_kv_cache *kv, const float *qsrc,
                   float *out) {
    const oxl_kernel_table *kt = F->kt;
    const int n = F->n, ith = T->ith, nth = T->nth;
    const int hd = L->head_dim, q_dim = L->n_head * hd;
    const int *row_seq = F->row_seq;
    const int64_t istride = F->istride;
    float *parts = F->parts;
    const int group = L->n_head / L->n_head_kv, nkv = L->n_head_kv;
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
        /* contiguous shares: each thread streams whole runs of chunks (the prefetcher follows) */
        int64_t ib, ie;
        oxl_split_range(item0[n], nth, ith, 1, &ib, &ie);
        int r = 0;
        for (int it = (int)ib; it < (int)ie; it++) {
            while (it >= item0[r + 1]) r++;
            const int p = attn_hi(F, r), lo = attn_lo(L, p), nc = attn_chunks(lo, p);
            const int g = (it - item0[r]) / nc, c = (it - item0[r]) % nc;
            int tb, te;
            chunk_span(lo, p, c, &tb, &te);
            attn_chunk(kt, L, kv, L->kv_layer, F->seqs[row_seq[r]].pages,
                       qsrc + (int64_t)r * q_dim + (int64_t)g * group * hd, g, p, tb, te, parts + (int64_t)it * istride,
                       &T->w);
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
        /* (row, KV head) items dealt round-robin: a causal item's cost grows with its position,
         * so contiguous shares would leave the first thread idle */
        for (int64_t it = ith; it < (int64_t)n * nkv; it += nth) {
            const int r = (int)(it / nkv), g = (int)(it % nkv);
            attn_item(kt, L, kv, L->kv_layer, F->seqs[row_seq[r]].pages, qsrc + (int64_t)r * q_dim, g, attn_hi(F, r),
                      out + (int64_t)r * q_dim, &T->w);
        }
    }
    sync_threads(F, T);
}

/* attention over the cache: attn (n, q_dim) */
static void phase_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int q_dim = L->n_head * L->head_dim;
    const int q_compact = L->wk.data == NULL || L->attn_gate;   /* q already in attn (phase_rope_store) */
    attend(F, T, L, F->kv, q_compact ? F->attn : T->q, q_compact ? F->xn : F->attn);  /* xn is free now; keep q and
                                                                                          out apart */
    (void)il;
    if (q_compact) {
        for (int64_t i = T->t0; i < T->t1; i++) memcpy(F->attn + i * q_dim, F->xn + i * q_dim, (size_t)q_dim * 4);
    }
}

/* output projection: tmp (n, n_embd) = attn wo^T; LoRA */
static void phase_attn_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
    if (F->any_lora) lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_O, &L->wo, F->attn, q_dim, F->lt[0], T->ith, T->nth);
    sync_threads(F, T);
    if (F->any_lora) {
        lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_O, &L->wo, F->lt[0], F->tmp, n_embd, T->ith, T->nth);
        sync_threads(F, T);
    }
}

/* LFM2's conv block: tmp (n, n_embd) = out_proj(C * conv(B * x)), [B | C | x] = in_proj(xn) (n, 3 n_embd) in
 * rec; the gated conv (n, n_embd) after it. The conv runs per sequence over its rows in order, each thread a
 * range of channels of every sequence (layers/shortconv.h: channels are independent, so the split changes
 * nothing), from and into the sequence's conv state. */
static void phase_shortconv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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

/* x += attention output (biased, post-normed); xn = the FFN's normed input, quantized for gate and up */
static void phase_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_mixer_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_block_ffn_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_ffn(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
        lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_UP, &L->w_up, xn, n_embd, F->lt[0], ith, nth);
        if (L->w_gate.data)
            lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_GATE, &L->w_gate, xn, n_embd, F->lt[1], ith, nth);
    }
    sync_threads(F, T);
    if (F->any_lora) {
        lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_UP, &L->w_up, F->lt[0], up, ldu, ith, nth);
        if (L->w_gate.data)
            lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_GATE, &L->w_gate, F->lt[1], gate, n_ff, ith, nth);
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
        if (gi) activate(kt, L, gi, ui, hi, n_ff);
        else activate(kt, L, ui, NULL, hi, n_ff);
    }
    act_set_fill(&T->acts, kt, gate, n_ff, (int)T->t0, (int)T->t1);
    sync_threads(F, T);

    matmul_share(kt, &L->w_down, act_for(&T->acts, kt, &L->w_down, gate), n, F->tmp, n_embd, next_counter(F, T), nth);
    if (F->any_lora) lora_down(kt, F->seqs, F->row_seq, n, il, OXL_LORA_DOWN, &L->w_down, gate, n_ff, F->lt[0], ith, nth);
    sync_threads(F, T);
    if (F->any_lora) {
        lora_up(kt, F->seqs, F->row_seq, n, il, OXL_LORA_DOWN, &L->w_down, F->lt[0], F->tmp, n_embd, ith, nth);
        sync_threads(F, T);
    }
}


/* ---- sparse experts ----
 *
 * As ggml-cpu's mul_mat_id: the router picks each row's k experts; the step's (row, expert) pairs are
 * bucketed by expert once (expert order, rows in order within one); each chosen expert's gate, up and down
 * rows are then read once for all of its rows by the ordinary multi-row kernel, the threads taking
 * (expert, row chunk) items from one counter; experts nobody chose are never touched. Each product element is
 * the float vec_dot gives for it (matmul.h), and a row's output is its experts' outputs summed in the order
 * the router ranked them, so a token's result does not depend on the other rows of the step or the threads. */

/* rows [r0, r1) of the expert product Y (n, ldy) = X W_e^T, W_e = rows [e * rows_e, (e + 1) * rows_e) of w */
static void expert_range(const oxl_kernel_table *kt, const oxl_weight *w, int64_t rows_e, int e, const void *xq,
                         int n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    const char *We = (const char *)w->data + (int64_t)e * rows_e * oxl_row_size(w->type, w->cols);
    if (n == 1 && !kt->type[w->type].gemm_one_row) oxl_gemv_range(kt, w->type, We, w->cols, xq, Y, r0, r1);
    else oxl_gemm_range(kt, w->type, We, w->cols, xq, n, Y, ldy, r0, r1);
}

/* chunks of one expert's matrix of `rows` rows: each at least CHUNK_MIN_BYTES, 16-row aligned */
static int expert_chunks(const oxl_weight *w, int64_t rows, int nth) {
    const int64_t bytes = rows * oxl_row_size(w->type, w->cols);
    int64_t c = OXL_MIN((int64_t)nth * CHUNKS_PER_THREAD, bytes / CHUNK_MIN_BYTES);
    return (int)OXL_MIN(OXL_MAX(c, 1), (rows + 15) / 16);
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

/* Group-limited routing (DeepSeek-V3, llama.cpp's n_expert_groups): a group's score is the sum of its two best
 * selection scores (its one where a group has one expert); the n_group_used best groups (ties to the lower
 * index) keep their experts' scores, the others' become -inf. */
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
        gs[g] = per > 1 ? b1 + b2 : b1;
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

/* The mixture: (tmp, or moe_out beside a shared expert) (n, n_embd) = sum over each row's chosen experts of
 * weight * down(act(gate(xn)) * up(xn)); xn quantized by phase_ffn_norm */
static void phase_experts(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
    float *out = L->w_up.data ? (float *)(base + S->moe_out) : F->tmp;
    (void)il;

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
            activate(kt, L, h, u, h, ff);
            if (hvdt != OXL_TYPE_F32) kt->type[hvdt].from_float(h, g_hact + pos * hrb, ff);
        }
    }
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
}

/* beside a shared expert: tmp = routed + sigmoid(shexp_gate . xn) * shared (or + shared without the gate) */
static void phase_shared_expert_sum(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int n_embd = F->m->n_embd;
    const float *moe = (const float *)(F->base + F->S->moe_out);
    for (int64_t i = T->t0; i < T->t1; i++) {
        float *y = F->tmp + i * n_embd;
        const float *r = moe + i * n_embd;
        float s = 1.0f;
        if (L->shexp_gate) s = 1.0f / (1.0f + expf(-F->kt->ops.dot_f32(L->shexp_gate, F->xn + i * n_embd, n_embd)));
        for (int d = 0; d < n_embd; d++) y[d] = r[d] + s * y[d];
    }
    (void)il;
}

/* x += FFN output (biased, post-normed) */
static void phase_ffn_residual(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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

/* ---- Mamba-2 (layers/ssm.h: the kernels and the order they sum in) ---- */


/* xn = norm(x); quantized for the input projection */
static void phase_ssm_norm(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_ssm_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    float *zx = (float *)(F->base + F->S->ssm_zxbcdt);
    matmul_share(F->kt, &L->ssm_in, act_for(&T->acts, F->kt, &L->ssm_in, F->xn), F->n, zx, L->ssm_in.rows,
                 next_counter(F, T), T->nth);
    sync_threads(F, T);
    (void)il;
}

#define SSM_CONV_CHANNELS 256   /* channels per conv work item */

/* xbc (n, conv_dim) = SiLU(conv(xBC) + b), per (sequence, channel block); a sequence at position 0 starts
 * from a zero conv state */
static void phase_ssm_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
 * ssm state */
static void phase_ssm_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const int di = L->ssm_d_inner, ds = L->ssm_d_state, ng = L->ssm_n_group, nh = L->ssm_n_head;
    const int conv_dim = di + 2 * ng * ds, hd = di / nh;
    const int64_t ld_in = L->ssm_in.rows;
    const float *zx = (const float *)(F->base + F->S->ssm_zxbcdt);
    const float *xbc = (const float *)(F->base + F->S->ssm_xbc);
    float *y = (float *)(F->base + F->S->ssm_y);
    for (int64_t it = T->ith; it < (int64_t)F->n_seqs * nh; it += T->nth) {
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
static void phase_ssm_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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

/* ---- Qwen3-Next's gated DeltaNet (layers/deltanet.h: the rule and the order it sums in) ---- */

/* [q | k | v] (n, conv_dim), z (n, value_dim), [b | a] (n, 2 n_v_heads) from xn (quantized by phase_attn_norm) */
static void phase_deltanet_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_deltanet_conv(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_deltanet_scan(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
static void phase_deltanet_out(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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

/* ---- multi-head latent attention (layers/mla.h: the absorbed form and its order) ---- */

/* kv (n, r + d_rope) = xn wkv_a^T; q (n, n_head (d_nope + d_rope)) = xn wq^T, or wq_b(rms_norm(xn wq_a^T)) */
static void phase_mla_in(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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

/* per row: c RMS-normed, k_pe rotated, [c | k_pe] into the cache; each head's q_pe rotated into its absorbed query
 * [q_abs | q_pe] (qabs), its q_nope quantized head-major for wk_b; then q_abs_h = W_kb_h q_nope_h, the threads
 * taking (head, row chunk) items */
static void phase_mla_rope_store(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
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
        store_kv(F->kv, kt, F->kv->k[L->kv_layer], page, prow, c);
        for (int h = 0; h < nh; h++) {
            float *pe = qabs + i * ld_abs + h * hd + r;
            memcpy(pe, qi + h * qk + dn, (size_t)dr * 4);
            rope_apply(&L->rope, T->cs, pe);
            oxl_mla_act_row(kt, vdt, qi + h * qk, dn, qn_act + ((int64_t)h * n + i) * rb);
        }
    }
    sync_threads(F, T);
    const int c_h = expert_chunks(&a->wk_b, r, T->nth);
    atomic_int *next = next_counter(F, T);
    for (int it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < nh * c_h;
         it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        const int h = it / c_h, ch = it % c_h;
        int64_t b, e;
        oxl_split_range(r, c_h, ch, 16, &b, &e);
        if (b < e)
            oxl_mla_head_range(kt, a->wk_b.type, a->wk_b.data, r, dn, h, qn_act + (int64_t)h * n * rb, n,
                               qabs + h * hd, ld_abs, b, e);
    }
    sync_threads(F, T);
    (void)il;
}

/* lat (n, n_head (r + d_rope)) = attention of the absorbed queries over the latent rows, which are the values too
 * (the cache's K pages read as V); then o_h = W_vb_h lat_h (the first r values of each head's output) into attn
 * (n, n_head d_v), the threads taking (head, row chunk) items */
static void phase_mla_attention(const fwd_state *F, fwd_thread *T, const oxl_layer *L, int il) {
    const oxl_kernel_table *kt = F->kt;
    const oxl_mla *a = &L->mla;
    const scratch_layout *S = F->S;
    const int n = F->n, nh = L->n_head, r = a->kv_lora_rank, dv = a->d_v;
    const int64_t hd = L->head_dim, ld_lat = (int64_t)nh * hd;
    float *lat = (float *)(F->base + S->mla_lat);
    oxl_kv_cache latent = *F->kv;
    latent.v = latent.k;
    attend(F, T, L, &latent, (const float *)(F->base + S->mla_qabs), lat);
    char *lat_act = F->base + S->mla_act;
    const int vdt = kt->type[a->wv_b.type].vec_dot_type;
    const int64_t rb = oxl_mla_act_row_size(vdt, r);
    for (int64_t i = T->t0; i < T->t1; i++)
        for (int h = 0; h < nh; h++) oxl_mla_act_row(kt, vdt, lat + i * ld_lat + h * hd, r, lat_act + ((int64_t)h * n + i) * rb);
    sync_threads(F, T);
    const int c_h = expert_chunks(&a->wv_b, dv, T->nth);
    atomic_int *next = next_counter(F, T);
    for (int it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); it < nh * c_h;
         it = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        const int h = it / c_h, ch = it % c_h;
        int64_t b, e;
        oxl_split_range(dv, c_h, ch, 16, &b, &e);
        if (b < e)
            oxl_mla_head_range(kt, a->wv_b.type, a->wv_b.data, dv, r, h, lat_act + (int64_t)h * n * rb, n,
                               F->attn + (int64_t)h * dv, (int64_t)nh * dv, b, e);
    }
    sync_threads(F, T);
    (void)il;
}

/* The phases of one layer, in order; returns how many. */
#define MAX_LAYER_PHASES 12
static int layer_phases(const oxl_layer *L, fwd_phase *ph) {
    int k = 0;
    if (L->kind == OXL_LAYER_MAMBA2) {
        ph[k++] = phase_ssm_norm;
        ph[k++] = phase_ssm_in;
        ph[k++] = phase_ssm_conv;
        ph[k++] = phase_ssm_scan;
        ph[k++] = phase_ssm_out;
    } else if (L->kind == OXL_LAYER_SHORTCONV) {
        ph[k++] = phase_attn_norm;
        ph[k++] = phase_shortconv;
    } else if (L->kind == OXL_LAYER_DELTANET) {
        ph[k++] = phase_attn_norm;
        ph[k++] = phase_deltanet_in;
        ph[k++] = phase_deltanet_conv;
        ph[k++] = phase_deltanet_scan;
        ph[k++] = phase_deltanet_out;
    } else if (L->kind == OXL_LAYER_MLA) {
        ph[k++] = phase_attn_norm;
        ph[k++] = phase_mla_in;
        ph[k++] = phase_mla_rope_store;
        ph[k++] = phase_mla_attention;
        ph[k++] = phase_attn_out;
    } else if (L->kind == OXL_LAYER_ATTENTION) {
        ph[k++] = phase_attn_norm;
        ph[k++] = phase_qkv;
        ph[k++] = phase_rope_store;
        ph[k++] = phase_attention;
        ph[k++] = phase_attn_out;
    }
    if (L->kind == OXL_LAYER_FFN) {   /* no mixer: the FFN reads x itself, normed */
        ph[k++] = phase_block_ffn_norm;
        ph[k++] = phase_ffn;
        ph[k++] = phase_ffn_residual;
        return k;
    }
    if (!L->w_up.data && L->n_expert == 0) {   /* no FFN after the mixer (mamba2, nemotron_h) */
        if (L->kind == OXL_LAYER_ATTENTION) ph[k++] = phase_mixer_residual;   /* Mamba-2's ssm_out adds its own */
        return k;
    }
    ph[k++] = phase_ffn_norm;
    if (L->n_expert > 0) {
        ph[k++] = phase_experts;
        if (L->w_up.data) {   /* the shared expert */
            ph[k++] = phase_ffn;
            ph[k++] = phase_shared_expert_sum;
        }
    } else {
        ph[k++] = phase_ffn;
    }
    ph[k++] = phase_ffn_residual;
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
    T.w.scores = (float *)(F->base + F->S->tls) + (int64_t)ith * F->S->tls_floats;
    T.w.tile = T.w.scores + (int64_t)G * OXL_KV_PAGE;
    T.w.state = T.w.tile + (int64_t)G * hd;
    T.w.chunk = T.w.state + F->istride;
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
    const int64_t lt = any_lora ? lora_t_floats(m, seqs, n_seqs) : 0;
    float *lora_t = NULL;
    if (lt > 0 && !(lora_t = malloc((size_t)(3 * lt) * sizeof(float)))) {
        free(seq_row0);
        return OXL_ERR_NOMEM;
    }

    /* one work counter per product: at most 12 per layer (q, k, v, o, gate, up, down; the experts' router,
     * gate|up, down; latent attention's q_a, q_b, kv_a, k_b, v_b, o) and the output */
    const int n_counters = m->n_layer * 12 + 1;
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
