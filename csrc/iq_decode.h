/* The i-quants' 2- and 3-bit and 1-bit super-block types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M) as integers, for the dot products of every tier: a block's 32-value run `ib` (0..7) is 32 int8
 * weights w and two integer scales ls[0] (values 0..15) and ls[1] (16..31), with
 *     value_j = d * IQ_FACTOR(type) * ls[j / 16] * w_j
 * (d the block's fp16 scale). For the grid types w = +-grid value; for IQ1_S/IQ1_M w = 8 * grid +- 1
 * (the grid is -1/0/1 and the shift +-1/8). So a super-block's dot with Q8_K activations is one exact
 * integer, sum_ib ls * sum_j w_j q_j, and every tier sums it to the same float:
 *     sum += (float)bsum * (d_x * d_y);  result = IQ_FACTOR * sum
 * Scalar (portable) decoders; the SIMD tiers have their own with the same integers. */
#ifndef OXL_IQ_DECODE_H
#define OXL_IQ_DECODE_H

#include "blocks.h"
#include "iq_grids.h"
#include "kernels.h"

static inline float iq_factor(int type) {
    switch (type) {
    case OXL_TYPE_IQ3_XXS: return 0.25f;
    case OXL_TYPE_IQ3_S: return 1.0f;
    default: return 0.125f;
    }
}

/* IQ1_M keeps its fp16 scale in the top 4 bits of its four uint16 scale words */
static inline oxl_half iq1_m_scale(const block_iq1_m *b) {
    uint16_t sc[4];
    memcpy(sc, b->scales, 8);
    return (oxl_half)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* the block's fp16 scale d */
static inline oxl_half iq_block_d(int type, const void *blk) {
    if (type == OXL_TYPE_IQ1_M) return iq1_m_scale((const block_iq1_m *)blk);
    oxl_half d;
    memcpy(&d, blk, 2);   /* every other i-quant starts with d */
    return d;
}

static inline void grid8_signed(int8_t *w, uint64_t g, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        const int v = (int)((g >> (8 * j)) & 0xFF);
        w[j] = (int8_t)(signs >> j & 1 ? -v : v);
    }
}

static inline void grid4_signed(int8_t *w, uint32_t g, uint8_t signs) {
    for (int j = 0; j < 4; j++) {
        const int v = (int)((g >> (8 * j)) & 0xFF);
        w[j] = (int8_t)(signs >> j & 1 ? -v : v);
    }
}

/* 8 * grid +- 1 (delta sign bit set: -1) */
static inline void grid8_iq1(int8_t *w, uint64_t g, int neg_delta) {
    for (int j = 0; j < 8; j++) w[j] = (int8_t)(8 * (int8_t)((g >> (8 * j)) & 0xFF) + (neg_delta ? -1 : 1));
}

/* run ib of a block: 32 weights and 2 scales (see above) */
static inline void iq_decode32(int type, const void *blk, int ib, int8_t w[32], int ls[2]) {
    switch (type) {
    case OXL_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * ib, 8);
        const uint8_t *idx = (const uint8_t *)&aux[0];
        for (int l = 0; l < 4; l++) grid8_signed(w + 8 * l, iq2xxs_grid[idx[l]], ksigns_iq2xs[(aux[1] >> 7 * l) & 127]);
        ls[0] = ls[1] = 2 * (int)(aux[1] >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        for (int l = 0; l < 4; l++) {
            const uint16_t q = b->qs[4 * ib + l];
            grid8_signed(w + 8 * l, iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
        }
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        const uint8_t *qs = b->qs + 4 * ib, *signs = b->qs + QK_K / 8 + 4 * ib;
        for (int l = 0; l < 4; l++)
            grid8_signed(w + 8 * l, iq2s_grid[qs[l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300)], signs[l]);
        ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case OXL_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *qs = b->qs + 8 * ib;
        uint32_t aux;
        memcpy(&aux, b->qs + QK_K / 4 + 4 * ib, 4);
        for (int l = 0; l < 4; l++) {
            const uint8_t signs = ksigns_iq2xs[(aux >> 7 * l) & 127];
            grid4_signed(w + 8 * l, iq3xxs_grid[qs[2 * l]], signs);
            grid4_signed(w + 8 * l + 4, iq3xxs_grid[qs[2 * l + 1]], signs >> 4);
        }
        ls[0] = ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case OXL_TYPE_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const uint8_t *qs = b->qs + 8 * ib, *signs = b->signs + 4 * ib;
        const int qh = b->qh[ib];
        for (int l = 0; l < 4; l++) {
            grid4_signed(w + 8 * l, iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)], signs[l]);
            grid4_signed(w + 8 * l + 4, iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], signs[l] >> 4);
        }
        ls[0] = ls[1] = 1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 0xF);
        break;
    }
    case OXL_TYPE_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const int qh = b->qh[ib];
        for (int l = 0; l < 4; l++)
            grid8_iq1(w + 8 * l, iq1s_grid[b->qs[4 * ib + l] | (((qh >> 3 * l) & 7) << 8)], qh & 0x8000);
        ls[0] = ls[1] = 2 * ((qh >> 12) & 7) + 1;
        break;
    }
    default: { /* OXL_TYPE_IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        uint16_t sc[4];
        memcpy(sc, b->scales, 8);
        for (int l = 0; l < 4; l++) {
            const int h = b->qh[2 * ib + l / 2] >> 4 * (l % 2);
            grid8_iq1(w + 8 * l, iq1s_grid[b->qs[4 * ib + l] | ((h & 7) << 8)], h & 8);
        }
        ls[0] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
        ls[1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
        break;
    }
    }
}

static inline size_t iq_block_bytes(int type) {
    switch (type) {
    case OXL_TYPE_IQ2_XXS: return sizeof(block_iq2_xxs);
    case OXL_TYPE_IQ2_XS: return sizeof(block_iq2_xs);
    case OXL_TYPE_IQ2_S: return sizeof(block_iq2_s);
    case OXL_TYPE_IQ3_XXS: return sizeof(block_iq3_xxs);
    case OXL_TYPE_IQ3_S: return sizeof(block_iq3_s);
    case OXL_TYPE_IQ1_S: return sizeof(block_iq1_s);
    default: return sizeof(block_iq1_m);
    }
}

#endif
