/* Multi-head latent attention's per-head products (layout and summation order in mla.h). */
#include <string.h>

#include "mla.h"
#include "../matmul.h"

int64_t oxl_mla_act_row_size(int vdt, int64_t cols) {
    return vdt == OXL_TYPE_F32 ? cols * 4 : oxl_row_size(vdt, cols);
}

void oxl_mla_act_row(const oxl_kernel_table *kt, int vdt, const float *x, int64_t cols, void *dst) {
    if (vdt == OXL_TYPE_F32) memcpy(dst, x, (size_t)cols * 4);
    else kt->type[vdt].from_float(x, dst, cols);
}

void oxl_mla_head_range(const oxl_kernel_table *kt, int type, const void *W, int64_t rows_h, int64_t cols, int h,
                        const void *xq, int n, float *Y, int64_t ldy, int64_t r0, int64_t r1) {
    const char *Wh = (const char *)W + (int64_t)h * rows_h * oxl_row_size(type, cols);
    if (n == 1 && !kt->type[type].gemm_one_row) oxl_gemv_range(kt, type, Wh, cols, xq, Y, r0, r1);
    else oxl_gemm_range(kt, type, Wh, cols, xq, n, Y, ldy, r0, r1);
}
