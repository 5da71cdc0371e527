/* The scalar tier: every type's sizes and reference kernels. Always built, always usable. */
#include "quants.h"

#define TYPE(id, nm, bs, ts, q, vdt) \
    t->type[id] = (oxl_type_traits){.name = nm, .blck_size = bs, .type_size = ts, .is_quantized = q, \
                                    .vec_dot_type = vdt}

void oxl_register_scalar(oxl_kernel_table *t) {
    TYPE(OXL_TYPE_F32, "F32", 1, 4, 0, OXL_TYPE_F32);
    TYPE(OXL_TYPE_F16, "F16", 1, 2, 0, OXL_TYPE_F32);
    TYPE(OXL_TYPE_BF16, "BF16", 1, 2, 0, OXL_TYPE_F32);
    TYPE(OXL_TYPE_Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), 1, OXL_TYPE_Q8_1);
    TYPE(OXL_TYPE_Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), 1, OXL_TYPE_Q8_1);
    TYPE(OXL_TYPE_Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), 1, OXL_TYPE_Q8_1);
    TYPE(OXL_TYPE_Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ4_NL, "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_MXFP4, "MXFP4", QK_MXFP4, sizeof(block_mxfp4), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_NVFP4, "NVFP4", QK_NVFP4, sizeof(block_nvfp4), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_Q1_0, "Q1_0", QK1_0, sizeof(block_q1_0), 1, OXL_TYPE_Q8_0);
    TYPE(OXL_TYPE_TQ1_0, "TQ1_0", QK_K, sizeof(block_tq1_0), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_TQ2_0, "TQ2_0", QK_K, sizeof(block_tq2_0), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ2_XXS, "IQ2_XXS", QK_K, sizeof(block_iq2_xxs), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ2_XS, "IQ2_XS", QK_K, sizeof(block_iq2_xs), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ2_S, "IQ2_S", QK_K, sizeof(block_iq2_s), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ3_XXS, "IQ3_XXS", QK_K, sizeof(block_iq3_xxs), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ3_S, "IQ3_S", QK_K, sizeof(block_iq3_s), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ1_S, "IQ1_S", QK_K, sizeof(block_iq1_s), 1, OXL_TYPE_Q8_K);
    TYPE(OXL_TYPE_IQ1_M, "IQ1_M", QK_K, sizeof(block_iq1_m), 1, OXL_TYPE_Q8_K);

    t->type[OXL_TYPE_F32].to_float = dequantize_row_f32;
    t->type[OXL_TYPE_F32].from_float_ref = quantize_row_f32_ref;
    t->type[OXL_TYPE_F32].vec_dot = vec_dot_f32_f32_scalar;
    t->type[OXL_TYPE_F16].to_float = dequantize_row_f16;
    t->type[OXL_TYPE_F16].from_float_ref = quantize_row_f16_ref;
    t->type[OXL_TYPE_F16].vec_dot = vec_dot_f16_f32_scalar;
    t->type[OXL_TYPE_BF16].to_float = dequantize_row_bf16;
    t->type[OXL_TYPE_BF16].from_float_ref = quantize_row_bf16_ref;
    t->type[OXL_TYPE_BF16].vec_dot = vec_dot_bf16_f32_scalar;
    t->type[OXL_TYPE_Q8_0].to_float = dequantize_row_q8_0;
    t->type[OXL_TYPE_Q8_0].from_float_ref = quantize_row_q8_0_ref;
    t->type[OXL_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_scalar;

    oxl_register_scalar_legacy(t);
    oxl_register_scalar_k(t);
    oxl_register_scalar_fp4(t);
    oxl_register_scalar_lowbit(t);
    oxl_register_scalar_iq(t);

    /* the fast quantizer defaults to the reference one; tiers override it */
    for (int i = 0; i < OXL_TYPE_COUNT; i++) t->type[i].from_float = t->type[i].from_float_ref;

    oxl_register_scalar_ops(t);
}
