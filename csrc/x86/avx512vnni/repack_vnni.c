/* The VNNI tier's repacked layouts (repack_vnni.h) from file rows: plain C, run once at load. */
#include "repack_vnni.h"

#include "../../blocks.h"

/* value b of a Q4_0 block as tile_decode orders it, unsigned (q + 8) */
static inline uint8_t q4_0_nibble(const block_q4_0 *b, int v) {
    return v < 16 ? (uint8_t)(b->qs[v] & 15) : (uint8_t)(b->qs[v - 16] >> 4);
}

void oxl_repack_q4_0_x2(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    const int64_t nb = cols / 32, np = (nb + 1) / 2;
    const block_q4_0 *src = (const block_q4_0 *)w;
    uint8_t *out = (uint8_t *)dst;
    for (int64_t r = 0; r < rows; r++, src += nb, out += np * (X2_Q4_0_BYTES + X2_SCALE_BYTES)) {
        uint16_t *d = (uint16_t *)(void *)(out + np * X2_Q4_0_BYTES);
        for (int64_t k = 0; k < np; k++) {
            const block_q4_0 *lo = &src[2 * k], *hi = 2 * k + 1 < nb ? &src[2 * k + 1] : NULL;
            for (int v = 0; v < 32; v++)
                out[X2_Q4_0_BYTES * k + v] = (uint8_t)(q4_0_nibble(lo, v) | (hi ? q4_0_nibble(hi, v) << 4 : 0));
            uint16_t two[2] = {lo->d, hi ? hi->d : 0};
            memcpy(d + 2 * k, two, sizeof(two));
        }
    }
}

void oxl_repack_q8_0_x2(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    const int64_t nb = cols / 32, np = (nb + 1) / 2;
    const block_q8_0 *src = (const block_q8_0 *)w;
    uint8_t *out = (uint8_t *)dst;
    for (int64_t r = 0; r < rows; r++, src += nb, out += np * (X2_Q8_0_BYTES + X2_SCALE_BYTES)) {
        uint16_t *d = (uint16_t *)(void *)(out + np * X2_Q8_0_BYTES);
        for (int64_t k = 0; k < np; k++) {
            uint8_t *q = out + X2_Q8_0_BYTES * k;
            for (int h = 0; h < 2; h++) {
                const int64_t i = 2 * k + h;
                for (int v = 0; v < 32; v++) q[32 * h + v] = i < nb ? (uint8_t)(src[i].qs[v] ^ 0x80) : 0;
                const uint16_t dh = i < nb ? src[i].d : 0;
                memcpy(d + 2 * k + h, &dh, 2);
            }
        }
    }
}
