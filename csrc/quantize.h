/* Whole-row quantization for model files (csrc/scalar/quants_weighted.c). */
#ifndef OXL_QUANTIZE_H
#define OXL_QUANTIZE_H

#include "kernels.h"

/* Whether oxl_quantize_chunk can write type (with importance weights or without). */
int oxl_can_quantize_chunk(int type, int with_weights);

/* dst = nrow rows of n_per_row values of src quantized to type as ggml's quantize_<type> does;
 * qw: n_per_row importance weights shared by every row, or NULL. Returns the bytes written, or -1
 * for a type it cannot write or a row length that is not a whole number of blocks. */
int64_t oxl_quantize_chunk(int type, const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                           const float *qw);

#endif
