/* Repacked layouts of the VNNI tier's multi-row kernels (quants_legacy_vnni.c): Q4_0 and Q8_0 rows stored
 * as block pairs, in the very 512-bit form the kernel multiplies (block 2k in the lower 256 bits, 2k + 1 in
 * the upper; lane order as tile_decode gives it), so a pair costs one load (and, for Q4_0, one shift)
 * instead of two block decodes, two scale conversions and two joins.
 *
 *   row = np pairs of quant bytes, then np pairs of fp16 scales (d of block 2k, d of block 2k + 1)
 *   q4_0_x2: 32 bytes a pair: byte b = v(2k, b) | v(2k + 1, b) << 4, v(i, b) the unsigned nibble of value b
 *            of block i in tile_decode's order (b < 16: qs[b] & 15, else qs[b - 16] >> 4); 36 bytes a pair,
 *            the file's size
 *   q8_0_x2: 64 bytes a pair: q + 128 as u8 (the weight is vpdpbusd's unsigned operand, the activation
 *            stays signed, and -128 sum4(y) is taken off per activation block when it is packed); 68 bytes
 *            a pair, the file's size
 * np = ceil(blocks / 2); an odd last block leaves the pair's upper half and scale zero (the kernel reads
 * only its lower half). The integers per lane are the file-layout kernel's, so every float is too. */
#ifndef OXL_X86_REPACK_VNNI_H
#define OXL_X86_REPACK_VNNI_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../../kernels.h"

#define X2_Q4_0_BYTES 32
#define X2_Q8_0_BYTES 64
#define X2_SCALE_BYTES 4

void oxl_repack_q4_0_x2(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols);
void oxl_repack_q8_0_x2(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols);

/* pair k of a q4_0_x2 row: the low nibbles in the lower half, the high nibbles shifted down in the upper */
static inline __m512i x2_nibbles(const char *row, int k) {
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + X2_Q4_0_BYTES * k)));
    return _mm512_and_si512(_mm512_srlv_epi64(b, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), _mm512_set1_epi8(0x0F));
}

static inline __m512i x2_bytes(const char *row, int k) {
    return _mm512_loadu_si512((const void *)(row + X2_Q8_0_BYTES * k));
}

/* pair k's scales: d(2k) in lanes 0..7, d(2k + 1) in 8..15 (the conversion is exact, as fp16()'s) */
static inline __m512 x2_scales(const char *row, int np, int pair_bytes, int k) {
    int32_t two;
    memcpy(&two, row + (size_t)np * pair_bytes + X2_SCALE_BYTES * k, 4);
    const __m256i ctrl = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm512_cvtph_ps(_mm256_shuffle_epi8(_mm256_set1_epi32(two), ctrl));
}

/* the last pair's lower block (an odd block count) and its scale */
static inline __m256i x2_tail(const char *row, int np, int is_q4, float *d) {
    const int k = np - 1;
    uint16_t h;
    memcpy(&h, row + (size_t)np * (is_q4 ? X2_Q4_0_BYTES : X2_Q8_0_BYTES) + X2_SCALE_BYTES * k, 2);
    *d = _cvtsh_ss(h);
    if (is_q4)
        return _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(row + X2_Q4_0_BYTES * k)), _mm256_set1_epi8(0x0F));
    return _mm256_loadu_si256((const __m256i *)(row + X2_Q8_0_BYTES * k));
}

#endif
