/* Matrix-vector and matrix-matrix products of a quantized weight matrix with float activations.
 * W is `rows` rows of `cols` values of `type`, row-major, each row oxl_row_size(type, cols) bytes.
 * Activations are quantized once to the type's vec_dot_type. A matvec is the type's vec_dot per row;
 * a matmul is the type's multi-row kernel (gemm) where the tier has one, which decodes each weight
 * block once for several activation rows, else vec_dot per output. Either way every output element is
 * the very float vec_dot gives for its (weight row, activation row): the products are batch-invariant,
 * so a token's logits do not depend on how many rows, sequences or threads share the call. */
#ifndef OXL_MATMUL_H
#define OXL_MATMUL_H

#include "kernels.h"

/* Bytes of scratch for n activation rows of `cols` values for weights of `type`; -1 if invalid. */
int64_t oxl_act_size(const oxl_kernel_table *k, int type, int64_t cols, int64_t n);

/* Quantize n rows of activations (stride cols) into xq. Not threaded. */
void oxl_quantize_act(const oxl_kernel_table *k, int type, const float *x, int64_t cols, int64_t n, void *xq);

/* y[r] = dot(W[r], xq) for r in [r0, r1). xq from oxl_quantize_act (or x itself for float types).
 * No threading inside: callers split [0, rows) themselves (oxl_matvec, the fused forward pass). */
void oxl_gemv_range(const oxl_kernel_table *k, int type, const void *W, int64_t cols, const void *xq,
                    float *y, int64_t r0, int64_t r1);

/* Y[j, r] = dot(W[r], Xq[j]) for r in [r0, r1), j in [0, n); Y row stride ldy. No threading inside.
 * Each element equals oxl_gemv_range's for that row, whatever n, r0 and r1. */
void oxl_gemm_range(const oxl_kernel_table *k, int type, const void *W, int64_t cols, const void *xq,
                    int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1);

/* Repacked weights (kernels.h, oxl_repacked_layout): bytes of one repacked row of `cols` values, -1 where the
 * active tier has no layout for the type or width; oxl_repack writes rows [0, rows) of W into dst
 * (rows * that many bytes) on n_threads threads. oxl_gemm_packed_range is oxl_gemm_range over repacked rows
 * P, the same floats, for a range that starts at a multiple of OXL_REPACK_ROW_ALIGN and ends at one or at the
 * matrix's last row (a layout may interleave the rows of such groups and keep the last rows as file rows);
 * it returns 0, or -1 if the kernel could not run or r0 is not such a multiple (then nothing is to be
 * trusted in Y's range and the caller runs oxl_gemm_range on the file rows). */
int64_t oxl_repacked_row_size(const oxl_kernel_table *k, int type, int64_t cols);
int oxl_repack(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols, void *dst,
               int n_threads);
int oxl_gemm_packed_range(const oxl_kernel_table *k, int type, const void *P, int64_t cols, const void *xq,
                          int64_t n, float *Y, int64_t ldy, int64_t r0, int64_t r1);

/* Whole products with their own OpenMP region. scratch: oxl_act_size bytes (unused for float types).
 * Return OXL_OK or an OXL_ERR_* code; nothing is read before the arguments are checked. */
int oxl_matvec(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
               const float *x, float *y, void *scratch, int n_threads);
int oxl_matmul(const oxl_kernel_table *k, int type, const void *W, int64_t rows, int64_t cols,
               const float *X, int64_t n, float *Y, void *scratch, int n_threads);

/* Split [0, total) into n_parts pieces aligned to `align`; piece i is [*b, *e). */
OXL_INLINE void oxl_split_range(int64_t total, int n_parts, int i, int64_t align, int64_t *b, int64_t *e) {
    const int64_t units = (total + align - 1) / align;
    const int64_t per = units / n_parts, extra = units % n_parts;
    const int64_t ub = i * per + (i < extra ? i : extra);
    const int64_t ue = ub + per + (i < extra ? 1 : 0);
    *b = OXL_MIN(ub * align, total);
    *e = OXL_MIN(ue * align, total);
}

#endif
