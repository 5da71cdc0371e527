/* Small helpers shared by the K-quant kernels of every tier (scale unpacking). Header-only. */
#ifndef OXL_QUANTS_K_H
#define OXL_QUANTS_K_H

#include "../blocks.h"

/* Q4_K/Q5_K: eight 6-bit scales and eight 6-bit mins packed in 12 bytes (ggml's get_scale_min_k4):
 *   bytes 0-3 : scale j   (bits 0-5) | bits 4-5 of scale j+4 (bits 6-7)
 *   bytes 4-7 : min j     (bits 0-5) | bits 4-5 of min j+4   (bits 6-7)
 *   bytes 8-11: bits 0-3 of scale j+4 (low nibble) | bits 0-3 of min j+4 (high nibble) */
OXL_INLINE void oxl_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All 8 scales then all 8 mins of a Q4_K/Q5_K block as 16 bytes. */
OXL_INLINE void oxl_unpack_scales_k4(const uint8_t *q, uint8_t out[16]) {
    for (int j = 0; j < 8; j++) oxl_scale_min_k4(j, q, &out[j], &out[8 + j]);
}

/* Q3_K: sixteen 6-bit scales (stored +32) in 12 bytes: low nibbles in bytes 0-7 (scale j in the low
 * nibble of byte j for j < 8, the high nibble of byte j-8 otherwise), the 2 high bits of scale j in
 * byte 8 + j%4 at bit 2*(j/4). Returns the signed scales (-32..31). */
OXL_INLINE void oxl_unpack_scales_q3k(const uint8_t *q, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? (q[j] & 0xF) : (q[j - 8] >> 4);
        const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* IQ4_XS: the signed 6-bit scale (-32..31) of sub-block ib (of 8). */
OXL_INLINE int oxl_iq4xs_scale(const block_iq4_xs *b, int ib) {
    const int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
