/* Scalar reference kernels: the truth every SIMD tier is tested against. */
#ifndef OXL_SCALAR_QUANTS_H
#define OXL_SCALAR_QUANTS_H

#include "../blocks.h"
#include "../kernels.h"

/* naming: dequantize_row_<type>, quantize_row_<type>_ref, vec_dot_<weight>_<activation>_scalar */
void dequantize_row_f32(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_f16(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_bf16(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void quantize_row_f32_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_f16_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_bf16_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void vec_dot_f32_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_f16_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_bf16_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);

void dequantize_row_q8_0(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void quantize_row_q8_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void vec_dot_q8_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);

/* the 32-value block types (quants_legacy.c) */
void dequantize_row_q4_0(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_q4_1(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_q5_0(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_q5_1(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_q8_1(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void dequantize_row_iq4_nl(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n);
void quantize_row_q4_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_q4_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_q5_0_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_q5_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_q8_1_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void quantize_row_iq4_nl_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n);
void vec_dot_q4_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_q4_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_q5_0_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_q5_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_q8_1_q8_1_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void vec_dot_iq4_nl_q8_0_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
void oxl_register_scalar_legacy(oxl_kernel_table *t);

/* K-quants (quants_k.c): 256-value super-blocks, vec_dot against Q8_K activations */
#define OXL_KQUANT_DECL(t) \
    void dequantize_row_##t(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n); \
    void quantize_row_##t##_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n); \
    void vec_dot_##t##_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
OXL_KQUANT_DECL(q2_K)
OXL_KQUANT_DECL(q3_K)
OXL_KQUANT_DECL(q4_K)
OXL_KQUANT_DECL(q5_K)
OXL_KQUANT_DECL(q6_K)
OXL_KQUANT_DECL(iq4_xs)
OXL_KQUANT_DECL(q8_K)
void oxl_register_scalar_k(oxl_kernel_table *t);

/* FP4 types (quants_fp4.c), against Q8_0 activations */
#define OXL_QUANT_DECL(t, act) \
    void dequantize_row_##t(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n); \
    void quantize_row_##t##_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n); \
    void vec_dot_##t##_##act##_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
OXL_QUANT_DECL(mxfp4, q8_0)
OXL_QUANT_DECL(nvfp4, q8_0)
void oxl_register_scalar_fp4(oxl_kernel_table *t);

/* 1-bit and ternary types (quants_lowbit.c) */
OXL_QUANT_DECL(q1_0, q8_0)
OXL_QUANT_DECL(tq1_0, q8_K)
OXL_QUANT_DECL(tq2_0, q8_K)
void oxl_register_scalar_lowbit(oxl_kernel_table *t);

/* the 1- to 3-bit i-quants (quants_iq.c): dequantize and vec_dot, no reference quantizer */
#define OXL_IQ_DECL(t) \
    void dequantize_row_##t(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n); \
    void vec_dot_##t##_q8_K_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y);
OXL_IQ_DECL(iq2_xxs)
OXL_IQ_DECL(iq2_xs)
OXL_IQ_DECL(iq2_s)
OXL_IQ_DECL(iq3_xxs)
OXL_IQ_DECL(iq3_s)
OXL_IQ_DECL(iq1_s)
OXL_IQ_DECL(iq1_m)
void oxl_register_scalar_iq(oxl_kernel_table *t);

#endif
