/* AVX2 kernels for the 1-bit and ternary types: Q1_0 against Q8_0, TQ1_0 and TQ2_0 against Q8_K.
 * The summation orders are in csrc/x86/quants_lowbit_x86.h. The multi-row kernels decode each weight
 * block once for up to LB_GROUP activation rows and follow the same order per output, so they give
 * vec_dot's floats bit for bit. */
/* the ternary types' float steps are the scalar tier's exactly: no contraction into fused multiply-adds */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "../quants_lowbit_x86.h"

#define LB_GROUP 4

/* ---- Q1_0 ------------------------------------------------------------------------------------ */

/* even/odd accumulators of C activation rows over weight blocks [0, nb) of one row */
OXL_INLINE void q1_0_rows(const int C, const block_q1_0 *x, int nb, const char *y, size_t y_row, float *out, int64_t lds) {
    __m256 even[LB_GROUP], odd[LB_GROUP];
    for (int j = 0; j < C; j++) even[j] = odd[j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float ndx = -_cvtsh_ss(x[i].d);   /* see q1_0_neg_signs */
        __m256i s[4];
        for (int k = 0; k < 4; k++) s[k] = q1_0_neg_signs(x[i].qs + 4 * k);
        for (int j = 0; j < C; j++) {
            const block_q8_0 *yb = (const block_q8_0 *)(y + j * y_row) + 4 * i;
            for (int k = 0; k < 4; k += 2) {
                const __m256 p0 = _mm256_cvtepi32_ps(q1_0_dot(s[k], _mm256_loadu_si256((const __m256i *)yb[k].qs)));
                const __m256 p1 = _mm256_cvtepi32_ps(q1_0_dot(s[k + 1], _mm256_loadu_si256((const __m256i *)yb[k + 1].qs)));
                even[j] = _mm256_fmadd_ps(_mm256_set1_ps(ndx * _cvtsh_ss(yb[k].d)), p0, even[j]);
                odd[j] = _mm256_fmadd_ps(_mm256_set1_ps(ndx * _cvtsh_ss(yb[k + 1].d)), p1, odd[j]);
            }
        }
    }
    for (int j = 0; j < C; j++) out[j * lds] = hsum_f32_8(_mm256_add_ps(even[j], odd[j]));
}

static void vec_dot_q1_0_q8_0_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    q1_0_rows(1, (const block_q1_0 *)vx, n / QK1_0, (const char *)vy, 0, s, 0);
}

static void gemm_q1_0_avx2(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                           const void *OXL_RESTRICT y, size_t y_row, int nc) {
    const char *wc = (const char *)w, *yc = (const char *)y;
    for (int r = 0; r < nr; r++) {
        oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row);
        for (int j = 0; j < nc; j += LB_GROUP) {
            const block_q1_0 *x = (const block_q1_0 *)(wc + r * w_row);
            float *out = S + j * lds + r;
            switch (OXL_MIN(LB_GROUP, nc - j)) {
            case 4: q1_0_rows(4, x, n / QK1_0, yc + j * y_row, y_row, out, lds); break;
            case 3: q1_0_rows(3, x, n / QK1_0, yc + j * y_row, y_row, out, lds); break;
            case 2: q1_0_rows(2, x, n / QK1_0, yc + j * y_row, y_row, out, lds); break;
            default: q1_0_rows(1, x, n / QK1_0, yc + j * y_row, y_row, out, lds); break;
            }
        }
    }
}

/* ---- TQ1_0, TQ2_0 ------------------------------------------------------------------------------ */

#define TQ_KERNELS(T, block_t) \
    OXL_INLINE void T##_rows(const int C, const block_t *x, int nb, const char *y, size_t y_row, float *out, \
                             int64_t lds) { \
        float sum[LB_GROUP] = {0}; \
        for (int i = 0; i < nb; i++) { \
            __m256i t[8]; \
            T##_decode(&x[i], t); \
            const float dx = _cvtsh_ss(x[i].d); \
            for (int j = 0; j < C; j++) { \
                const block_q8_K *yb = (const block_q8_K *)(y + j * y_row) + i; \
                sum[j] += (float)tq_block_dot(t, yb) * (dx * yb->d); \
            } \
        } \
        for (int j = 0; j < C; j++) out[j * lds] = sum[j]; \
    } \
    static void vec_dot_##T##_q8_K_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, \
                                        const void *OXL_RESTRICT vy) { \
        T##_rows(1, (const block_t *)vx, n / QK_K, (const char *)vy, 0, s, 0); \
    } \
    static void gemm_##T##_avx2(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, \
                                int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        const char *wc = (const char *)w, *yc = (const char *)y; \
        for (int r = 0; r < nr; r++) { \
            oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row); \
            for (int j = 0; j < nc; j += LB_GROUP) { \
                const block_t *x = (const block_t *)(wc + r * w_row); \
                float *out = S + j * lds + r; \
                switch (OXL_MIN(LB_GROUP, nc - j)) { \
                case 4: T##_rows(4, x, n / QK_K, yc + j * y_row, y_row, out, lds); break; \
                case 3: T##_rows(3, x, n / QK_K, yc + j * y_row, y_row, out, lds); break; \
                case 2: T##_rows(2, x, n / QK_K, yc + j * y_row, y_row, out, lds); break; \
                default: T##_rows(1, x, n / QK_K, yc + j * y_row, y_row, out, lds); break; \
                } \
            } \
        } \
    }

TQ_KERNELS(tq1_0, block_tq1_0)
TQ_KERNELS(tq2_0, block_tq2_0)

/* ---- registration ------------------------------------------------------------------------------ */

void oxl_register_avx2_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_avx2;
    t->type[OXL_TYPE_Q1_0].gemm = gemm_q1_0_avx2;
    t->type[OXL_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_avx2;
    t->type[OXL_TYPE_TQ1_0].gemm = gemm_tq1_0_avx2;
    t->type[OXL_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_avx2;
    t->type[OXL_TYPE_TQ2_0].gemm = gemm_tq2_0_avx2;
}

/* The AVX-512 tier's Q1_0 vec_dot (quants_lowbit_avx512.c) sums in the order above, so this multi-row
 * kernel is exact for it; oxl_register_avx512_gemm (quants_legacy_avx2.c) calls this. The ternary
 * types keep the AVX2 vec_dot there. */
void oxl_register_avx512_gemm_lowbit(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q1_0].gemm = gemm_q1_0_avx2;
}
