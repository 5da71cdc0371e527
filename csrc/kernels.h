/* The kernel tables: every quant type's sizes and kernels, every row op, per SIMD tier.
 *
 * A tier (scalar, avx2, avx512, avx512vnni, neon, dotprod) is one table. The scalar table is
 * filled first; each higher tier starts as a copy of the one below and its register function
 * (csrc/<arch>/<tier>/register.c) overrides only the entries it has faster code for. At init the
 * highest tier that the CPU and OS support, and that OXILLAMA_DISABLE_CPU_FEATURES does not
 * exclude, becomes the active table. Adding a kernel is one assignment in a register function. */
#ifndef OXL_KERNELS_H
#define OXL_KERNELS_H

#include "oxl.h"

/* GGUF/ggml type ids (the numbers are part of the file format). */
typedef enum {
    OXL_TYPE_F32 = 0,
    OXL_TYPE_F16 = 1,
    OXL_TYPE_Q4_0 = 2,
    OXL_TYPE_Q4_1 = 3,
    OXL_TYPE_Q5_0 = 6,
    OXL_TYPE_Q5_1 = 7,
    OXL_TYPE_Q8_0 = 8,
    OXL_TYPE_Q8_1 = 9,
    OXL_TYPE_Q2_K = 10,
    OXL_TYPE_Q3_K = 11,
    OXL_TYPE_Q4_K = 12,
    OXL_TYPE_Q5_K = 13,
    OXL_TYPE_Q6_K = 14,
    OXL_TYPE_Q8_K = 15,
    OXL_TYPE_IQ2_XXS = 16,
    OXL_TYPE_IQ2_XS = 17,
    OXL_TYPE_IQ3_XXS = 18,
    OXL_TYPE_IQ1_S = 19,
    OXL_TYPE_IQ4_NL = 20,
    OXL_TYPE_IQ3_S = 21,
    OXL_TYPE_IQ2_S = 22,
    OXL_TYPE_IQ4_XS = 23,
    OXL_TYPE_IQ1_M = 29,
    OXL_TYPE_BF16 = 30,
    OXL_TYPE_TQ1_0 = 34,
    OXL_TYPE_TQ2_0 = 35,
    OXL_TYPE_MXFP4 = 39,
    OXL_TYPE_NVFP4 = 40,
    OXL_TYPE_Q1_0 = 41,
    OXL_TYPE_COUNT = 42,
} oxl_type;

/* dst[0..n) = dequantized src; n is a multiple of the block size. */
typedef void (*oxl_to_float_fn)(const void *OXL_RESTRICT src, float *OXL_RESTRICT dst, int64_t n);
/* dst = n values of src quantized; n is a multiple of the block size. */
typedef void (*oxl_from_float_fn)(const float *OXL_RESTRICT src, void *OXL_RESTRICT dst, int64_t n);
/* *s = dot(x, y) over n values: x a weight row of its type, y activations of its vec_dot_type. */
typedef void (*oxl_vec_dot_fn)(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x,
                               const void *OXL_RESTRICT y);

/* Multi-row product: S[j * lds + r] = dot(w row r, y row j) for r in [0, nr) and j in [0, nc),
 * nr >= 1, 1 <= nc <= OXL_GEMM_MAX_ACT_ROWS; w rows are w_row bytes apart, y rows y_row bytes apart (y of the
 * type's vec_dot_type). Each weight block is decoded once for several activation rows. Every element
 * is exactly the float the same tier's vec_dot gives for its two rows (the same summation order),
 * whatever nr, nc and the element's place: the logits of a token must not depend on the batch. */
#define OXL_GEMM_MAX_W_ROWS 4   /* weight rows a kernel holds running sums for across spans */
#define OXL_GEMM_MAX_ACT_ROWS 64
typedef void (*oxl_gemm_fn)(int n, float *OXL_RESTRICT s, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                            int nr, const void *OXL_RESTRICT y, size_t y_row, int nc);

/* Streaming weights: a product reads its weight rows one after the other (one sequential stream per
 * thread) and, at each row, asks for the row that lies OXL_STREAM_AHEAD bytes further on, bounded by the
 * end of what it reads. The multi-row kernels do this themselves, so oxl_gemm_range hands them whole row
 * ranges. Hint T0: on a Xeon (Sapphire Rapids, KVM, 2026-11-25) the non-temporal hint the matvec used
 * before streamed Gemma 3's 178 MB output matrix at the rate of no prefetch at all (15.8-16.7 ms on 2
 * threads), T0 in 9.4 ms; one 16-row burst per kernel call, as the small-batch path asked before, made
 * the 8-row product 3x slower than none (it was measured on Zen 3 as equal to none, with NTA). */
#define OXL_STREAM_AHEAD 2048
static inline void oxl_stream_row(const void *row, size_t row_bytes, const void *end) {
    const char *p = (const char *)row + OXL_STREAM_AHEAD, *e = (const char *)end;
    if (p + row_bytes < e) e = p + row_bytes;
    for (; p < e; p += 64) __builtin_prefetch(p, 0, 3);
}

/* A repacked weight layout (ggml-cpu's repack "extra buffer type"): a type's rows rewritten once at load
 * into the form one tier's multi-row kernel reads with the least work, kept beside the mapped file, which
 * stays the truth. Rows stay rows in the large: each takes row_size(cols) bytes, and a range of rows that
 * starts at a multiple of OXL_REPACK_ROW_ALIGN is the same rows in either layout (a layout may interleave
 * the rows of such a group). gemm reads them as the type's gemm reads file rows and gives every element the
 * very float of the type's vec_dot; it returns 0, or -1 if it could not run (no memory for its working
 * buffer): the caller then multiplies the file rows. */
/* A layout may interleave groups of up to this many rows: a repacked product's row range (and the rows a
 * thread repacks) starts at a multiple of it. */
#define OXL_REPACK_ROW_ALIGN 16
typedef int (*oxl_gemm_packed_fn)(int n, float *OXL_RESTRICT s, int64_t lds, const void *OXL_RESTRICT w,
                                  size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc);
typedef struct {
    const char *name;                              /* NULL: the type has no repacked layout on this tier */
    int64_t (*row_size)(int64_t cols);             /* bytes of a repacked row; -1: no layout for this width */
    void (*repack)(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols);
    oxl_gemm_packed_fn gemm;
} oxl_repacked_layout;

typedef struct {
    const char *name;           /* GGUF type name, e.g. "Q4_K" */
    int64_t blck_size;          /* values per block */
    size_t type_size;           /* bytes per block */
    int is_quantized;
    oxl_type vec_dot_type;      /* what the activations are quantized to for vec_dot */
    oxl_to_float_fn to_float;   /* dequantize */
    oxl_from_float_fn from_float_ref; /* reference (slow, exact) quantization */
    oxl_from_float_fn from_float;     /* fast quantization, used for activations */
    oxl_vec_dot_fn vec_dot;
    const char *tier;           /* tier whose vec_dot this is; filled by the dispatcher */
    oxl_gemm_fn gemm;           /* optional, matching vec_dot; matmul falls back to vec_dot per output */
    int gemm_one_row;           /* gemm is faster than vec_dot row by row even for one activation row */
    oxl_repacked_layout repacked;   /* optional; its gemm sums as gemm and vec_dot do */
} oxl_type_traits;

/* Row ops used by the transformer. All take contiguous float rows. */
typedef struct {
    /* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight) */
    void (*rms_norm)(const float *x, const float *w, float *y, int n, float eps);
    /* y = (x - mean) / sqrt(var + eps) * w + b   (w, b may be NULL) */
    void (*layer_norm)(const float *x, const float *w, const float *b, float *y, int n, float eps);
    /* x = softmax(x) in place */
    void (*softmax)(float *x, int n);
    /* y = silu(g) * u */
    void (*silu_mul)(const float *g, const float *u, float *y, int n);
    /* y = gelu_tanh(g) * u  (u may be NULL: plain gelu) */
    void (*gelu_mul)(const float *g, const float *u, float *y, int n);
    /* y = gelu_erf(g) * u   (u may be NULL) */
    void (*gelu_erf_mul)(const float *g, const float *u, float *y, int n);
    /* y += x */
    void (*add)(float *y, const float *x, int n);
    /* y = a * x + y */
    void (*axpy)(float *y, float a, const float *x, int n);
    /* dot of f32 x with f32 y / f16 y */
    float (*dot_f32)(const float *x, const float *y, int n);
    float (*dot_f16)(const float *x, const oxl_half *y, int n);
    /* y += a * x (x f16) */
    void (*axpy_f16)(float *y, float a, const oxl_half *x, int n);
    void (*fp32_to_fp16)(const float *x, oxl_half *y, int n);
    /* attention over an f16 cache, rows `stride` halves apart:
     * scores[t] = scale * dot(q, K[t]) for t < n;  out = sum_t p[t] * V[t] (out overwritten) */
    void (*attn_scores_f16)(const float *q, const oxl_half *K, int64_t stride, int n, int hd, float scale,
                            float *scores);
    void (*attn_values_f16)(const float *p, const oxl_half *V, int64_t stride, int n, int hd, float *out);
    /* The same for the G query heads of one GQA group (q: G rows of hd, contiguous) against shared
     * rows, each row converted from f16 once for all G heads:
     * scores[h * n + t] = scale * dot(q_h, K[t]);  out[h * hd + i] = sum_t p[h * n + t] * V[t][i]
     * In every tier a score is one function of q_h and K[t] alone, and an output sums its head's rows in order
     * alone: the same floats whatever G, n or a row's place in the call (attention packs several query rows
     * into one call; csrc/selftest.c checks it). This holds for the Q8_0 ones below too. */
    void (*attn_scores_f16_group)(const float *q, int G, const oxl_half *K, int64_t stride, int n, int hd,
                                  float scale, float *scores);
    void (*attn_values_f16_group)(const float *p, int G, const oxl_half *V, int64_t stride, int n, int hd,
                                  float *out);
    /* The same over a Q8_0 cache: each K/V row is head_dim / 32 blocks of block_q8_0, rows row_bytes apart
     * (head_dim a multiple of 32) */
    void (*attn_scores_q8_0_group)(const float *q, int G, const void *K, int64_t row_bytes, int n, int hd,
                                   float scale, float *scores);
    void (*attn_values_q8_0_group)(const float *p, int G, const void *V, int64_t row_bytes, int n, int hd,
                                   float *out);
    /* x = exp(x - m) in place; returns the sum (the online softmax of tiled attention) */
    float (*exp_shift_sum)(float *x, int n, float m);
    /* One token of Mamba-2's selective scan for one head (layers/ssm.h), over its d_state states in order:
     * for s = 0 .. d_state - 1:  h[s][i] = h[s][i] dA + B[s] xdt[i];  y[i] += h[s][i] C[s]   (i < n; h rows n
     * floats apart). Every y[i] is summed over s in that order in every tier (a SIMD tier fuses the multiply-adds,
     * so tiers differ by roundings, never by order). */
    void (*ssm_scan_states)(float *h, const float *B, const float *C, const float *xdt, float dA, float *y,
                            int d_state, int n, int stream);
    /* stream: h comes from memory (a call's first token; decode streams every sequence's whole state each step),
     * so SIMD tiers prefetch it OXL_SSM_PREFETCH_BYTES ahead of the row they update, past its last row into the
     * memory after it (the forward's next head); 0: h is in cache (a prompt's later tokens), no prefetch. A hint
     * only: the floats are the same either way. */
    /* The causal depthwise convolution of every recurrent layer kind (Mamba-2's xBC conv, LFM2's short conv,
     * Qwen3-Next's q|k|v conv), channels [c0, c1) over n rows of one sequence, L taps (2 .. OXL_CONV_MAX_L):
     *   y[t][c] = act((w[c][0] x[t-L+1][c] + w[c][1] x[t-L+2][c] + ... + w[c][L-1] x[t][c]) + b[c])
     * the taps summed in kernel order j = 0 first, the bias (b NULL: none) added last, act = SiLU
     * v / (1 + e^-v) when silu (libm's expf in the scalar tier, the tier's polynomial exp in SIMD tiers, on every
     * lane), else the identity. Inputs before row 0 come from
     * state (L - 1, ld_state): row k holds the (L-1-k)-th input before, oldest row first, channel c at column c;
     * it is left holding the last L - 1 inputs. x (n, ldx), y (n, ldy); y may be x (in place). w (n_channels, L)
     * row-major (the GGUF's conv weight). Channels are independent and every lane of a SIMD tier does the
     * scalar arithmetic of its channel (masked tails, no scalar tail), so a channel's result does not depend
     * on the [c0, c1) it was computed in; a prompt whole, in chunks or token by token gives the same floats.
     * SIMD tiers fuse the multiply-adds (tiers differ by roundings, never by order). */
    void (*causal_conv)(const float *x, int64_t ldx, float *y, int64_t ldy, int n, float *state, int64_t ld_state,
                        const float *w, const float *b, int L, int c0, int c1, int silu);
} oxl_ops;

#define OXL_SSM_PREFETCH_BYTES 8192   /* the streaming scan's prefetch distance (ssm_scan_states) */
#define OXL_CONV_MAX_L 64   /* the widest causal conv kernel accepted (Mamba-2, Qwen3-Next: 4, LFM2: 3) */

typedef struct {
    const char *name;
    oxl_type_traits type[OXL_TYPE_COUNT];
    oxl_ops ops;
} oxl_kernel_table;

typedef enum {
    OXL_TIER_SCALAR = 0,
    OXL_TIER_AVX2,
    OXL_TIER_AVX512,
    OXL_TIER_AVX512VNNI,
    OXL_TIER_NEON,
    OXL_TIER_DOTPROD,
    OXL_TIER_COUNT,
} oxl_tier;

/* CPU feature bits, as detected (CPUID + XCR0 on x86, HWCAP/sysctl on ARM). */
enum {
    OXL_CPU_SSE3 = 1u << 0,
    OXL_CPU_AVX = 1u << 1,
    OXL_CPU_AVX2 = 1u << 2,
    OXL_CPU_FMA = 1u << 3,
    OXL_CPU_F16C = 1u << 4,
    OXL_CPU_AVX512F = 1u << 5,
    OXL_CPU_AVX512BW = 1u << 6,
    OXL_CPU_AVX512VL = 1u << 7,
    OXL_CPU_AVX512DQ = 1u << 8,
    OXL_CPU_AVX512VNNI = 1u << 9,
    OXL_CPU_AVXVNNI = 1u << 10,
    OXL_CPU_AVX512BF16 = 1u << 11,
    OXL_CPU_BMI2 = 1u << 12,
    OXL_CPU_NEON = 1u << 16,
    OXL_CPU_DOTPROD = 1u << 17,
    OXL_CPU_FP16 = 1u << 18,
    OXL_CPU_I8MM = 1u << 19,
};

uint32_t oxl_cpu_detect(void);
const char *oxl_cpu_feature_name(int bit);

/* Fill all tables and pick the active one. `disabled` is a comma-separated list of tier or
 * feature names to exclude (OXILLAMA_DISABLE_CPU_FEATURES), or NULL. Idempotent per argument. */
void oxl_dispatch_init(const char *disabled);
const oxl_kernel_table *oxl_kernels(void);          /* the active table */
const oxl_kernel_table *oxl_tier_table(int tier);   /* NULL if not compiled or not usable here */
int oxl_active_tier(void);
const char *oxl_tier_name(int tier);
int oxl_tier_compiled(int tier);
uint32_t oxl_cpu_features(void);

/* This thread's scratch buffer for the many-row kernels of every tier (their prepared activations and a tile
 * of file rows): at least `bytes` long, 64-byte aligned, grown to the largest request the thread has made and
 * freed when the thread ends; NULL if out of memory. (matmul.c) */
void *oxl_panel_memory(size_t bytes);

/* Tier-independent facts (sizes, reference quantize) without needing init. */
const oxl_type_traits *oxl_type_info(int type);
/* bytes for n values of type, or -1 if n is not a multiple of the block size / type unknown */
int64_t oxl_row_size(int type, int64_t n);

/* register functions: each tier's folder defines one */
void oxl_register_scalar(oxl_kernel_table *t);
void oxl_register_scalar_ops(oxl_kernel_table *t);
void oxl_register_avx2(oxl_kernel_table *t);
void oxl_register_avx512(oxl_kernel_table *t);
/* multi-row kernels compiled in the AVX2 tier that sum as the AVX-512 tier's vec_dots (quants_legacy_avx2.c) */
void oxl_register_avx512_gemm(oxl_kernel_table *t);
void oxl_register_avx512vnni(oxl_kernel_table *t);
void oxl_register_neon(oxl_kernel_table *t);
void oxl_register_dotprod(oxl_kernel_table *t);

#endif /* OXL_KERNELS_H */
