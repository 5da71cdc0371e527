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

/* Q3_K: sixteen 6-bit scales (stored +32) in 12 bytes: the low nibble of scale j is the low nibble of
 * byte j (j < 8) or the high nibble of byte j-8; its 2 high bits sit in byte 8 + j%4 at bit 2*(j/4).
 * Writes the signed scales (-32..31); works on 32-bit words (little-endian, as GGUF is). */
OXL_INLINE void oxl_unpack_scales_q3k(const uint8_t *q, int8_t out[16]) {
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    uint32_t a[4];
    memcpy(a, q, 12);
    const uint32_t h = a[2];
    a[2] = ((a[0] >> 4) & lo4) | (((h >> 4) & hi2) << 4);
    a[3] = ((a[1] >> 4) & lo4) | (((h >> 6) & hi2) << 4);
    a[0] = (a[0] & lo4) | ((h & hi2) << 4);
    a[1] = (a[1] & lo4) | (((h >> 2) & hi2) << 4);
    uint8_t u[16];
    memcpy(u, a, 16);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(u[j] - 32);
}

/* Q4_K/Q5_K scales and mins on 32-bit words: out bytes 0-7 = scales, 8-15 = mins (same values as
 * oxl_unpack_scales_k4, fewer operations; for the SIMD tiers). */
OXL_INLINE void oxl_unpack_scales_k4_words(const uint8_t *q, uint32_t out[4]) {
    uint32_t a[3];
    memcpy(a, q, 12);
    out[0] = a[0] & 0x3f3f3f3fu;
    out[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    out[2] = a[1] & 0x3f3f3f3fu;
    out[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
}

/* IQ4_XS: the signed 6-bit scale (-32..31) of sub-block ib (of 8). */
OXL_INLINE int oxl_iq4xs_scale(const block_iq4_xs *b, int ib) {
    const int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
