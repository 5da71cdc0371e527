/* Kernel self-check: a tier's kernels against the scalar tier's (see selftest.h for the rules). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "blocks.h"
#include "matmul.h"
#include "selftest.h"

/* vec_dot, gemm (also bit-exact to the tier's own vec_dot), matvec, matmul against scalar: |tier - scalar| <= RTOL * sum_i |w_i a_i|.
 * The same integer block sums, only the float summation order differs (tests/quant/test_legacy.py
 * TIER_VS_SCALAR_RTOL); the K-quants scale per 16/32-value sub-block in float as well
 * (tests/quant/test_kquants.py DOT_TOL_VS_SCALAR). */
#define DOT_RTOL 2e-6
#define DOT_RTOL_K 1e-5
/* row ops against scalar, elementwise |tier - scalar| <= RTOL * |scalar| + ATOL (tests/kernels/test_ops.py:
 * a float32 8-lane sum or a polynomial exp against the double/libm scalar path) */
#define NORM_RTOL 2e-5
#define NORM_ATOL 1e-6
#define ACT_RTOL 1e-5
#define ACT_ATOL 1e-6
#define SOFTMAX_RTOL 1e-5
#define SOFTMAX_ATOL 1e-9
#define EXP_RTOL 4e-6
#define EXP_ATOL 1e-30
/* y += a * x with or without a fused multiply-add: one rounding apart, relative to |y| + |a x| */
#define AXPY_RTOL 2.5e-7
/* dot products of rows and attention: relative to sum |x_i y_i| as for vec_dot */
#define OPS_DOT_RTOL 2e-6

#define N_ROUNDS_QUICK 2
#define N_ROUNDS_THOROUGH 4

/* ---- random data ------------------------------------------------------------------------------ */

typedef struct { uint64_t s; } rng_t;

static uint64_t next_u64(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float uniform(rng_t *r) { return (float)(next_u64(r) >> 40) / 16777216.0f; }
/* roughly Gaussian: sum of 4 uniforms, centred, unit variance */
static float normal(rng_t *r) { return (uniform(r) + uniform(r) + uniform(r) + uniform(r) - 2.0f) * 1.7320508f; }

/* weights-like values: each run of 32 with its own scale (e^-2 .. e), 1% outliers x8, 4% runs zero */
static void fill_gaussian(rng_t *r, float *x, int64_t n, float scale) {
    for (int64_t b = 0; b < n; b += 32) {
        const float s = uniform(r) < 0.04f ? 0.0f : scale * expf(3.0f * uniform(r) - 2.0f);
        for (int64_t i = b; i < n && i < b + 32; i++) x[i] = normal(r) * s * (uniform(r) < 0.01f ? 8.0f : 1.0f);
    }
}

/* values that stress rounding and sign handling: ties, equal magnitudes of both signs, the first
 * largest value negative, a lone outlier, tiny and large runs */
static void fill_edges(rng_t *r, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = i % 32;
        switch ((i / 32) % 8) {
        case 0: x[i] = (float)(k - 16) * 0.5f; break;                 /* ties of every half step */
        case 1: x[i] = (k % 3 - 1) * 127.0f; break;
        case 2: x[i] = k == 5 ? -7.0f : (k == 9 ? 7.0f : 0.25f); break;
        case 3: x[i] = k == 31 ? 1e4f : 1e-3f; break;
        case 4: x[i] = normal(r) * 1e-6f; break;
        case 5: x[i] = normal(r) * 3e3f; break;
        case 6: x[i] = 0.0f; break;
        default: x[i] = (float)k - 15.5f; break;
        }
    }
}

static uint16_t half_of(float f) { return oxl_fp32_to_fp16(f); }

/* random bytes for every block of a quantized type, with its fp16 scale fields set to sane values
 * (random ones would be inf/NaN 1 time in 32): every quant level, sub-scale and sign pattern */
static void fill_random_blocks(rng_t *r, int type, const oxl_type_traits *t, uint8_t *q, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = q + b * t->type_size;
        for (size_t i = 0; i < t->type_size; i++) p[i] = (uint8_t)next_u64(r);
        int off[2] = {-1, -1};
        switch (type) {
        case OXL_TYPE_Q4_0: case OXL_TYPE_Q5_0: case OXL_TYPE_Q8_0: case OXL_TYPE_IQ4_NL: case OXL_TYPE_IQ4_XS:
            off[0] = 0; break;
        case OXL_TYPE_Q4_1: case OXL_TYPE_Q5_1: case OXL_TYPE_Q8_1: case OXL_TYPE_Q4_K: case OXL_TYPE_Q5_K:
            off[0] = 0; off[1] = 2; break;
        case OXL_TYPE_Q2_K: off[0] = offsetof(block_q2_K, d); off[1] = offsetof(block_q2_K, dmin); break;
        case OXL_TYPE_Q3_K: off[0] = offsetof(block_q3_K, d); break;
        case OXL_TYPE_Q6_K: off[0] = offsetof(block_q6_K, d); break;
        case OXL_TYPE_Q1_0: off[0] = 0; break;
        case OXL_TYPE_TQ1_0: off[0] = offsetof(block_tq1_0, d); break;
        case OXL_TYPE_TQ2_0: off[0] = offsetof(block_tq2_0, d); break;
        case OXL_TYPE_MXFP4: p[0] = (uint8_t)(118 + next_u64(r) % 18); break;  /* E8M0 scales 2^-10 .. 2^7 */
        case OXL_TYPE_IQ2_XXS: case OXL_TYPE_IQ2_XS: case OXL_TYPE_IQ2_S: case OXL_TYPE_IQ3_XXS: case OXL_TYPE_IQ3_S:
        case OXL_TYPE_IQ1_S:
            off[0] = 0; break;
        case OXL_TYPE_IQ1_M: {   /* the fp16 scale lives in the top nibbles of the four scale words */
            const uint16_t h = half_of((uniform(r) + 0.5f) * 0.01f * (uniform(r) < 0.25f ? -1.0f : 1.0f));
            uint16_t sc[4];
            memcpy(sc, ((block_iq1_m *)p)->scales, 8);
            for (int k = 0; k < 4; k++) sc[k] = (uint16_t)((sc[k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
            memcpy(((block_iq1_m *)p)->scales, sc, 8);
            break;
        }
        case OXL_TYPE_Q8_K: {
            block_q8_K *k = (block_q8_K *)p;
            k->d = (uniform(r) + 0.5f) * 0.01f * (uniform(r) < 0.5f ? -1.0f : 1.0f);
            for (int g = 0; g < QK_K / 16; g++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += k->qs[16 * g + i];
                k->bsums[g] = (int16_t)s;
            }
            break;
        }
        default: break;
        }
        for (int f = 0; f < 2; f++) {
            if (off[f] < 0) continue;
            const uint16_t h = half_of((uniform(r) + 0.5f) * 0.01f * (uniform(r) < 0.25f ? -1.0f : 1.0f));
            memcpy(p + off[f], &h, 2);
        }
    }
}

/* n values of `type` in q: round 0/2 quantized Gaussian data (reference quantizer), round 1/3 random
 * quant bytes; float types get values over a wide range instead (fp16 subnormals included). */
static void make_weights(rng_t *r, const oxl_kernel_table *ref, int type, int64_t n, int round, float *tmp,
                         uint8_t *q) {
    const oxl_type_traits *t = &ref->type[type];
    if ((round % 2 == 1 || !t->from_float_ref) && t->is_quantized) {
        fill_random_blocks(r, type, t, q, n / t->blck_size);
        return;
    }
    if (round % 2 == 1) {
        for (int64_t i = 0; i < n; i++) tmp[i] = normal(r) * ldexpf(1.0f, (int)(uniform(r) * 40.0f) - 30);
    } else if (round == 2) {
        fill_edges(r, tmp, n);
    } else {
        fill_gaussian(r, tmp, n, 1.0f);
    }
    t->from_float_ref(tmp, q, n);
}

static const char *round_name(const oxl_type_traits *t, int round) {
    if (round % 2) return t->is_quantized ? "random quant bytes" : "values over a wide range";
    return round == 2 ? "quantized edge values" : "quantized random values";
}

/* activations of weight type `type`, quantized with the reference quantizer of its vec_dot_type */
static void make_act(rng_t *r, const oxl_kernel_table *ref, int type, int64_t n, float *x, uint8_t *xq) {
    fill_gaussian(r, x, n, 3.0f);
    const oxl_type vdt = ref->type[type].vec_dot_type;
    ref->type[vdt].from_float_ref(x, xq, n);
}

/* ---- results ---------------------------------------------------------------------------------- */

static void result_init(oxl_check_result *res, const char *subject, const char *kernel, const char *owner) {
    memset(res, 0, sizeof(*res));
    res->subject = subject;
    res->kernel = kernel;
    snprintf(res->owner, sizeof(res->owner), "%s", owner);
}

static void fail_detail(oxl_check_result *res, const char *fmt, ...) {
    res->failures++;
    if (res->failures > 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->detail, sizeof(res->detail), fmt, ap);
    va_end(ap);
}

/* one toleranced comparison; `fmt` (printf) says which case it was, formatted only on a failure */
static int compare(oxl_check_result *res, double got, double want, double tol, const char *fmt, ...) {
    res->cases++;
    const double err = fabs(got - want);
    double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0);
    if (isnan(got) || isnan(want)) ratio = isnan(got) && isnan(want) ? 0.0 : INFINITY;
    if (ratio > res->worst) res->worst = ratio;
    if (ratio <= 1.0) return 1;
    char where[120];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof(where), fmt, ap);
    va_end(ap);
    fail_detail(res, "%s: tier %.9g scalar %.9g, |diff| %.3g > tolerance %.3g", where, got, want, err, tol);
    return 0;
}

static int same_bits(float a, float b) {
    return oxl_fp32_to_bits(a) == oxl_fp32_to_bits(b) || (isnan(a) && isnan(b));
}

/* ---- which tier a kernel belongs to ------------------------------------------------------------ */

typedef void (*any_fn)(void);

static any_fn fn_at(const oxl_kernel_table *t, size_t off) {
    any_fn f;
    memcpy(&f, (const char *)t + off, sizeof(f));
    return f;
}

/* the lowest usable tier whose table has the same function at `off`: the tier that wrote it */
static const char *owner_at(const oxl_kernel_table *k, size_t off) {
    const any_fn f = fn_at(k, off);
    for (int t = 0; t < OXL_TIER_COUNT; t++) {
        const oxl_kernel_table *tab = oxl_tier_table(t);
        if (tab && fn_at(tab, off) == f) return oxl_tier_name(t);
    }
    return k->name;
}

#define TYPE_OFF(ty, field) \
    (offsetof(oxl_kernel_table, type) + (size_t)(ty) * sizeof(oxl_type_traits) + offsetof(oxl_type_traits, field))
#define OP_OFF(field) (offsetof(oxl_kernel_table, ops) + offsetof(oxl_ops, field))

/* ---- quant kernels ---------------------------------------------------------------------------- */

typedef struct {
    const oxl_kernel_table *ref, *k;
    int thorough;
    rng_t rng;
    oxl_check_sink sink;
    void *ctx;
    int failing;  /* kernels with a failure so far */
} checker;

static void emit(checker *c, oxl_check_result *res) {
    if (res->failures) c->failing++;
    c->sink(c->ctx, res);
}

/* value counts to try for one type: edge lengths (1 block, odd counts, a lone tail block after pairs)
 * and lengths met in real models (576 = SmolLM2 n_embd, 640 = Gemma 3 270M n_embd) */
static int lengths(const oxl_type_traits *t, int thorough, int64_t *out) {
    static const int64_t f_quick[] = {1, 17, 33, 2051}, f_all[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                                                                   100, 576, 2051};
    static const int64_t b_quick[] = {1, 2, 3, 20}, b_all[] = {1, 2, 3, 5, 8, 17, 18, 20, 64, 129};
    static const int64_t k_quick[] = {1, 3, 8}, k_all[] = {1, 2, 3, 7, 8, 16};
    const int64_t *src;
    int cnt;
    if (t->blck_size == 1) { src = thorough ? f_all : f_quick; cnt = thorough ? 16 : 4; }
    else if (t->blck_size == 32) { src = thorough ? b_all : b_quick; cnt = thorough ? 10 : 4; }
    else { src = thorough ? k_all : k_quick; cnt = thorough ? 6 : 3; }
    for (int i = 0; i < cnt; i++) out[i] = src[i] * (t->blck_size == 1 ? 1 : t->blck_size);
    return cnt;
}

static double dot_rtol(const oxl_type_traits *t) { return t->blck_size == QK_K ? DOT_RTOL_K : DOT_RTOL; }

/* float values of n values of `type` (scalar dequantizer; F32 is its own) */
static void deq(const oxl_kernel_table *ref, int type, const void *q, float *out, int64_t n) {
    ref->type[type].to_float(q, out, n);
}

static double abs_dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return s;
}

#define MAX_N (129 * 32 * 2)

static void check_type(checker *c, int type) {
    const oxl_type_traits *rt = &c->ref->type[type], *kt = &c->k->type[type];
    const oxl_type vdt = rt->vec_dot_type;
    const int rounds = c->thorough ? N_ROUNDS_THOROUGH : N_ROUNDS_QUICK;
    int64_t lens[16];
    const int nlen = lengths(rt, c->thorough, lens);
    const size_t qbytes = (size_t)MAX_N * 4 + 1024;
    float *x = malloc(sizeof(float) * MAX_N), *a = malloc(sizeof(float) * MAX_N);
    float *d0 = malloc(sizeof(float) * MAX_N), *d1 = malloc(sizeof(float) * MAX_N);
    uint8_t *wq = malloc(qbytes), *aq = malloc(qbytes), *q1 = malloc(qbytes);
    oxl_check_result res;

    /* dequantize: bit for bit */
    result_init(&res, rt->name, "to_float", owner_at(c->k, TYPE_OFF(type, to_float)));
    if (kt->to_float != rt->to_float) {
        for (int li = 0; li < nlen; li++)
            for (int round = 0; round < rounds; round++) {
                const int64_t n = lens[li];
                make_weights(&c->rng, c->ref, type, n, round, x, wq);
                rt->to_float(wq, d0, n);
                kt->to_float(wq, d1, n);
                res.cases++;
                for (int64_t i = 0; i < n; i++)
                    if (!same_bits(d0[i], d1[i])) {
                        fail_detail(&res, "n %lld (%s) value %lld: tier %.9g scalar %.9g", (long long)n,
                                    round_name(rt, round), (long long)i, d1[i], d0[i]);
                        break;
                    }
            }
    }
    emit(c, &res);

    /* the fast quantizer: the reference's bytes exactly */
    result_init(&res, rt->name, "from_float", owner_at(c->k, TYPE_OFF(type, from_float)));
    if (kt->from_float && kt->from_float != rt->from_float_ref) {
        for (int li = 0; li < nlen; li++)
            for (int round = 0; round < rounds; round++) {
                const int64_t n = lens[li];
                if (round % 2) fill_edges(&c->rng, x, n);
                else fill_gaussian(&c->rng, x, n, round ? 100.0f : 1.0f);
                const int64_t bytes = oxl_row_size(type, n);
                memset(wq, 0xAB, bytes);
                memset(q1, 0xCD, bytes);
                rt->from_float_ref(x, wq, n);
                kt->from_float(x, q1, n);
                res.cases++;
                for (int64_t i = 0; i < bytes; i++)
                    if (wq[i] != q1[i]) {
                        fail_detail(&res, "n %lld round %d: byte %lld (block %lld) is %u, reference %u", (long long)n,
                                    round, (long long)i, (long long)(i / (int64_t)rt->type_size), q1[i], wq[i]);
                        break;
                    }
            }
    }
    emit(c, &res);

    /* vec_dot */
    result_init(&res, rt->name, "vec_dot", owner_at(c->k, TYPE_OFF(type, vec_dot)));
    if (kt->vec_dot != rt->vec_dot) {
        for (int li = 0; li < nlen; li++)
            for (int round = 0; round < rounds; round++) {
                const int64_t n = lens[li];
                make_weights(&c->rng, c->ref, type, n, round, x, wq);
                make_act(&c->rng, c->ref, type, n, a, aq);
                deq(c->ref, type, wq, d0, n);
                deq(c->ref, vdt, aq, d1, n);
                float s0 = 0, s1 = 0;
                rt->vec_dot((int)n, &s0, wq, aq);
                kt->vec_dot((int)n, &s1, wq, aq);
                compare(&res, s1, s0, dot_rtol(rt) * abs_dot(d0, d1, n), "n %lld (%s)", (long long)n,
                        round_name(rt, round));
            }
    }
    emit(c, &res);

    /* gemm: nr weight rows x nc activation rows, rows spaced by one spare block
     * (never read) and outputs lds apart (the padding between never written). Every output must be
     * bit-identical to the same tier's vec_dot (batch invariance), and close to the scalar one's. */
    result_init(&res, rt->name, "gemm", kt->gemm ? owner_at(c->k, TYPE_OFF(type, gemm)) : "none");
    if (kt->gemm && kt->gemm != rt->gemm) {
        /* beyond 8 activation rows the prefill kernels (the VNNI tier's 512-bit K-quant tiles); 13 with nr odd */
        static const int nc_quick[] = {1, 3, 4, 5, 9, 13}, nc_all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17};
        const int *ncs = c->thorough ? nc_all : nc_quick;
        const int n_nc = c->thorough ? 11 : 6;
        /* a whole group of the sixteen-row kernels and part of one (csrc/x86/avx512vnni/quants_*x16_vnni.c) */
        const int R = OXL_REPACK_ROW_ALIGN + 5, lds = R + 3;
        for (int li = 0; li < nlen && li < (c->thorough ? 5 : 2); li++) {
            const int64_t n = lens[li];
            const size_t row = (size_t)oxl_row_size(type, n), w_row = row + rt->type_size;
            const size_t arow = (size_t)oxl_row_size(vdt, n), y_row = arow + c->ref->type[vdt].type_size;
            const int ncmax = 17;
            uint8_t *W = malloc(w_row * R), *Y = malloc(y_row * ncmax);
            float *wd = malloc(sizeof(float) * n * R), *yd = malloc(sizeof(float) * n * ncmax);
            float *S = malloc(sizeof(float) * lds * (ncmax + 1));
            memset(W, 0xFF, w_row * R);
            memset(Y, 0xFF, y_row * ncmax);
            for (int rr = 0; rr < R; rr++) {
                make_weights(&c->rng, c->ref, type, n, rr % 2, x, W + rr * w_row);
                deq(c->ref, type, W + rr * w_row, wd + rr * n, n);
            }
            for (int j = 0; j < ncmax; j++) {
                make_act(&c->rng, c->ref, type, n, a, Y + j * y_row);
                deq(c->ref, vdt, Y + j * y_row, yd + j * n, n);
            }
            for (int ni = 0; ni < n_nc; ni++) {
                const int nc = ncs[ni];
                const float sentinel = oxl_fp32_from_bits(0x7FC0DEADu);
                for (int i = 0; i < lds * (ncmax + 1); i++) S[i] = sentinel;
                const int nr = R - (ni % 2);   /* all the rows, or one fewer */
                kt->gemm((int)n, S, lds, W, w_row, nr, Y, y_row, nc);
                for (int j = 0; j <= nc && j < ncmax + 1; j++)
                    for (int rr = 0; rr < lds; rr++) {
                        const float got = S[j * lds + rr];
                        if (j == nc || rr >= nr) {
                            res.cases++;
                            if (oxl_fp32_to_bits(got) != 0x7FC0DEADu)
                                fail_detail(&res, "n %lld nc %d: wrote S[%d * lds + %d] outside the tile", (long long)n,
                                            nc, j, rr);
                            continue;
                        }
                        float want = 0, own = 0;
                        rt->vec_dot((int)n, &want, W + rr * w_row, Y + j * y_row);
                        kt->vec_dot((int)n, &own, W + rr * w_row, Y + j * y_row);
                        const double tol = dot_rtol(rt) * abs_dot(wd + rr * n, yd + j * n, n);
                        compare(&res, got, want, tol, "n %lld nc %d: S[%d * lds + %d]", (long long)n, nc, j, rr);
                        res.cases++;
                        if (oxl_fp32_to_bits(got) != oxl_fp32_to_bits(own))
                            fail_detail(&res, "n %lld nr %d nc %d: S[%d * lds + %d] = %.9g, the tier's vec_dot %.9g "
                                        "(not batch-invariant)", (long long)n, nr, nc, j, rr, got, own);
                    }
            }
            free(W); free(Y); free(wd); free(yd); free(S);
        }
    }
    emit(c, &res);

    /* the repacked layout: contiguous rows repacked, every output of its gemm bit-identical to the tier's
     * vec_dot on the file rows (the invariant: a plan that reads the copy gives the same logits) */
    result_init(&res, rt->name, "repacked", kt->repacked.name ? owner_at(c->k, TYPE_OFF(type, repacked.gemm)) : "none");
    if (kt->repacked.name) {
        static const int ncs[] = {1, 3, 8, 9, 17};
        const int R = OXL_REPACK_ROW_ALIGN + 5;   /* a whole interleaved group and a part of one */
        for (int li = 0; li < nlen && li < (c->thorough ? 5 : 4); li++) {
            const int64_t n = lens[li], prow = oxl_repacked_row_size(c->k, type, n);
            if (prow < 0) continue;
            const size_t row = (size_t)oxl_row_size(type, n), arow = (size_t)oxl_row_size(vdt, n);
            uint8_t *W = malloc(row * R), *P = malloc((size_t)prow * R + 64), *Y = malloc(arow * 17);
            float *S = malloc(sizeof(float) * R * 17);
            for (int rr = 0; rr < R; rr++) make_weights(&c->rng, c->ref, type, n, rr % 2, x, W + rr * row);
            for (int j = 0; j < 17; j++) make_act(&c->rng, c->ref, type, n, a, Y + j * arow);
            oxl_repack(c->k, type, W, R, n, P, 1);
            for (int ni = 0; ni < 5; ni++) {
                const int nc = ncs[ni];
                if (kt->repacked.gemm((int)n, S, R, P, (size_t)prow, R, Y, arow, nc)) {
                    fail_detail(&res, "n %lld nc %d: the kernel did not run", (long long)n, nc);
                    continue;
                }
                for (int j = 0; j < nc; j++)
                    for (int rr = 0; rr < R; rr++) {
                        float own = 0;
                        kt->vec_dot((int)n, &own, W + rr * row, Y + j * arow);
                        res.cases++;
                        if (oxl_fp32_to_bits(S[j * R + rr]) != oxl_fp32_to_bits(own))
                            fail_detail(&res, "n %lld nc %d: S[%d * %d + %d] = %.9g from the %s rows, the tier's vec_dot "
                                        "%.9g", (long long)n, nc, j, R, rr, S[j * R + rr], kt->repacked.name, own);
                    }
            }
            free(W); free(P); free(Y); free(S);
        }
    }
    emit(c, &res);

    /* matvec and matmul through matmul.c with this tier's table, against the same with the scalar one */
    const int uses_tier = kt->vec_dot != rt->vec_dot || (kt->gemm && kt->gemm != rt->gemm) ||
                          c->k->type[vdt].from_float != c->ref->type[vdt].from_float;
    for (int mm = 0; mm < 2; mm++) {
        result_init(&res, rt->name, mm ? "matmul" : "matvec", owner_at(c->k, TYPE_OFF(type, vec_dot)));
        if (mm && kt->gemm && strcmp(owner_at(c->k, TYPE_OFF(type, gemm)), res.owner) != 0)
            snprintf(res.owner, sizeof(res.owner), "%s/%s", owner_at(c->k, TYPE_OFF(type, gemm)),
                     owner_at(c->k, TYPE_OFF(type, vec_dot)));
        static const int64_t rows_quick[] = {7, 37}, rows_all[] = {1, 4, 5, 7, 16, 37};
        static const int64_t n_quick[] = {2, 5, 9}, n_all[] = {1, 2, 3, 4, 5, 8, 9, 17, 65};
        const int64_t *rows_l = c->thorough ? rows_all : rows_quick, *n_l = c->thorough ? n_all : n_quick;
        const int n_rows = c->thorough ? 6 : 2, n_n = mm ? (c->thorough ? 9 : 3) : 1;
        const int64_t cols = rt->blck_size == 1 ? 576 + 7 : rt->blck_size == 32 ? 640 : 3 * QK_K;
        for (int ri = 0; uses_tier && ri < n_rows; ri++)
            for (int nj = 0; nj < n_n; nj++) {
                const int64_t rows = rows_l[ri], nx = mm ? n_l[nj] : 1;
                const int64_t row = oxl_row_size(type, cols);
                uint8_t *W = malloc(row * rows);
                float *Wd = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * nx * cols);
                float *Xd = malloc(sizeof(float) * nx * cols);
                float *Y0 = malloc(sizeof(float) * nx * rows), *Y1 = malloc(sizeof(float) * nx * rows);
                uint8_t *Xq = malloc(oxl_act_size(c->ref, type, cols, nx) + 64);
                void *scratch = malloc(oxl_act_size(c->k, type, cols, nx) + 64);
                for (int64_t r = 0; r < rows; r++) {
                    make_weights(&c->rng, c->ref, type, cols, (int)(r % 2), x, W + r * row);
                    deq(c->ref, type, W + r * row, Wd + r * cols, cols);
                }
                const int64_t arow = oxl_row_size(vdt, cols);
                for (int64_t j = 0; j < nx; j++) {
                    make_act(&c->rng, c->ref, type, cols, X + j * cols, Xq + j * arow);
                    deq(c->ref, vdt, Xq + j * arow, Xd + j * cols, cols);
                }
                /* two threads split the rows (and tiles) differently; quick runs do that once per kernel, as an
                 * OpenMP region costs milliseconds on a busy machine */
                const int max_threads = c->thorough || (ri == n_rows - 1 && nj == n_n - 1) ? 2 : 1;
                for (int nt = 1; nt <= max_threads; nt++) {
                    int rc0, rc1;
                    if (mm) {
                        rc0 = oxl_matmul(c->ref, type, W, rows, cols, X, nx, Y0, scratch, nt);
                        rc1 = oxl_matmul(c->k, type, W, rows, cols, X, nx, Y1, scratch, nt);
                    } else {
                        rc0 = oxl_matvec(c->ref, type, W, rows, cols, X, Y0, scratch, nt);
                        rc1 = oxl_matvec(c->k, type, W, rows, cols, X, Y1, scratch, nt);
                    }
                    if (rc0 != OXL_OK || rc1 != OXL_OK) {
                        res.cases++;
                        fail_detail(&res, "rows %lld cols %lld n %lld: status %d (scalar %d)", (long long)rows,
                                    (long long)cols, (long long)nx, rc1, rc0);
                        continue;
                    }
                    for (int64_t j = 0; j < nx; j++)
                        for (int64_t r = 0; r < rows; r++) {
                            const double tol = dot_rtol(rt) * abs_dot(Wd + r * cols, Xd + j * cols, cols);
                            compare(&res, Y1[j * rows + r], Y0[j * rows + r], tol,
                                    "%lld x %lld weights, %lld activation rows, %d threads: output (%lld, %lld)",
                                    (long long)rows, (long long)cols, (long long)nx, nt, (long long)j, (long long)r);
                        }
                }
                free(W); free(Wd); free(X); free(Xd); free(Y0); free(Y1); free(Xq); free(scratch);
            }
        emit(c, &res);
    }
    free(x); free(a); free(d0); free(d1); free(wq); free(aq); free(q1);
}

/* ---- row ops ---------------------------------------------------------------------------------- */

/* elementwise |got - want| <= rtol |want| + atol; returns 1 if all passed */
static int compare_rows(oxl_check_result *res, const float *got, const float *want, int n, double rtol, double atol,
                        const char *what, int64_t tag) {
    res->cases++;
    for (int i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]), tol = rtol * fabs(want[i]) + atol;
        double ratio = err / tol;
        if (isnan(got[i]) || isnan(want[i])) ratio = isnan(got[i]) && isnan(want[i]) ? 0.0 : INFINITY;
        if (ratio > res->worst) res->worst = ratio;
        if (ratio > 1.0) {
            fail_detail(res, "%s %lld, element %d: tier %.9g scalar %.9g, |diff| %.3g > tolerance %.3g", what,
                        (long long)tag, i, got[i], want[i], err, tol);
            return 0;
        }
    }
    return 1;
}

/* as compare_rows with a per-element tolerance */
static void compare_rows_tol(oxl_check_result *res, const float *got, const float *want, const double *tol, int n,
                             const char *what, int64_t tag) {
    res->cases++;
    for (int i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]);
        double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0.0);
        if (isnan(got[i]) || isnan(want[i])) ratio = isnan(got[i]) && isnan(want[i]) ? 0.0 : INFINITY;
        if (ratio > res->worst) res->worst = ratio;
        if (ratio > 1.0) {
            fail_detail(res, "%s %lld, element %d: tier %.9g scalar %.9g, |diff| %.3g > tolerance %.3g", what,
                        (long long)tag, i, got[i], want[i], err, tol[i]);
            return;
        }
    }
}

enum {
    OP_RMS_NORM, OP_LAYER_NORM, OP_SOFTMAX, OP_SILU_MUL, OP_GELU_MUL, OP_GELU_ERF_MUL, OP_ADD, OP_AXPY, OP_DOT_F32,
    OP_DOT_F16, OP_AXPY_F16, OP_FP32_TO_FP16, OP_ATTN_SCORES, OP_ATTN_VALUES, OP_ATTN_SCORES_GROUP,
    OP_ATTN_VALUES_GROUP, OP_EXP_SHIFT_SUM, OP_ATTN_SCORES_Q8_0, OP_ATTN_VALUES_Q8_0, OP_SSM_SCAN_STATES,
    OP_CAUSAL_CONV, OP_COUNT
};

static const struct { const char *name; size_t off; } g_ops[OP_COUNT] = {
    {"rms_norm", OP_OFF(rms_norm)}, {"layer_norm", OP_OFF(layer_norm)}, {"softmax", OP_OFF(softmax)},
    {"silu_mul", OP_OFF(silu_mul)}, {"gelu_mul", OP_OFF(gelu_mul)}, {"gelu_erf_mul", OP_OFF(gelu_erf_mul)},
    {"add", OP_OFF(add)}, {"axpy", OP_OFF(axpy)}, {"dot_f32", OP_OFF(dot_f32)}, {"dot_f16", OP_OFF(dot_f16)},
    {"axpy_f16", OP_OFF(axpy_f16)}, {"fp32_to_fp16", OP_OFF(fp32_to_fp16)},
    {"attn_scores_f16", OP_OFF(attn_scores_f16)}, {"attn_values_f16", OP_OFF(attn_values_f16)},
    {"attn_scores_f16_group", OP_OFF(attn_scores_f16_group)}, {"attn_values_f16_group", OP_OFF(attn_values_f16_group)},
    {"exp_shift_sum", OP_OFF(exp_shift_sum)},
    {"attn_scores_q8_0_group", OP_OFF(attn_scores_q8_0_group)}, {"attn_values_q8_0_group", OP_OFF(attn_values_q8_0_group)},
    {"ssm_scan_states", OP_OFF(ssm_scan_states)}, {"causal_conv", OP_OFF(causal_conv)},
};

#define OPS_MAX_N 4096

static void fill_half(rng_t *r, oxl_half *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = half_of(normal(r));
}

/* attention shapes (rows n, head size hd, row stride, group size G): one row, odd row counts, more rows
 * than a kernel pass, head sizes not a multiple of 16, strides wider than a head (tests/kernels/test_ops.py) */
static const int g_attn_shapes[][4] = {
    {1, 64, 64, 1}, {3, 64, 64, 2}, {7, 256, 256, 4}, {130, 64, 64, 3}, {5, 72, 72, 1}, {9, 20, 20, 3},
    {33, 64, 192, 2}, {40, 24, 168, 7}, {2, 128, 128, 8}, {35, 64, 64, 3}, {13, 64, 64, 6}, {6, 96, 96, 2},
    {70, 64, 64, 16}, {37, 80, 80, 5},
};

/* A group call's floats against the same tier's calls on each head alone and (scores) each row alone: a score
 * depends on its query and K row only, an output on its head's weights only (kernels.h), whatever G, n or the
 * row's place in the call; attention packs a block's rows into one call (layers/attention.c: attn_block).
 * kind 0: f16 rows `stride` halves apart, 1: Q8_0 rows `stride` bytes apart. spare: room for hd floats. */
static void check_attn_alone(oxl_check_result *res, const oxl_ops *ko, int kind, int scores, const float *q, int G,
                             const void *KV, int64_t stride, int n, int hd, float scale, const float *got,
                             float *spare) {
    const int64_t row_bytes = kind == 0 ? stride * (int64_t)sizeof(oxl_half) : stride;
    for (int g = 0; g < G; g++) {
        if (scores) {
            for (int tt = 0; tt < n; tt++) {
                const void *k = (const char *)KV + tt * row_bytes;
                if (kind == 0) ko->attn_scores_f16_group(q + g * hd, 1, k, stride, 1, hd, scale, spare);
                else ko->attn_scores_q8_0_group(q + g * hd, 1, k, stride, 1, hd, scale, spare);
                if (memcmp(spare, got + (int64_t)g * n + tt, sizeof(float))) {
                    fail_detail(res, "rows n %d: head %d of %d, row %d: alone %.9g, in the call %.9g (not the same "
                                "float whatever the call)", n, g, G, tt, spare[0], got[(int64_t)g * n + tt]);
                    return;
                }
            }
        } else {
            if (kind == 0) ko->attn_values_f16_group(q + (int64_t)g * n, 1, KV, stride, n, hd, spare);
            else ko->attn_values_q8_0_group(q + (int64_t)g * n, 1, KV, stride, n, hd, spare);
            for (int i = 0; i < hd; i++)
                if (memcmp(spare + i, got + (int64_t)g * hd + i, sizeof(float))) {
                    fail_detail(res, "rows n %d: head %d of %d, value %d: alone %.9g, in the call %.9g (not the "
                                "same float whatever the call)", n, g, G, i, spare[i], got[(int64_t)g * hd + i]);
                    return;
                }
        }
    }
}

static void check_op(checker *c, int op) {
    const oxl_ops *ro = &c->ref->ops, *ko = &c->k->ops;
    oxl_check_result res;
    result_init(&res, "ops", g_ops[op].name, owner_at(c->k, g_ops[op].off));
    if (fn_at(c->k, g_ops[op].off) == fn_at(c->ref, g_ops[op].off) || !fn_at(c->k, g_ops[op].off)) {
        emit(c, &res);
        return;
    }
    static const int sz_quick[] = {1, 7, 8, 17, 33, 257, 2051};
    static const int sz_all[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 576, 640, 2051};
    const int *sizes = c->thorough ? sz_all : sz_quick;
    const int nsz = c->thorough ? 22 : 7;
    rng_t *r = &c->rng;
    float *x = malloc(sizeof(float) * OPS_MAX_N * 4), *w = x + OPS_MAX_N, *b = w + OPS_MAX_N, *u = b + OPS_MAX_N;
    float *y0 = malloc(sizeof(float) * OPS_MAX_N * 2), *y1 = y0 + OPS_MAX_N;
    oxl_half *h = malloc(sizeof(oxl_half) * OPS_MAX_N * 2), *h1 = h + OPS_MAX_N;
    double *tol = malloc(sizeof(double) * OPS_MAX_N);

    if (op == OP_ATTN_SCORES_Q8_0 || op == OP_ATTN_VALUES_Q8_0) {
        /* a Q8_0 KV cache: rows of head_dim / 32 blocks, row_bytes apart; shapes whose head size and stride
         * are multiples of 32. Tolerances from the dequantized rows, as for F16. */
        const int nshape = (int)(sizeof(g_attn_shapes) / sizeof(g_attn_shapes[0]));
        for (int si = 0; si < nshape; si++) {
            const int n = g_attn_shapes[si][0], hd = g_attn_shapes[si][1], stride = g_attn_shapes[si][2];
            const int G = g_attn_shapes[si][3];
            if (hd % 32 || stride % 32) continue;
            const int64_t row_bytes = oxl_row_size(OXL_TYPE_Q8_0, stride);
            const float scale = 0.125f;
            char *KV = malloc((size_t)(n * row_bytes));
            float *deq = malloc(sizeof(float) * n * stride), *row = malloc(sizeof(float) * stride);
            float *q = malloc(sizeof(float) * G * (hd > n ? hd : n)), *o0 = malloc(sizeof(float) * G * (hd + n));
            float *o1 = malloc(sizeof(float) * G * (hd + n));
            double *t = malloc(sizeof(double) * G * (hd + n));
            for (int tt = 0; tt < n; tt++) {
                for (int i = 0; i < stride; i++) row[i] = normal(r);
                c->ref->type[OXL_TYPE_Q8_0].from_float_ref(row, KV + tt * row_bytes, stride);
                c->ref->type[OXL_TYPE_Q8_0].to_float(KV + tt * row_bytes, deq + (int64_t)tt * stride, stride);
            }
            if (op == OP_ATTN_SCORES_Q8_0) {
                for (int i = 0; i < G * hd; i++) q[i] = normal(r);
                ro->attn_scores_q8_0_group(q, G, KV, row_bytes, n, hd, scale, o0);
                ko->attn_scores_q8_0_group(q, G, KV, row_bytes, n, hd, scale, o1);
                for (int g = 0; g < G; g++)
                    for (int tt = 0; tt < n; tt++) {
                        double m = 0;
                        for (int i = 0; i < hd; i++) m += fabs((double)q[g * hd + i] * deq[(int64_t)tt * stride + i]);
                        t[g * n + tt] = OPS_DOT_RTOL * scale * m;
                    }
                compare_rows_tol(&res, o1, o0, t, G * n, "rows n", n);
                check_attn_alone(&res, ko, 1, 1, q, G, KV, row_bytes, n, hd, scale, o1, o0);
            } else {
                for (int i = 0; i < G * n; i++) q[i] = uniform(r);
                ro->attn_values_q8_0_group(q, G, KV, row_bytes, n, hd, o0);
                ko->attn_values_q8_0_group(q, G, KV, row_bytes, n, hd, o1);
                for (int g = 0; g < G; g++)
                    for (int i = 0; i < hd; i++) {
                        double m = 0;
                        for (int tt = 0; tt < n; tt++) m += fabs((double)q[g * n + tt] * deq[(int64_t)tt * stride + i]);
                        t[g * hd + i] = OPS_DOT_RTOL * m;
                    }
                compare_rows_tol(&res, o1, o0, t, G * hd, "rows n", n);
                check_attn_alone(&res, ko, 1, 0, q, G, KV, row_bytes, n, hd, scale, o1, o0);
            }
            free(KV); free(deq); free(row); free(q); free(o0); free(o1); free(t);
        }
    } else if (op == OP_ATTN_SCORES || op == OP_ATTN_VALUES || op == OP_ATTN_SCORES_GROUP || op == OP_ATTN_VALUES_GROUP) {
        const int nshape = (int)(sizeof(g_attn_shapes) / sizeof(g_attn_shapes[0]));
        for (int si = 0; si < nshape; si++) {
            const int n = g_attn_shapes[si][0], hd = g_attn_shapes[si][1], stride = g_attn_shapes[si][2];
            const int G = op == OP_ATTN_SCORES_GROUP || op == OP_ATTN_VALUES_GROUP ? g_attn_shapes[si][3] : 1;
            const float scale = 0.125f;
            oxl_half *KV = malloc(sizeof(oxl_half) * n * stride);
            float *q = malloc(sizeof(float) * G * (hd > n ? hd : n)), *o0 = malloc(sizeof(float) * G * (hd + n));
            float *o1 = malloc(sizeof(float) * G * (hd + n));
            double *t = malloc(sizeof(double) * G * (hd + n));
            fill_half(r, KV, (int64_t)n * stride);
            if (op == OP_ATTN_SCORES || op == OP_ATTN_SCORES_GROUP) {
                for (int i = 0; i < G * hd; i++) q[i] = normal(r);
                if (G == 1 && op == OP_ATTN_SCORES) {
                    ro->attn_scores_f16(q, KV, stride, n, hd, scale, o0);
                    ko->attn_scores_f16(q, KV, stride, n, hd, scale, o1);
                } else {
                    ro->attn_scores_f16_group(q, G, KV, stride, n, hd, scale, o0);
                    ko->attn_scores_f16_group(q, G, KV, stride, n, hd, scale, o1);
                }
                for (int g = 0; g < G; g++)
                    for (int tt = 0; tt < n; tt++) {
                        double m = 0;
                        for (int i = 0; i < hd; i++)
                            m += fabs((double)q[g * hd + i] * oxl_fp16_to_fp32(KV[(int64_t)tt * stride + i]));
                        t[g * n + tt] = OPS_DOT_RTOL * scale * m;
                    }
                compare_rows_tol(&res, o1, o0, t, G * n, "rows n", n);
                if (op == OP_ATTN_SCORES_GROUP) check_attn_alone(&res, ko, 0, 1, q, G, KV, stride, n, hd, scale, o1, o0);
            } else {
                /* p: a softmax-like row per head */
                for (int i = 0; i < G * n; i++) q[i] = uniform(r);
                if (G == 1 && op == OP_ATTN_VALUES) {
                    ro->attn_values_f16(q, KV, stride, n, hd, o0);
                    ko->attn_values_f16(q, KV, stride, n, hd, o1);
                } else {
                    ro->attn_values_f16_group(q, G, KV, stride, n, hd, o0);
                    ko->attn_values_f16_group(q, G, KV, stride, n, hd, o1);
                }
                for (int g = 0; g < G; g++)
                    for (int i = 0; i < hd; i++) {
                        double m = 0;
                        for (int tt = 0; tt < n; tt++)
                            m += fabs((double)q[g * n + tt] * oxl_fp16_to_fp32(KV[(int64_t)tt * stride + i]));
                        t[g * hd + i] = OPS_DOT_RTOL * m;
                    }
                compare_rows_tol(&res, o1, o0, t, G * hd, "rows n", n);
                if (op == OP_ATTN_VALUES_GROUP) check_attn_alone(&res, ko, 0, 0, q, G, KV, stride, n, hd, scale, o1, o0);
            }
            free(KV); free(q); free(o0); free(o1); free(t);
        }
    } else if (op == OP_FP32_TO_FP16) {
        /* every exponent (random bits), ties, overflow to inf, subnormals, signed zeros, inf, NaN */
        static const float special[] = {65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 5.9604645e-8f,
                                        2.9802322e-8f, 2.9802326e-8f, -0.0f, 0.0f, INFINITY, -INFINITY, NAN,
                                        1.00048828125f, 1.00146484375f, 6.1035156e-5f, 6.0975552e-5f};
        const int ns = (int)(sizeof(special) / sizeof(special[0]));
        const int n = c->thorough ? OPS_MAX_N : 1024;
        for (int i = 0; i < n; i++) {
            if (i < ns) x[i] = special[i];
            else if (i % 2) x[i] = oxl_fp32_from_bits((uint32_t)next_u64(r));
            else x[i] = normal(r) * 100.0f;
        }
        for (int len = 1; len <= n; len = len < 40 ? len + 1 : len * 3) {
            memset(h, 0, sizeof(oxl_half) * len);
            memset(h1, 0xFF, sizeof(oxl_half) * len);
            ro->fp32_to_fp16(x, h, len);
            ko->fp32_to_fp16(x, h1, len);
            res.cases++;
            for (int i = 0; i < len; i++) {
                const int nan0 = (h[i] & 0x7C00) == 0x7C00 && (h[i] & 0x3FF);
                const int nan1 = (h1[i] & 0x7C00) == 0x7C00 && (h1[i] & 0x3FF);
                if (h[i] != h1[i] && !(nan0 && nan1)) {
                    fail_detail(&res, "length %d, element %d (%.9g, bits %08x): tier %04x scalar %04x", len, i, x[i],
                                oxl_fp32_to_bits(x[i]), h1[i], h[i]);
                    break;
                }
            }
        }
    } else {
        for (int si = 0; si < nsz; si++) {
            const int n = sizes[si];
            for (int i = 0; i < n; i++) {
                x[i] = normal(r) * 3.0f;
                w[i] = normal(r);
                b[i] = normal(r);
                u[i] = normal(r) * 3.0f;
            }
            switch (op) {
            case OP_RMS_NORM:
                for (int withw = 0; withw < 2; withw++) {
                    ro->rms_norm(x, withw ? w : NULL, y0, n, 1e-6f);
                    ko->rms_norm(x, withw ? w : NULL, y1, n, 1e-6f);
                    compare_rows(&res, y1, y0, n, NORM_RTOL, NORM_ATOL, "n", n);
                }
                break;
            case OP_LAYER_NORM:
                for (int withw = 0; withw < 2; withw++) {
                    ro->layer_norm(x, withw ? w : NULL, withw ? b : NULL, y0, n, 1e-5f);
                    ko->layer_norm(x, withw ? w : NULL, withw ? b : NULL, y1, n, 1e-5f);
                    compare_rows(&res, y1, y0, n, NORM_RTOL, NORM_ATOL, "n", n);
                }
                break;
            case OP_SOFTMAX:
                for (int ext = 0; ext < 2; ext++) {
                    if (ext) /* the values a masked score row holds: -inf-like, +-88, 100 */
                        for (int i = 0; i < n; i++) x[i] = (float[]){-1e30f, 0.0f, 88.0f, -88.0f, 100.0f}[i % 5];
                    else
                        for (int i = 0; i < n; i++) x[i] *= 3.0f;
                    memcpy(y0, x, sizeof(float) * n);
                    memcpy(y1, x, sizeof(float) * n);
                    ro->softmax(y0, n);
                    ko->softmax(y1, n);
                    compare_rows(&res, y1, y0, n, SOFTMAX_RTOL, SOFTMAX_ATOL, "n", n);
                }
                break;
            case OP_SILU_MUL:
                ro->silu_mul(x, u, y0, n);
                ko->silu_mul(x, u, y1, n);
                compare_rows(&res, y1, y0, n, ACT_RTOL, ACT_ATOL, "n", n);
                break;
            case OP_GELU_MUL:
            case OP_GELU_ERF_MUL:
                for (int withu = 0; withu < 2; withu++) {
                    if (op == OP_GELU_MUL) {
                        ro->gelu_mul(x, withu ? u : NULL, y0, n);
                        ko->gelu_mul(x, withu ? u : NULL, y1, n);
                    } else {
                        ro->gelu_erf_mul(x, withu ? u : NULL, y0, n);
                        ko->gelu_erf_mul(x, withu ? u : NULL, y1, n);
                    }
                    compare_rows(&res, y1, y0, n, ACT_RTOL, ACT_ATOL, "n", n);
                }
                break;
            case OP_ADD:
            case OP_AXPY:
            case OP_AXPY_F16: {
                const float alpha = op == OP_ADD ? 1.0f : normal(r);
                if (op == OP_AXPY_F16) fill_half(r, h, n);
                memcpy(y0, u, sizeof(float) * n);
                memcpy(y1, u, sizeof(float) * n);
                if (op == OP_ADD) { ro->add(y0, x, n); ko->add(y1, x, n); }
                else if (op == OP_AXPY) { ro->axpy(y0, alpha, x, n); ko->axpy(y1, alpha, x, n); }
                else { ro->axpy_f16(y0, alpha, h, n); ko->axpy_f16(y1, alpha, h, n); }
                for (int i = 0; i < n; i++) {
                    const float xi = op == OP_AXPY_F16 ? oxl_fp16_to_fp32(h[i]) : x[i];
                    tol[i] = AXPY_RTOL * (fabs(u[i]) + fabs((double)alpha * xi));
                }
                compare_rows_tol(&res, y1, y0, tol, n, "n", n);
                break;
            }
            case OP_DOT_F32:
            case OP_DOT_F16: {
                double m = 0;
                float s0, s1;
                if (op == OP_DOT_F32) {
                    s0 = ro->dot_f32(x, u, n);
                    s1 = ko->dot_f32(x, u, n);
                    m = abs_dot(x, u, n);
                } else {
                    fill_half(r, h, n);
                    s0 = ro->dot_f16(x, h, n);
                    s1 = ko->dot_f16(x, h, n);
                    for (int i = 0; i < n; i++) m += fabs((double)x[i] * oxl_fp16_to_fp32(h[i]));
                }
                compare(&res, s1, s0, OPS_DOT_RTOL * m, "n %d", n);
                break;
            }
            case OP_EXP_SHIFT_SUM: {
                float mx = x[0];
                for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
                for (int shift = 0; shift < 2; shift++) {
                    /* m = the row's max (online softmax), or above it as a running max may be */
                    const float m = mx + (shift ? 20.0f : 0.0f);
                    memcpy(y0, x, sizeof(float) * n);
                    memcpy(y1, x, sizeof(float) * n);
                    const float s0 = ro->exp_shift_sum(y0, n, m), s1 = ko->exp_shift_sum(y1, n, m);
                    compare_rows(&res, y1, y0, n, EXP_RTOL, EXP_ATOL, "n", n);
                    compare(&res, s1, s0, EXP_RTOL * fabs(s0) + EXP_ATOL, "sum, n %d m %+g", n, m);
                }
                break;
            }
            case OP_SSM_SCAN_STATES: {
                /* d_state 5 states of n dims; B = w, C = b (their first 5), xdt = x, y starting at u */
                const int ds = 5;
                const float dA = 0.83f;
                float *h0 = malloc(sizeof(float) * ds * n * 2), *h1 = h0 + ds * n;
                double *ht = malloc(sizeof(double) * ds * n);
                for (int i = 0; i < ds * n; i++) h0[i] = h1[i] = normal(r);
                memcpy(y0, u, sizeof(float) * n);
                memcpy(y1, u, sizeof(float) * n);
                for (int i = 0; i < n; i++) tol[i] = fabs(u[i]);
                for (int st = 0; st < ds; st++)
                    for (int i = 0; i < n; i++) {
                        const double m = fabs((double)h0[st * n + i] * dA) + fabs((double)w[st] * x[i]);
                        ht[st * n + i] = AXPY_RTOL * 2 * m;
                        tol[i] += m * fabs(b[st]);
                    }
                for (int i = 0; i < n; i++) tol[i] *= OPS_DOT_RTOL;
                ro->ssm_scan_states(h0, w, b, x, dA, y0, ds, n, 0);
                ko->ssm_scan_states(h1, w, b, x, dA, y1, ds, n, 1);
                compare_rows_tol(&res, h1, h0, ht, ds * n, "states of n", n);
                compare_rows_tol(&res, y1, y0, tol, n, "y of n", n);
                free(h0); free(ht);
                break;
            }
            case OP_CAUSAL_CONV: {
                /* n channels, 5 rows, L = 4 taps (w as n x 4), the state (3, n) from u; bias b; with and
                 * without SiLU; a channel range that starts mid-vector */
                const int T = 5, L = 4, c0 = n > 3 ? 3 : 0;
                float *xs = malloc(sizeof(float) * (size_t)n * (T + 2 * (L - 1) + 2 * T + L)), *st0 = xs + T * n;
                float *st1 = st0 + (L - 1) * n, *o0 = st1 + (L - 1) * n, *o1 = o0 + T * n, *wt = o1 + T * n;
                double *ct = malloc(sizeof(double) * T * n);
                for (int i = 0; i < T * n; i++) xs[i] = normal(r) * 2.0f;
                for (int i = 0; i < L * n; i++) wt[i] = normal(r) * 0.5f;
                for (int silu = 0; silu < 2; silu++) {
                    for (int i = 0; i < (L - 1) * n; i++) st0[i] = st1[i] = normal(r);
                    for (int t = 0; t < T; t++)   /* tolerance from the taps' magnitudes, before the calls */
                        for (int ch = 0; ch < n; ch++) {
                            double m = fabs(b[ch]);
                            for (int j = 0; j < L; j++) {
                                const int p = t - (L - 1) + j;
                                const float v = p >= 0 ? xs[p * n + ch] : st0[(L - 1 + p) * n + ch];
                                m += fabs((double)wt[ch * L + j] * v);
                            }
                            ct[t * n + ch] = 4 * OPS_DOT_RTOL * m + 1e-6;
                        }
                    memset(o0, 0, sizeof(float) * T * n);
                    memset(o1, 0, sizeof(float) * T * n);
                    ro->causal_conv(xs, n, o0, n, T, st0, n, wt, b, L, c0, n, silu);
                    ko->causal_conv(xs, n, o1, n, T, st1, n, wt, b, L, c0, n, silu);
                    compare_rows_tol(&res, o1, o0, ct, T * n, "rows of n", n);
                    compare_rows(&res, st1, st0, (L - 1) * n, 0.0, 1e-30, "state of n", n);
                }
                free(xs); free(ct);
                break;
            }
            default: break;
            }
        }
    }
    free(x); free(y0); free(h); free(tol);
    emit(c, &res);
}

int oxl_check_tier(int tier, int thorough, uint64_t seed, oxl_check_sink sink, void *ctx) {
    const oxl_kernel_table *k = oxl_tier_table(tier), *ref = oxl_tier_table(OXL_TIER_SCALAR);
    if (!k || !ref) return -1;
    checker c = {.ref = ref, .k = k, .thorough = thorough, .rng = {seed}, .sink = sink, .ctx = ctx};
    for (int type = 0; type < OXL_TYPE_COUNT; type++) {
        const oxl_type_traits *t = &ref->type[type];
        if (!t->name || !t->to_float || !t->vec_dot) continue;   /* the i-quants have no quantizer */
        check_type(&c, type);
    }
    for (int op = 0; op < OP_COUNT; op++) check_op(&c, op);
    return c.failing;
}
