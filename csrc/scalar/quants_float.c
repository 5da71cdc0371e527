/* F32, F16, BF16: conversion and dot products against f32 activations. */
#include "quants.h"

void dequantize_row_f32(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

void dequantize_row_f16(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n) {
    const oxl_half *h = (const oxl_half *)x;
    for (int64_t i = 0; i < n; i++) y[i] = oxl_fp16_to_fp32(h[i]);
}

void dequantize_row_bf16(const void *OXL_RESTRICT x, float *OXL_RESTRICT y, int64_t n) {
    const oxl_bf16 *h = (const oxl_bf16 *)x;
    for (int64_t i = 0; i < n; i++) y[i] = oxl_bf16_to_fp32(h[i]);
}

void quantize_row_f32_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

void quantize_row_f16_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n) {
    oxl_half *h = (oxl_half *)y;
    for (int64_t i = 0; i < n; i++) h[i] = oxl_fp32_to_fp16(x[i]);
}

void quantize_row_bf16_ref(const float *OXL_RESTRICT x, void *OXL_RESTRICT y, int64_t n) {
    oxl_bf16 *h = (oxl_bf16 *)y;
    for (int64_t i = 0; i < n; i++) h[i] = oxl_fp32_to_bf16(x[i]);
}

void vec_dot_f32_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    const float *a = (const float *)x, *b = (const float *)y;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)a[i] * b[i];
    *s = (float)sum;
}

void vec_dot_f16_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    const oxl_half *a = (const oxl_half *)x;
    const float *b = (const float *)y;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)oxl_fp16_to_fp32(a[i]) * b[i];
    *s = (float)sum;
}

void vec_dot_bf16_f32_scalar(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT x, const void *OXL_RESTRICT y) {
    const oxl_bf16 *a = (const oxl_bf16 *)x;
    const float *b = (const float *)y;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)oxl_bf16_to_fp32(a[i]) * b[i];
    *s = (float)sum;
}
