/* The fused forward pass: every layer of a batch of tokens in one OpenMP parallel region. */
#include <math.h>
#include <stdlib.h>

#include "forward.h"
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

#define OXL_BARRIER() barrier_wait(&barrier, &local_sense)

#define ALIGN 64
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

/* Split-cache attention (decode, a few queries): partials per (query, head) per thread. */
#define SPLIT_ATTN_MAX_Q 4
#define ATTN_TILE 32

/* floats of one thread's partials: (max, sum, out[head_dim]) per (query, head) (n_head <= q_dim), then a
 * group's tile output (<= q_dim) and its tile scores (n_head x ATTN_TILE) */
static int64_t part_floats(const oxl_model *m) {
    int n_head_max = 1;
    for (int il = 0; il < m->n_layer; il++) n_head_max = OXL_MAX(n_head_max, m->layers[il].n_head);
    return (int64_t)SPLIT_ATTN_MAX_Q * 3 * m->q_dim_max + m->q_dim_max + (int64_t)ATTN_TILE * n_head_max;
}

/* the most query heads that share one KV head, over the layers */
static int group_max(const oxl_model *m) {
    int g = 1;
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].n_head_kv > 0) g = OXL_MAX(g, m->layers[il].n_head / m->layers[il].n_head_kv);
    return g;
}

/* The scratch layout, computed the same way by the size query and by the forward. */
typedef struct {
    int64_t x, xn, q, k, v, attn, tmp, gate, up, act[MAX_ACT_TYPES], scores, rope, part, total;
    int64_t act_bytes;
} scratch_layout;

static scratch_layout layout(const oxl_model *m, int n_batch, int n_ctx, int n_threads) {
    scratch_layout s;
    int64_t off = 0;
    const int64_t n = n_batch;
    const int64_t widest = OXL_MAX(OXL_MAX(m->n_embd, m->n_ff_max), m->q_dim_max);
#define TAKE(field, bytes) do { s.field = off; off += align_up(bytes); } while (0)
    TAKE(x, n * m->n_embd * 4);
    TAKE(xn, n * m->n_embd * 4);
    TAKE(q, n * OXL_MAX(m->q_dim_max, 1) * 4 * 3);  /* room for a fused QKV output */
    TAKE(k, n * m->kv_dim * 4);
    TAKE(v, n * m->kv_dim * 4);
    TAKE(attn, n * m->q_dim_max * 4);
    TAKE(tmp, n * OXL_MAX(m->n_embd, m->n_vocab > 0 ? m->n_embd : 0) * 4);
    TAKE(gate, n * m->n_ff_max * 4 * 2);           /* room for a fused gate|up output */
    TAKE(up, n * m->n_ff_max * 4);
    s.act_bytes = n * max_act_row(widest);
    for (int i = 0; i < MAX_ACT_TYPES; i++) TAKE(act[i], s.act_bytes);
    TAKE(scores, (int64_t)n_threads * n_ctx * group_max(m) * 4);   /* a group's scores per thread */
    TAKE(rope, (int64_t)n_threads * 2 * OXL_MAX(m->q_dim_max, m->kv_dim) * 4);
    TAKE(part, (int64_t)n_threads * part_floats(m) * 4);
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
    const int64_t align = n == 1 ? 4 : 16;
    const int64_t row_bytes = oxl_row_size(w->type, w->cols);
    int64_t n_chunks = OXL_MIN((int64_t)nth * CHUNKS_PER_THREAD, w->rows * row_bytes / CHUNK_MIN_BYTES);
    n_chunks = OXL_MIN(OXL_MAX(n_chunks, nth), (w->rows + align - 1) / align);
    for (int c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed); c < n_chunks;
         c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) {
        int64_t b, e;
        oxl_split_range(w->rows, (int)n_chunks, c, align, &b, &e);
        if (b >= e) continue;
        if (n == 1) oxl_gemv_range(kt, w->type, w->data, w->cols, xq, Y, b, e);
        else oxl_gemm_range(kt, w->type, w->data, w->cols, xq, n, Y, ldy, b, e);
    }
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

/* element offset of KV head g's row at position t within a layer */
static inline int64_t kv_at(const oxl_kv_cache *kv, int g, int t) {
    return ((int64_t)g * kv->n_ctx + t) * kv->head_dim;
}

/* K or V rows of one position (n_head_kv * head_dim floats) into the head-major cache of a layer */
static void store_kv(const oxl_kv_cache *kv, const oxl_kernel_table *kt, void *layer_base, int pos, const float *src) {
    const int hd = kv->head_dim;
    for (int g = 0; g < kv->n_head_kv; g++) {
        const int64_t at = kv_at(kv, g, pos);
        if (kv->type == OXL_TYPE_F16) kt->ops.fp32_to_fp16(src + g * hd, (oxl_half *)layer_base + at, hd);
        else memcpy((float *)layer_base + at, src + g * hd, (size_t)hd * 4);
    }
}

/* the first cache position a query at `pos` attends to */
static inline int attn_lo(const oxl_layer *L, int pos) {
    return L->sliding_window > 0 ? OXL_MAX(0, pos - L->sliding_window + 1) : 0;
}

/* scores (group, cnt) = attn_scale * (the group's query heads qg) . (KV head g's K rows t0 .. t0 + cnt),
 * soft-capped where the layer says so */
static void group_scores(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                         const float *qg, int g, int t0, int cnt, float *scores) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    const int64_t at = kv_at(kv, g, t0);
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_scores_f16_group(qg, group, (const oxl_half *)kv->k[layer] + at, hd, cnt, hd, L->attn_scale,
                                      scores);
    } else {
        const float *K = (const float *)kv->k[layer] + at;
        for (int k = 0; k < group; k++)
            for (int t = 0; t < cnt; t++)
                scores[k * cnt + t] = L->attn_scale * kt->ops.dot_f32(qg + k * hd, K + (int64_t)t * hd, hd);
    }
    if (L->attn_softcap > 0.0f)
        for (int t = 0; t < group * cnt; t++) scores[t] = L->attn_softcap * tanhf(scores[t] / L->attn_softcap);
}

/* out (group, hd) = weights (group, cnt) . (KV head g's V rows t0 .. t0 + cnt) */
static void group_values(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                         const float *weights, int g, int t0, int cnt, float *out) {
    const int hd = L->head_dim, group = L->n_head / L->n_head_kv;
    const int64_t at = kv_at(kv, g, t0);
    if (kv->type == OXL_TYPE_F16) {
        kt->ops.attn_values_f16_group(weights, group, (const oxl_half *)kv->v[layer] + at, hd, cnt, hd, out);
    } else {
        const float *V = (const float *)kv->v[layer] + at;
        memset(out, 0, (size_t)group * hd * 4);
        for (int k = 0; k < group; k++)
            for (int t = 0; t < cnt; t++) kt->ops.axpy(out + k * hd, weights[k * cnt + t], V + (int64_t)t * hd, hd);
    }
}

void oxl_attention(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv, int layer,
                   const float *q, int n_q, const int *pos_q, float *out, float *scores, int ith, int nth) {
    const int hd = L->head_dim, q_dim = L->n_head * hd;
    const int group = L->n_head / L->n_head_kv;
    /* work items are (query, KV head): the group's heads read each K/V row together. Dealt round-robin:
     * a causal item's cost grows with its position, so contiguous shares would leave the first thread idle */
    const int64_t total = (int64_t)n_q * L->n_head_kv;
    for (int64_t w = ith; w < total; w += nth) {
        const int i = (int)(w / L->n_head_kv), g = (int)(w % L->n_head_kv);
        const int p = pos_q[i], lo = attn_lo(L, p), cnt = p - lo + 1;
        group_scores(kt, L, kv, layer, q + (int64_t)i * q_dim + (int64_t)g * group * hd, g, lo, cnt, scores);
        for (int k = 0; k < group; k++) kt->ops.softmax(scores + k * cnt, cnt);
        group_values(kt, L, kv, layer, scores, g, lo, cnt, out + (int64_t)i * q_dim + (int64_t)g * group * hd);
    }
}

/* Attention of a few queries (decode), split over the cache instead of over heads: splitting 9 heads
 * over 2 threads leaves one idle a ninth of the time. Here each thread takes a contiguous share of the
 * cache positions and, KV head by KV head, walks that head's rows (one contiguous stream of K and one
 * of V in the head-major cache) in tiles of ATTN_TILE rows that every query head of the group reads
 * while they are in L1, with an online softmax: it leaves (max m, sum l, unnormalized output o) per
 * (query, head) in `part`. attention_split_merge then combines the threads' partials (flash-decoding). */
static void attention_split_partial(const oxl_kernel_table *kt, const oxl_layer *L, const oxl_kv_cache *kv,
                                    int layer, const float *q, int n_q, const int *pos_q, float *part, int ith,
                                    int nth) {
    const int hd = L->head_dim, q_dim = L->n_head * hd;
    const int group = L->n_head / L->n_head_kv;
    const int64_t stride = hd + 2;
    float *tmp = part + (int64_t)n_q * L->n_head * stride;     /* (group, hd) tile output */
    float *scores = tmp + q_dim;                                /* (group, ATTN_TILE) */
    /* this thread's positions: a share of [lo of the first query, last position] */
    const int lo_all = attn_lo(L, pos_q[0]);
    int64_t b, e;
    oxl_split_range(pos_q[n_q - 1] + 1 - lo_all, nth, ith, 8, &b, &e);
    b += lo_all;
    e += lo_all;
    for (int i = 0; i < n_q; i++) {
        const int p = pos_q[i];
        const int lo = attn_lo(L, p);
        const int t_begin = (int)OXL_MAX(b, lo), t_end = (int)OXL_MIN(e, (int64_t)p + 1);
        for (int h = 0; h < L->n_head; h++) {
            float *ph = part + ((int64_t)i * L->n_head + h) * stride;
            ph[0] = -INFINITY;
            ph[1] = 0.0f;
            memset(ph + 2, 0, (size_t)hd * 4);
        }
        for (int g = 0; g < L->n_head_kv; g++) {
            /* the group's heads g * group .. (g + 1) * group - 1 read the same K/V rows */
            const float *qg = q + (int64_t)i * q_dim + (int64_t)g * group * hd;
            for (int t0 = t_begin; t0 < t_end; t0 += ATTN_TILE) {
                const int cnt = OXL_MIN(ATTN_TILE, t_end - t0);
                group_scores(kt, L, kv, layer, qg, g, t0, cnt, scores);
                float cs[group];   /* per head: how much the running output shrinks for the new max */
                for (int k = 0; k < group; k++) {
                    float *ph = part + ((int64_t)i * L->n_head + g * group + k) * stride, *sk = scores + k * cnt;
                    float m_tile = -INFINITY;
                    for (int t = 0; t < cnt; t++) m_tile = sk[t] > m_tile ? sk[t] : m_tile;
                    const float m_new = ph[0] > m_tile ? ph[0] : m_tile;
                    cs[k] = expf(ph[0] - m_new);   /* 0 on the first tile (m = -inf) */
                    ph[1] = ph[1] * cs[k] + kt->ops.exp_shift_sum(sk, cnt, m_new);
                    ph[0] = m_new;
                }
                group_values(kt, L, kv, layer, scores, g, t0, cnt, tmp);
                for (int k = 0; k < group; k++) {
                    float *o = part + ((int64_t)i * L->n_head + g * group + k) * stride + 2;
                    const float *tk = tmp + k * hd;
                    for (int d = 0; d < hd; d++) o[d] = o[d] * cs[k] + tk[d];
                }
            }
        }
    }
}

/* out (n_q, q_dim) from every thread's partials; split by (query, head). */
static void attention_split_merge(const oxl_layer *L, int n_q, const float *parts, int64_t part_stride,
                                  float *out, int ith, int nth) {
    const int hd = L->head_dim, q_dim = L->n_head * hd;
    const int64_t stride = hd + 2;
    int64_t b, e;
    oxl_split_range((int64_t)n_q * L->n_head, nth, ith, 1, &b, &e);
    for (int64_t w = b; w < e; w++) {
        const int i = (int)(w / L->n_head), h = (int)(w % L->n_head);
        float mx = -INFINITY, sum = 0.0f;
        for (int t = 0; t < nth; t++) mx = fmaxf(mx, parts[t * part_stride + w * stride]);
        float *o = out + (int64_t)i * q_dim + h * hd;
        memset(o, 0, (size_t)hd * 4);
        for (int t = 0; t < nth; t++) {
            const float *ph = parts + t * part_stride + w * stride;
            if (ph[1] == 0.0f) continue;   /* a thread with no positions of this query */
            const float c = expf(ph[0] - mx);
            sum += ph[1] * c;
            for (int d = 0; d < hd; d++) o[d] += c * ph[2 + d];
        }
        const float inv = 1.0f / sum;
        for (int d = 0; d < hd; d++) o[d] *= inv;
    }
}

static void activate(const oxl_kernel_table *kt, int act, const float *g, const float *u, float *y, int n) {
    switch (act) {
    case OXL_ACT_GELU_TANH: kt->ops.gelu_mul(g, u, y, n); break;
    case OXL_ACT_GELU_ERF: kt->ops.gelu_erf_mul(g, u, y, n); break;
    default:
        if (u) kt->ops.silu_mul(g, u, y, n);
        else {
            for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i]));
        }
    }
}

/* ---- the forward ---- */

static int check_model(const oxl_model *m, const oxl_kv_cache *kv, const int32_t *tokens, int n, int pos0) {
    if (!m || !kv || !tokens || n <= 0 || pos0 < 0) return OXL_ERR_ARG;
    if ((int64_t)pos0 + n > kv->n_ctx) return OXL_ERR_SIZE;
    for (int il = 0; il < m->n_layer; il++)   /* the cache's head-major layout must be the layers' */
        if (m->layers[il].n_head_kv != kv->n_head_kv || m->layers[il].head_dim != kv->head_dim) return OXL_ERR_ARG;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab) return OXL_ERR_ARG;
    return OXL_OK;
}

int oxl_forward(const oxl_model *m, const oxl_kv_cache *kv, const int32_t *tokens, int n, int pos0,
                float *logits, int all_logits, float *hidden, void *scratch_raw, int64_t scratch_size,
                int n_threads) {
    int rc = check_model(m, kv, tokens, n, pos0);
    if (rc) return rc;
    if (n_threads < 1) n_threads = 1;
    const scratch_layout S = layout(m, n, kv->n_ctx, n_threads);
    if (scratch_size < S.total) return OXL_ERR_SIZE;
    char *base = (char *)(((uintptr_t)scratch_raw + ALIGN - 1) / ALIGN * ALIGN);
    const oxl_kernel_table *kt = oxl_kernels();
    float *x = (float *)(base + S.x), *xn = (float *)(base + S.xn), *tmp = (float *)(base + S.tmp);
    float *attn = (float *)(base + S.attn), *gate = (float *)(base + S.gate), *up = (float *)(base + S.up);
    float *qbuf = (float *)(base + S.q), *kbuf = (float *)(base + S.k), *vbuf = (float *)(base + S.v);
    const int n_embd = m->n_embd;
    int pos[n];  /* positions of the batch (n <= n_batch, small) */
    for (int i = 0; i < n; i++) pos[i] = pos0 + i;
    const int n_out = all_logits ? n : 1;      /* rows that get logits */
    const int64_t pstride = part_floats(m);    /* floats of one thread's split-attention partials */
    const int out0 = all_logits ? 0 : n - 1;   /* first of them */

    /* one work counter per product: at most 7 per layer (q, k, v, o, gate, up, down) and the output */
    const int n_counters = m->n_layer * 7 + 1;
    atomic_int counters[n_counters];
    for (int i = 0; i < n_counters; i++) atomic_init(&counters[i], 0);

    step_barrier barrier;
    atomic_init(&barrier.count, 0);
    atomic_init(&barrier.sense, 0);
    barrier.n = 1;
#if OXL_HAVE_OPENMP
#pragma omp parallel num_threads(n_threads)
#endif
    {
#if OXL_HAVE_OPENMP
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
#pragma omp single
        barrier.n = nth;  /* the runtime may give fewer threads than asked; single ends in a barrier */
#else
        const int ith = 0, nth = 1;
#endif
        int local_sense = 0;
        int call = 0;   /* index of this thread's next product, the same sequence on every thread */
        float *scores = (float *)(base + S.scores) + (int64_t)ith * kv->n_ctx * group_max(m);
        float *parts = (float *)(base + S.part);      /* every thread's attention partials, pstride apart */
        float *cs = (float *)(base + S.rope) + (int64_t)ith * 2 * OXL_MAX(m->q_dim_max, m->kv_dim);
        int64_t t0, t1;  /* this thread's tokens */
        oxl_split_range(n, nth, ith, 1, &t0, &t1);
        act_set acts;

        /* embeddings: x[i] = embd[tokens[i]] * embd_scale */
        {
            const int64_t row = oxl_row_size(m->tok_embd_type, n_embd);
            for (int64_t i = t0; i < t1; i++) {
                kt->type[m->tok_embd_type].to_float((const char *)m->tok_embd + tokens[i] * row, x + i * n_embd, n_embd);
                if (m->embd_scale != 1.0f)
                    for (int j = 0; j < n_embd; j++) x[i * n_embd + j] *= m->embd_scale;
            }
        }

        for (int il = 0; il < m->n_layer; il++) {
            const oxl_layer *L = &m->layers[il];
            const int hd = L->head_dim, q_dim = L->n_head * hd, kv_dim = L->n_head_kv * hd;
            const int fused_qkv = L->wk.data == NULL;
            const oxl_weight *qkv_ws[3] = {&L->wq, &L->wk, &L->wv};
            act_set_init(&acts, kt, base, &S, qkv_ws, 3);

            /* xn = norm(x); quantized for Q, K, V */
            for (int64_t i = t0; i < t1; i++) {
                norm_row(kt, m, x + i * n_embd, L->attn_norm, L->attn_norm_b, xn + i * n_embd, n_embd);
            }
            act_set_fill(&acts, kt, xn, n_embd, (int)t0, (int)t1);
            OXL_BARRIER();

            /* Q, K, V projections: (n, q_dim), (n, kv_dim), (n, kv_dim) */
            float *q = qbuf, *k = kbuf, *v = vbuf;
            int64_t ldq = q_dim, ldk = kv_dim, ldv = kv_dim;
            if (fused_qkv) {
                const int64_t ld = L->wq.rows;  /* q_dim + 2 kv_dim */
                matmul_share(kt, &L->wq, act_for(&acts, kt, &L->wq, xn), n, qbuf, ld, &counters[call++], nth);
                k = qbuf + q_dim;
                v = qbuf + q_dim + kv_dim;
                ldq = ldk = ldv = ld;
            } else {
                matmul_share(kt, &L->wq, act_for(&acts, kt, &L->wq, xn), n, q, ldq, &counters[call++], nth);
                matmul_share(kt, &L->wk, act_for(&acts, kt, &L->wk, xn), n, k, ldk, &counters[call++], nth);
                matmul_share(kt, &L->wv, act_for(&acts, kt, &L->wv, xn), n, v, ldv, &counters[call++], nth);
            }
            OXL_BARRIER();

            /* biases, per-head q/k norms, RoPE, then K and V into the cache; split by token */
            for (int64_t i = t0; i < t1; i++) {
                float *qi = q + i * ldq, *ki = k + i * ldk, *vi = v + i * ldv;
                add_bias(qi, L->bq, 1, q_dim, 0, 0, 1);
                add_bias(ki, L->bk, 1, kv_dim, 0, 0, 1);
                add_bias(vi, L->bv, 1, kv_dim, 0, 0, 1);
                if (L->q_norm)
                    for (int h = 0; h < L->n_head; h++) kt->ops.rms_norm(qi + h * hd, L->q_norm, qi + h * hd, hd, m->norm_eps);
                if (L->k_norm)
                    for (int h = 0; h < L->n_head_kv; h++) kt->ops.rms_norm(ki + h * hd, L->k_norm, ki + h * hd, hd, m->norm_eps);
                if (L->rope.mode != OXL_ROPE_NONE) {
                    rope_cache(&L->rope, pos[i], cs);
                    for (int h = 0; h < L->n_head; h++) rope_apply(&L->rope, cs, qi + h * hd);
                    for (int h = 0; h < L->n_head_kv; h++) rope_apply(&L->rope, cs, ki + h * hd);
                }
                store_kv(kv, kt, kv->k[il], pos[i], ki);
                store_kv(kv, kt, kv->v[il], pos[i], vi);
                /* attention reads q contiguously: compact strided rows of a fused QKV */
                if (fused_qkv) memmove(attn + i * q_dim, qi, (size_t)q_dim * 4);
            }
            OXL_BARRIER();

            /* attention over the cache: (n, q_dim); split by (token, head) */
            {
                const float *qsrc = fused_qkv ? attn : q;
                float *out = fused_qkv ? xn : attn;  /* xn is free now; keep q and out apart */
                if (n <= SPLIT_ATTN_MAX_Q) {
                    attention_split_partial(kt, L, kv, il, qsrc, n, pos, parts + ith * pstride, ith, nth);
                    OXL_BARRIER();
                    attention_split_merge(L, n, parts, pstride, out, ith, nth);
                } else {
                    oxl_attention(kt, L, kv, il, qsrc, n, pos, out, scores, ith, nth);
                }
                OXL_BARRIER();
                if (fused_qkv) {
                    for (int64_t i = t0; i < t1; i++) memcpy(attn + i * q_dim, xn + i * q_dim, (size_t)q_dim * 4);
                }
            }
            const oxl_weight *wo_ws[1] = {&L->wo};
            act_set_init(&acts, kt, base, &S, wo_ws, 1);
            act_set_fill(&acts, kt, attn, q_dim, (int)t0, (int)t1);
            OXL_BARRIER();

            /* output projection: tmp (n, n_embd) */
            matmul_share(kt, &L->wo, act_for(&acts, kt, &L->wo, attn), n, tmp, n_embd, &counters[call++], nth);
            OXL_BARRIER();

            /* residual; FFN input norm */
            const oxl_weight *ffn_ws[2] = {&L->w_gate, &L->w_up};
            act_set_init(&acts, kt, base, &S, ffn_ws, 2);
            for (int64_t i = t0; i < t1; i++) {
                float *ti = tmp + i * n_embd, *xi = x + i * n_embd;
                add_bias(ti, L->bo, 1, n_embd, 0, 0, 1);
                if (L->post_attn_norm) norm_row(kt, m, ti, L->post_attn_norm, NULL, ti, n_embd);
                if (L->parallel_residual) {
                    /* ffn reads the same normed input as attention: recompute it, then x += attn */
                    norm_row(kt, m, xi, L->attn_norm, L->attn_norm_b, xn + i * n_embd, n_embd);
                    kt->ops.add(xi, ti, n_embd);
                } else {
                    kt->ops.add(xi, ti, n_embd);
                    norm_row(kt, m, xi, L->ffn_norm, L->ffn_norm_b, xn + i * n_embd, n_embd);
                }
            }
            act_set_fill(&acts, kt, xn, n_embd, (int)t0, (int)t1);
            OXL_BARRIER();

            /* gate and up projections: (n, n_ff) each, or fused (n, 2 n_ff) */
            const int n_ff = L->fused_gate_up ? (int)(L->w_up.rows / 2) : (int)L->w_up.rows;
            const int64_t ldu = L->w_up.rows;
            if (L->w_gate.data) matmul_share(kt, &L->w_gate, act_for(&acts, kt, &L->w_gate, xn), n, gate, n_ff, &counters[call++], nth);
            matmul_share(kt, &L->w_up, act_for(&acts, kt, &L->w_up, xn), n, up, ldu, &counters[call++], nth);
            OXL_BARRIER();

            /* h = act(gate) * up, quantized for the down projection; h lives in gate */
            const oxl_weight *down_ws[1] = {&L->w_down};
            act_set_init(&acts, kt, base, &S, down_ws, 1);
            for (int64_t i = t0; i < t1; i++) {
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
                if (gi) activate(kt, L->act, gi, ui, hi, n_ff);
                else activate(kt, L->act, ui, NULL, hi, n_ff);
            }
            act_set_fill(&acts, kt, gate, n_ff, (int)t0, (int)t1);
            OXL_BARRIER();

            matmul_share(kt, &L->w_down, act_for(&acts, kt, &L->w_down, gate), n, tmp, n_embd, &counters[call++], nth);
            OXL_BARRIER();

            for (int64_t i = t0; i < t1; i++) {
                float *ti = tmp + i * n_embd;
                add_bias(ti, L->b_down, 1, n_embd, 0, 0, 1);
                if (L->post_ffn_norm) norm_row(kt, m, ti, L->post_ffn_norm, NULL, ti, n_embd);
                kt->ops.add(x + i * n_embd, ti, n_embd);
            }
            /* the next layer starts with this thread's own tokens again (norm, quantize), so only the
             * final norm, which splits rows differently, needs everyone's residual first */
            if (il == m->n_layer - 1) {
                OXL_BARRIER();
            }
        }

        /* final norm of the rows that need logits (all rows if hidden states are wanted) */
        const oxl_weight *out_ws[1] = {&m->output};
        act_set_init(&acts, kt, base, &S, out_ws, 1);
        {
            const int h0 = hidden ? 0 : out0;
            int64_t b, e;
            oxl_split_range(n - h0, nth, ith, 1, &b, &e);
            for (int64_t i = h0 + b; i < h0 + e; i++) {
                norm_row(kt, m, x + i * n_embd, m->out_norm, m->out_norm_b, xn + i * n_embd, n_embd);
                if (hidden) memcpy(hidden + i * n_embd, xn + i * n_embd, (size_t)n_embd * 4);
            }
            OXL_BARRIER();
            if (logits) {
                int64_t qb, qe;
                oxl_split_range(n_out, nth, ith, 1, &qb, &qe);
                act_set_fill(&acts, kt, xn + (int64_t)out0 * n_embd, n_embd, (int)qb, (int)qe);
            }
            OXL_BARRIER();
        }
        if (logits) {
            matmul_share(kt, &m->output, act_for(&acts, kt, &m->output, xn + (int64_t)out0 * n_embd), n_out, logits,
                         m->n_vocab, &counters[call++], nth);
            if (m->final_softcap > 0.0f || m->logit_scale != 1.0f) {
                OXL_BARRIER();
                int64_t b, e;
                oxl_split_range((int64_t)n_out * m->n_vocab, nth, ith, 64, &b, &e);
                const float c = m->final_softcap, sc = m->logit_scale;
                for (int64_t i = b; i < e; i++) {
                    float l = logits[i] * sc;
                    if (c > 0.0f) l = c * tanhf(l / c);
                    logits[i] = l;
                }
            }
        }
    }
    return OXL_OK;
}
