/* AVX2 vec_dot and multi-row kernel for NVFP4 (64 E2M1 values in 4 sub-blocks of 16, each with a UE4M3
 * scale) against Q8_0 (two activation blocks per weight block).
 *
 * Per Q8_0 activation block (sub-blocks 2h and 2h + 1 of the weight block): the 32 codes looked up as int8
 * (kvalues_mxfp4 by vpshufb), products with the activations summed to 8 int32 lanes (lanes 0..3: the first
 * sub-block, 4..7: the second; exact), then acc = fma(c, p, acc) with c = d_s * d_y per lane (rounded once);
 * even activation blocks into one accumulator, odd into another, and hsum8(even + odd) at the end. The
 * multi-row kernel decodes each weight block once for up to FP4_GROUP activation rows in that order, so it
 * gives vec_dot's floats bit for bit. */
#include "../quants_legacy_x86.h"

#define FP4_GROUP 4

static float g_ue4m3_half[256];   /* oxl_ue4m3_to_fp32_half of every byte */

/* the 64 codes of a block as two 32-lane int8 vectors in value order */
static inline void nvfp4_decode(const block_nvfp4 *b, __m256i q[2]) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)kvalues_mxfp4), m15 = _mm_set1_epi8(15);
    for (int h = 0; h < 2; h++) {
        const __m128i raw = _mm_loadu_si128((const __m128i *)(b->qs + 16 * h));
        const __m128i lo = _mm_and_si128(raw, m15), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m15);
        /* sub-block 2h: low then high nibbles of bytes 0..7; sub-block 2h + 1: of bytes 8..15 */
        const __m128i s0 = _mm_unpacklo_epi64(lo, hi), s1 = _mm_unpackhi_epi64(lo, hi);
        q[h] = _mm256_set_m128i(_mm_shuffle_epi8(kv, s1), _mm_shuffle_epi8(kv, s0));
    }
}

OXL_INLINE void nvfp4_rows(const int C, const block_nvfp4 *x, int nb, const char *y, size_t y_row, float *out, int64_t lds) {
    __m256 even[FP4_GROUP], odd[FP4_GROUP];
    for (int j = 0; j < C; j++) even[j] = odd[j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i q[2];
        nvfp4_decode(&x[i], q);
        const __m256i ax[2] = {_mm256_sign_epi8(q[0], q[0]), _mm256_sign_epi8(q[1], q[1])};
        /* the sub-block scales over their 4 lanes each: (d0 x4, d1 x4) and (d2 x4, d3 x4) */
        const __m256 ds[2] = {
            _mm256_set_m128(_mm_set1_ps(g_ue4m3_half[x[i].d[1]]), _mm_set1_ps(g_ue4m3_half[x[i].d[0]])),
            _mm256_set_m128(_mm_set1_ps(g_ue4m3_half[x[i].d[3]]), _mm_set1_ps(g_ue4m3_half[x[i].d[2]]))};
        for (int j = 0; j < C; j++) {
            const block_q8_0 *yb = (const block_q8_0 *)(y + j * y_row) + 2 * i;
            for (int h = 0; h < 2; h++) {
                const __m256i qy = _mm256_loadu_si256((const __m256i *)yb[h].qs);
                const __m256 p = _mm256_cvtepi32_ps(dot_u8_i8(ax[h], _mm256_sign_epi8(qy, q[h])));
                const __m256 c = _mm256_mul_ps(ds[h], _mm256_set1_ps(fp16(yb[h].d)));
                if (h == 0) even[j] = _mm256_fmadd_ps(c, p, even[j]);
                else odd[j] = _mm256_fmadd_ps(c, p, odd[j]);
            }
        }
    }
    for (int j = 0; j < C; j++) out[j * lds] = hsum_f32_8(_mm256_add_ps(even[j], odd[j]));
}

static void vec_dot_nvfp4_q8_0_avx2(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    nvfp4_rows(1, (const block_nvfp4 *)vx, n / QK_NVFP4, (const char *)vy, 0, s, 0);
}

static void gemm_nvfp4_avx2(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                            const void *OXL_RESTRICT y, size_t y_row, int nc) {
    const char *wc = (const char *)w, *yc = (const char *)y;
    for (int r = 0; r < nr; r++) {
        oxl_stream_row(wc + r * w_row, w_row, wc + (size_t)nr * w_row);
        const block_nvfp4 *x = (const block_nvfp4 *)(wc + r * w_row);
        for (int j = 0; j < nc; j += FP4_GROUP) {
            float *out = S + j * lds + r;
            const char *yj = yc + j * y_row;
            switch (OXL_MIN(FP4_GROUP, nc - j)) {
            case 4: nvfp4_rows(4, x, n / QK_NVFP4, yj, y_row, out, lds); break;
            case 3: nvfp4_rows(3, x, n / QK_NVFP4, yj, y_row, out, lds); break;
            case 2: nvfp4_rows(2, x, n / QK_NVFP4, yj, y_row, out, lds); break;
            default: nvfp4_rows(1, x, n / QK_NVFP4, yj, y_row, out, lds); break;
            }
        }
    }
}

void oxl_register_avx2_fp4(oxl_kernel_table *t) {
    for (int u = 0; u < 256; u++) g_ue4m3_half[u] = oxl_ue4m3_to_fp32_half((uint8_t)u);
    t->type[OXL_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_avx2;
    t->type[OXL_TYPE_NVFP4].gemm = gemm_nvfp4_avx2;
}
