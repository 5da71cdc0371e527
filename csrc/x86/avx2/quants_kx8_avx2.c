/* The K-quants Q4_K, Q5_K and Q6_K on the AVX2 tier: eight weight rows side by side, one int32 lane per row, as Q4_0
 * and Q8_0 (quants_x8_avx2.c, x8_common.h). The orders are the AVX-512 VNNI tier's (its quants_kx16_vnni.c),
 * so the two tiers give the same floats:
 *
 * Q4_K: value = d sc_j q - dmin m_j, q unsigned 4-bit, sub-blocks j = 0..7 of 32 values, sc_j and m_j 6-bit.
 *     out = +0;  for each super-block in order:
 *         t = (-dmin) * (float)msum                      msum = sum_j m_j bsum_j, exact int32 (< 2^22)
 *         for j = 0..7:  t = fma(d * sc_j, (float)isum_j, t)
 *         out = fma(dy, t, out)
 * isum_j the exact int32 dot of sub-block j's 32 q and activation values: eight vpmaddubsw (a pair's sum
 * |.| <= 2 * 15 * 128), summed in int16 (|.| <= 30720, exact), one vpmaddwd by ones. msum: four vpmaddwd of
 * pairs of mins against pairs of bsum_j (|bsum_j| <= 32 * 128 fits int16).
 * Q5_K: the same with q 5-bit (the fifth bits in qh): four maddubs summed in int16 (|.| <= 4 * 2 * 31 * 128 =
 * 31744), two vpmaddwd per sub-block.
 *
 * Q6_K: value = d sc_g (q - 32), q unsigned 6-bit, sixteen sub-blocks g of 16 values, sc_g int8:
 *     out = +0;  for each super-block in order:
 *         t = +0;  for g = 0..15:  t = fma(d * sc_g, (float)isum_g, t);   out = fma(dy, t, out)
 * isum_g = sum q y - 32 bsums[g], exact: four vpmaddubsw (a pair |.| <= 2 * 63 * 128 = 16128), two of them
 * summed in int16, two vpmaddwd by ones, the int32 sum starting at -32 bsums[g].
 *
 * IQ4_XS: value = d (ls_j - 32) kvalues_iq4nl[q], eight 32-value sub-blocks j, ls_j 6-bit:
 *     out = +0;  for each super-block in order:  out = fma(d * dy, (float)isum, out)
 *     isum = sum_j (ls_j - 32) sum(kvalues[q] y), exact int32 (|.| <= 256 * 127 * 127 * 32 < 2^31)
 * with the sign trick (|value| against y with the value's sign: a pair |.| <= 2 * 127 * 127) and vpmaddwd of
 * each pair by the sub-block's scale: four operations per four values, the AVX2 tier's IQ4_XS order before
 * (an int32 sum per super-block) with its float steps one fma per super-block.
 *
 * Layouts (the repacked copy, or built per call from file rows into a per-thread buffer): a group of 8 rows, nb
 * super-blocks of 8 x the file's block bytes each (the file's bytes of those rows), super-block after
 * super-block; a chunk is 32 bytes holding one dword of each row (row l's at 4l).
 *   q4_K_x8: 0 d of rows 0..7 (fp16); 16 dmin; 32, 64, 96: chunks of the scales' dwords 0, 1, 2 (the file's
 *            12 bytes, unpacked in registers); 128: chunk z (0..31) holds row l's qs[4z .. +3]
 *   q5_K_x8: q4_K_x8's, then 1152: qh chunk k (0..7) holds row l's qh[4k .. +3] (bit j: the fifth bit of
 *            sub-block j)
 *   iq4_xs_x8: 0 d; 16 scales_h; 32 a chunk of scales_l; 64 qs chunk z (0..31) (sub-block z / 4, low nibbles
 *            values 4 (z % 4) .., high nibbles 16 + 4 (z % 4) ..)
 *   q6_K_x8: 0 d; 16: chunk k (0..3) of scales[4k .. +3]; 144 + 96 g: sub-block g (0..15) in three chunks c = 0..2,
 *            byte b of row l's dword: q(16g + 4c + b) | bits 2c, 2c + 1 of q(16g + 12 + b) at bits 6, 7 (q the 6-bit
 *            value, the file's ql nibble | its qh bits << 4): the fourth chunk's values come from the top bits,
 *            eleven operations a sub-block where ql / qh took seventeen, in the file's bytes
 * A repacked matrix is its whole groups of 8 rows in this form, then its last rows % 8 rows as in the file. */
#include <stddef.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "../../scalar/quants_k.h"
#include "x8_common.h"

#define KX8_AHEAD 4096 /* prefetch distance in a repacked matrix, bytes */
/* activation rows per pass of Q4_K and Q6_K (KX8_BY_C spells out 1..8): 8 against X8_VG's 4, 1 thread, 2048 x 2048,
 * 64 rows: Q4_K 204 vs 196 GOPS, Q6_K 134 vs 126. Q5_K (its int32 halves: 16 accumulators) and IQ4_XS keep X8_VG. */
#define KX8_VG 8

/* PASS(c) with the run-time count C (1..KX8_VG) of a pass's activation rows as the constant c */
#define KX8_BY_C(C, PASS)                                                                                      \
    switch (C) {                                                                                               \
    case 8: PASS(8); break;                                                                                    \
    case 7: PASS(7); break;                                                                                    \
    case 6: PASS(6); break;                                                                                    \
    case 5: PASS(5); break;                                                                                    \
    case 4: PASS(4); break;                                                                                    \
    case 3: PASS(3); break;                                                                                    \
    case 2: PASS(2); break;                                                                                    \
    default: PASS(1); break;                                                                                   \
    }

enum { KX8_Q4_K, KX8_Q5_K, KX8_Q6_K, KX8_IQ4_XS };
enum { KX8_Q4_K_QS = 128, KX8_Q5_K_QH = 128 + 1024, KX8_Q6_K_SC = 16, KX8_Q6_K_Q = 144 };

static inline size_t kx8_file_bytes(int kind) {
    return kind == KX8_Q4_K ? sizeof(block_q4_K) : kind == KX8_Q5_K ? sizeof(block_q5_K)
         : kind == KX8_Q6_K ? sizeof(block_q6_K) : sizeof(block_iq4_xs);
}
static inline size_t kx8_sb_bytes(int kind) { return X8 * kx8_file_bytes(kind); }

static inline void kx8_st(uint8_t *p, __m256i v) { _mm256_storeu_si256((__m256i *)(void *)p, v); }

/* the fp16 at byte `off` of each of up to 8 rows (missing rows zero) to dst */
static inline void kx8_halves(const char *b, size_t w_row, int nrows, size_t off, uint8_t *dst) {
    uint16_t h[X8] = {0};
    for (int l = 0; l < nrows; l++) memcpy(&h[l], b + (size_t)l * w_row + off, 2);
    memcpy(dst, h, sizeof(h));
}

/* the 256 6-bit values of a Q6_K block, one a byte (ql's nibble | qh's two bits << 4) */
static inline void kx8_q6_K_values(const block_q6_K *x, uint8_t *q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {   /* values 128h + 32p + 0..31 */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(x->qh + 32 * h));
        for (int p = 0; p < 4; p++) {
            const __m256i ql = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h + 32 * (p % 2)));
            const __m256i lo = p / 2 ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4) : _mm256_and_si256(ql, m4);
            const __m256i hi = 2 * p >= 4 ? _mm256_srli_epi16(qh, 2 * p - 4) : _mm256_slli_epi16(qh, 4 - 2 * p);
            _mm256_storeu_si256((__m256i *)(void *)(q + 128 * h + 32 * p), _mm256_or_si256(lo, _mm256_and_si256(hi, m30)));
        }
    }
}

/* super-block i of up to 8 file rows (w_row bytes apart; missing rows zero) in the x8 form at g */
static void kx8_build_sb(int kind, const char *w, size_t w_row, int nrows, int i, uint8_t *g) {
    const char *b = w + (size_t)i * kx8_file_bytes(kind);
    __m256i T[4];
    if (kind == KX8_Q4_K) {
        kx8_halves(b, w_row, nrows, offsetof(block_q4_K, d), g);
        kx8_halves(b, w_row, nrows, offsetof(block_q4_K, dmin), g + 16);
        x8_rows_dwords(b + offsetof(block_q4_K, scales), w_row, nrows, T);   /* scales' 3 dwords, then qs' first */
        for (int c = 0; c < 3; c++) kx8_st(g + 32 + 32 * c, T[c]);
        for (int z = 0; z < 32; z += 4) {
            x8_rows_dwords(b + offsetof(block_q4_K, qs) + 4 * z, w_row, nrows, T);
            for (int c = 0; c < 4; c++) kx8_st(g + KX8_Q4_K_QS + 32 * (z + c), T[c]);
        }
    } else if (kind == KX8_Q5_K) {   /* the head as Q4_K's; qh, qs after the scales */
        kx8_halves(b, w_row, nrows, offsetof(block_q5_K, d), g);
        kx8_halves(b, w_row, nrows, offsetof(block_q5_K, dmin), g + 16);
        x8_rows_dwords(b + offsetof(block_q5_K, scales), w_row, nrows, T);
        for (int c = 0; c < 3; c++) kx8_st(g + 32 + 32 * c, T[c]);
        for (int z = 0; z < 8; z += 4) {
            x8_rows_dwords(b + offsetof(block_q5_K, qh) + 4 * z, w_row, nrows, T);
            for (int c = 0; c < 4; c++) kx8_st(g + KX8_Q5_K_QH + 32 * (z + c), T[c]);
        }
        for (int z = 0; z < 32; z += 4) {
            x8_rows_dwords(b + offsetof(block_q5_K, qs) + 4 * z, w_row, nrows, T);
            for (int c = 0; c < 4; c++) kx8_st(g + KX8_Q4_K_QS + 32 * (z + c), T[c]);
        }
    } else if (kind == KX8_IQ4_XS) {
        kx8_halves(b, w_row, nrows, offsetof(block_iq4_xs, d), g);
        kx8_halves(b, w_row, nrows, offsetof(block_iq4_xs, scales_h), g + 16);
        x8_rows_dwords(b + offsetof(block_iq4_xs, scales_l), w_row, nrows, T);
        kx8_st(g + 32, T[0]);
        for (int z = 0; z < 32; z += 4) {
            x8_rows_dwords(b + offsetof(block_iq4_xs, qs) + 4 * z, w_row, nrows, T);
            for (int c = 0; c < 4; c++) kx8_st(g + 64 + 32 * (z + c), T[c]);
        }
    } else {
        kx8_halves(b, w_row, nrows, offsetof(block_q6_K, d), g);
        x8_rows_dwords(b + offsetof(block_q6_K, scales), w_row, nrows, T);
        for (int c = 0; c < 4; c++) kx8_st(g + KX8_Q6_K_SC + 32 * c, T[c]);
        uint8_t q[X8][QK_K];   /* each row's 6-bit values, one a byte */
        for (int l = 0; l < nrows; l++) kx8_q6_K_values((const block_q6_K *)(const void *)(b + (size_t)l * w_row), q[l]);
        for (int sb = 0; sb < 16; sb++) {
            x8_rows_dwords((const char *)&q[0][16 * sb], QK_K, nrows, T);
            for (int c = 0; c < 3; c++)
                kx8_st(g + KX8_Q6_K_Q + 96 * sb + 32 * c,
                       _mm256_or_si256(T[c], _mm256_and_si256(_mm256_slli_epi16(T[3], 6 - 2 * c), _mm256_set1_epi8((char)0xC0))));
        }
    }
}

static void kx8_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    for (int i = 0; i < nb; i++) kx8_build_sb(kind, w, w_row, nrows, i, dst + (size_t)i * kx8_sb_bytes(kind));
}

/* per activation super-block: its scale; Q4_K: pairs of 32-value sums as int16 words, v[0] = (bsum_0, bsum_2),
 * v[1] = (bsum_1, bsum_3), v[2] = (bsum_4, bsum_6), v[3] = (bsum_5, bsum_7); Q6_K: where each 16-value
 * sub-block's int32 sum starts, -32 bsums[g] (q is stored + 32) */
typedef struct {
    float d;
    int32_t v[16];
    int32_t pad[3];
} kx8_act;

static void kx8_prepare(int kind, int nb, const char *y, size_t y_row, int nc, void *vA) {
    kx8_act *A = (kx8_act *)vA;
    for (int j = 0; j < nc; j++)
        for (int i = 0; i < nb; i++) {
            const block_q8_K *yb = (const block_q8_K *)(const void *)(y + (size_t)j * y_row) + i;
            kx8_act *a = &A[(size_t)j * nb + i];
            a->d = yb->d;
            if (kind == KX8_IQ4_XS) continue;
            if (kind == KX8_Q6_K) {
                for (int g = 0; g < 16; g++) a->v[g] = -32 * yb->bsums[g];
                continue;
            }
            int bs[8];
            for (int s = 0; s < 8; s++) bs[s] = yb->bsums[2 * s] + yb->bsums[2 * s + 1];
            for (int k = 0; k < 4; k++) {
                const int lo = bs[4 * (k / 2) + k % 2], hi = bs[4 * (k / 2) + k % 2 + 2];
                a->v[k] = (int32_t)(((uint32_t)(uint16_t)lo) | ((uint32_t)(uint16_t)hi << 16));
            }
        }
}

/* byte b of every dword, zero-extended; signed */
static inline __m256i kx8_byte(__m256i v, int b) {
    return b == 3 ? _mm256_srli_epi32(v, 24) : _mm256_and_si256(_mm256_srli_epi32(v, 8 * b), _mm256_set1_epi32(0xFF));
}
static inline __m256i kx8_sbyte(__m256i v, int b) {
    return _mm256_srai_epi32(b == 3 ? v : _mm256_slli_epi32(v, 24 - 8 * b), 24);
}

/* step `part` of `parts` over the super-block of `bytes` at g of a repacked matrix: its share of the lines on */
static inline void kx8_ahead(const uint8_t *g, size_t bytes, int part, int parts) {
    const size_t lines = (bytes + 63) / 64;
    for (size_t l = lines * (size_t)part / (size_t)parts; l < lines * (size_t)(part + 1) / (size_t)parts; l++)
        __builtin_prefetch(g + KX8_AHEAD + 64 * l, 0, 3);
}

/* v as it stands here, in a register: without this GCC's reassociation gathers the terms of an int16 sum at its
 * end, every maddubs product live at once (spilled to the stack: a third of the Q4_K pass's instructions) */
#define KX8_KEEP(v) __asm__("" : "+x"(v))
#define KX8_ADD16(acc, p) __asm__("vpaddw %1, %0, %0" : "+x"(acc) : "x"(p))

/* acc[j] (lane l: row l) over all nb super-blocks of one group against activation rows 0..C-1 */
OXL_INLINE void kx8_group_k4(const int kind, const int C, int nb, const uint8_t *g0, const char *y, size_t y_row, const kx8_act *A,
                               int ahead, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    const __m256i mpair = _mm256_set1_epi32(0x00FF00FF), ones = _mm256_set1_epi16(1), m10 = _mm256_set1_epi8(0x10);
    const __m256i mbyte = _mm256_set1_epi32(0xFF);
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *g = g0 + (size_t)i * kx8_sb_bytes(kind);
        const uint8_t *q = g + KX8_Q4_K_QS;
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)g));
        const __m256 mv = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(g + 16))));
        const __m256i s0 = _mm256_loadu_si256((const __m256i *)(const void *)(g + 32));
        const __m256i s1 = _mm256_loadu_si256((const __m256i *)(const void *)(g + 64));
        const __m256i s2 = _mm256_loadu_si256((const __m256i *)(const void *)(g + 96));
        /* bytes k of: sc_k, m_k (k = 0..3); sc_4+k, m_4+k (oxl_unpack_scales_k4) */
        const __m256i sc_lo = _mm256_and_si256(s0, m6), m_lo = _mm256_and_si256(s1, m6);
        const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30));
        const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi32(s1, 2), m30));
        /* d sc_s of every row, for the sub-blocks s = 0..7 */
        __m256 ds[8];
        for (int s = 0; s < 8; s++)
            ds[s] = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(s < 4 ? sc_lo : sc_hi, 8 * (s % 4)), mbyte)));
        /* int16 words (m_0, m_2), (m_1, m_3), (m_4, m_6), (m_5, m_7) */
        const __m256i mp[4] = {_mm256_and_si256(m_lo, mpair), _mm256_and_si256(_mm256_srli_epi32(m_lo, 8), mpair),
                               _mm256_and_si256(m_hi, mpair), _mm256_and_si256(_mm256_srli_epi32(m_hi, 8), mpair)};
        __m256 t[KX8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) {
            const kx8_act *a = &A[(size_t)j * nb + i];
            __m256i ms = _mm256_madd_epi16(mp[0], _mm256_set1_epi32(a->v[0]));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[1], _mm256_set1_epi32(a->v[1])));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[2], _mm256_set1_epi32(a->v[2])));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[3], _mm256_set1_epi32(a->v[3])));
            t[j] = _mm256_mul_ps(mv, _mm256_cvtepi32_ps(ms));
        }
        const int8_t *yq[KX8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) yq[j] = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[i].qs;
        /* sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles) of chunks 8c .. 8c + 7 */
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            if (ahead) kx8_ahead(g, kx8_sb_bytes(kind), c, 4);
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                __m256i s16[KX8_VG], s32[KX8_VG];
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * (8 * c + k)));
                    __m256i x = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, m4);
                    if (kind == KX8_Q5_K) {   /* the fifth bit of sub-block s's values: bit s of qh, to bit 4 */
                        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(g + KX8_Q5_K_QH + 32 * k));
                        const __m256i b = s <= 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
                        x = _mm256_or_si256(x, _mm256_and_si256(b, m10));
                    }
                    X8_UNROLL for (int j = 0; j < C; j++) {
                        const __m256i p = _mm256_maddubs_epi16(x, x8_bcast4(yq[j] + 32 * s + 4 * k));
                        if (k % 4 == 0 && (kind == KX8_Q5_K || k == 0)) s16[j] = p;
                        else KX8_ADD16(s16[j], p);
                    }
                    if (kind == KX8_Q5_K && k == 3)   /* four 5-bit maddubs fill int16: to int32 */
                        X8_UNROLL for (int j = 0; j < C; j++) s32[j] = _mm256_madd_epi16(s16[j], ones);
                }
                X8_UNROLL for (int j = 0; j < C; j++) {
                    __m256i is = _mm256_madd_epi16(s16[j], ones);
                    if (kind == KX8_Q5_K) is = _mm256_add_epi32(s32[j], is);
                    t[j] = _mm256_fmadd_ps(ds[s], _mm256_cvtepi32_ps(is), t[j]);
                }
            }
        }
        X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(A[(size_t)j * nb + i].d), t[j], acc[j]);
    }
}

OXL_INLINE void kx8_group_q6_K(const int C, int nb, const uint8_t *g0, const char *y, size_t y_row, const kx8_act *A,
                               int ahead, __m256 *acc) {
    const __m256i m3f = _mm256_set1_epi8(0x3F), ones = _mm256_set1_epi16(1);
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *g = g0 + (size_t)i * kx8_sb_bytes(KX8_Q6_K);
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)g));
        /* d sc_g of every row, for the sub-blocks g = 0..15 */
        __m256 ds[16];
        for (int k = 0; k < 4; k++) {
            const __m256i sc = _mm256_loadu_si256((const __m256i *)(const void *)(g + KX8_Q6_K_SC + 32 * k));
            for (int b = 0; b < 4; b++) ds[4 * k + b] = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(kx8_sbyte(sc, b)));
        }
        const int8_t *yq[KX8_VG];
        __m256 t[KX8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) {
            yq[j] = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[i].qs;
            t[j] = _mm256_setzero_ps();
        }
        _Pragma("GCC unroll 2") for (int sb = 0; sb < 16; sb++) {
            if (ahead && sb % 2 == 0) kx8_ahead(g, kx8_sb_bytes(KX8_Q6_K), sb / 2, 8);
            /* x[k]: values 16 sb + 4k .. + 3 of every row; the fourth from the three chunks' top bits */
            const uint8_t *qc = g + KX8_Q6_K_Q + 96 * sb;
            __m256i x[4], top[3];
            for (int c = 0; c < 3; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qc + 32 * c));
                x[c] = _mm256_and_si256(v, m3f);
                top[c] = _mm256_srli_epi16(_mm256_andnot_si256(m3f, v), 6 - 2 * c);
            }
            x[3] = _mm256_or_si256(_mm256_or_si256(top[0], top[1]), top[2]);
            X8_UNROLL for (int j = 0; j < C; j++) {
                const int8_t *yb = yq[j] + 16 * sb;
                __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(x[0], x8_bcast4(yb)),
                                               _mm256_maddubs_epi16(x[1], x8_bcast4(yb + 4)));
                KX8_KEEP(p01);
                __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(x[2], x8_bcast4(yb + 8)),
                                               _mm256_maddubs_epi16(x[3], x8_bcast4(yb + 12)));
                KX8_KEEP(p23);
                __m256i is = _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
                is = _mm256_add_epi32(is, _mm256_set1_epi32(A[(size_t)j * nb + i].v[sb]));
                t[j] = _mm256_fmadd_ps(ds[sb], _mm256_cvtepi32_ps(is), t[j]);
            }
        }
        X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(A[(size_t)j * nb + i].d), t[j], acc[j]);
    }
}

OXL_INLINE void kx8_group_iq4_xs(const int C, int nb, const uint8_t *g0, const char *y, size_t y_row, const kx8_act *A,
                                 int ahead, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    X8_UNROLL for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *g = g0 + (size_t)i * kx8_sb_bytes(KX8_IQ4_XS);
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)g));
        const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(g + 16)));
        const __m256i sl = _mm256_loadu_si256((const __m256i *)(const void *)(g + 32));
        const int8_t *yq[X8_VG];
        __m256i isum[X8_VG];
        X8_UNROLL for (int j = 0; j < C; j++) {
            yq[j] = ((const block_q8_K *)(const void *)(y + (size_t)j * y_row))[i].qs;
            isum[j] = _mm256_setzero_si256();
        }
        for (int ib = 0; ib < 8; ib++) {
            if (ahead) kx8_ahead(g, kx8_sb_bytes(KX8_IQ4_XS), ib, 8);
            /* ls - 32 of every row, in both int16 halves of its lane */
            const __m256i ls = _mm256_sub_epi32(
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * ib), _mm256_set1_epi32(0xF)),
                                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * ib), _mm256_set1_epi32(3)), 4)),
                _mm256_set1_epi32(32));
            const __m256i sc = _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls, 16));
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(g + 64 + 32 * (4 * ib + k)));
                const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
                X8_UNROLL for (int j = 0; j < C; j++) {
                    const int8_t *yb = yq[j] + 32 * ib + 4 * k;
                    const __m256i plo = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(x8_bcast4(yb), lo));
                    const __m256i phi = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(x8_bcast4(yb + 16), hi));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(plo, sc), _mm256_madd_epi16(phi, sc)));
                }
            }
        }
        X8_UNROLL for (int j = 0; j < C; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(A[(size_t)j * nb + i].d)), _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
}

OXL_INLINE void kx8_pass(int kind, const int C, int nb, const uint8_t *g, const char *y, size_t y_row, const void *A,
                         int ahead, float *S, int64_t lds, int nrows) {
    __m256 acc[KX8_VG];
    if (kind == KX8_IQ4_XS) kx8_group_iq4_xs(C, nb, g, y, y_row, (const kx8_act *)A, ahead, acc);
    else if (kind == KX8_Q6_K) kx8_group_q6_K(C, nb, g, y, y_row, (const kx8_act *)A, ahead, acc);
    else kx8_group_k4(kind, C, nb, g, y, y_row, (const kx8_act *)A, ahead, acc);
    x8_store(C, acc, S, lds, nrows);
}
/* a type's pass with the run-time count C of activation rows a constant (BY_C: X8_BY_C or KX8_BY_C) */
#define KX8_PASS_OF(C_) kx8_pass(KIND_, C_, nb, g, y, y_row, A, ahead, S, lds, nrows)
#define KX8_PASS_FN(name, KIND, BY_C)                                                                          \
    static void kx8_pass_##name(int kind, int C, int nb, const uint8_t *g, const char *y, size_t y_row,       \
                                const void *A, int ahead, float *S, int64_t lds, int nrows) {                 \
        enum { KIND_ = KIND };                                                                                 \
        (void)kind;                                                                                            \
        BY_C(C, KX8_PASS_OF)                                                                                   \
    }
KX8_PASS_FN(q4_K, KX8_Q4_K, KX8_BY_C)
KX8_PASS_FN(q5_K, KX8_Q5_K, X8_BY_C)
KX8_PASS_FN(q6_K, KX8_Q6_K, KX8_BY_C)
KX8_PASS_FN(iq4_xs, KX8_IQ4_XS, X8_BY_C)

OXL_INLINE int kx8_gemm(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                        const char *y, size_t y_row, int nc) {
    const int nb = n / QK_K;
    const x8_family f = {kind, nb, (size_t)nb * sizeof(kx8_act), (size_t)nb * kx8_sb_bytes(kind), KX8_AHEAD,
                         kx8_prepare, kx8_build,
                         kind == KX8_Q4_K ? kx8_pass_q4_K : kind == KX8_Q5_K ? kx8_pass_q5_K
                         : kind == KX8_Q6_K ? kx8_pass_q6_K : kx8_pass_iq4_xs};
    const int vg = kind == KX8_Q4_K || kind == KX8_Q6_K ? KX8_VG : X8_VG;
    return rows_gemm(&f, X8, vg, packed, S, lds, w, w_row, nr, y, y_row, nc);
}

/* the 8 lanes' sums of v[0..7] (exact int32), as floats in order */
static inline __m256 kx8_hsum_i32_8x8_ps(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31)));
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void vec_dot_k4(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / QK_K;
    const size_t bx = kx8_file_bytes(kind);
    const block_q8_K *y = (const block_q8_K *)vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
    float acc = 0.0f;
    for (int i = 0; i < nb; i++) {
        /* d, dmin and scales lie alike in both block types */
        const block_q4_K *xi = (const block_q4_K *)(const void *)((const char *)vx + (size_t)i * bx);
        const uint8_t *qs = kind == KX8_Q5_K ? ((const block_q5_K *)(const void *)xi)->qs : xi->qs;
        const __m256i qh = kind == KX8_Q5_K ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)(const void *)xi)->qh)
                                            : _mm256_setzero_si256();
        uint8_t u[16];
        oxl_unpack_scales_k4(xi->scales, u);
        int32_t msum = 0;
        for (int j = 0; j < 8; j++) msum += u[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        __m256i v[8];
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (kind == KX8_Q5_K) {   /* bits 2c and 2c + 1 of qh, to bit 4 */
                lo = _mm256_or_si256(lo, _mm256_and_si256(c <= 2 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4), m10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(c <= 1 ? _mm256_slli_epi16(qh, 3 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 3), m10));
            }
            v[2 * c] = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c))), ones);
            v[2 * c + 1] = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32))), ones);
        }
        float isum[8], ds[8];
        _mm256_storeu_ps(isum, kx8_hsum_i32_8x8_ps(v));
        uint64_t sc8;
        memcpy(&sc8, u, 8);
        _mm256_storeu_ps(ds, _mm256_mul_ps(_mm256_set1_ps(fp16(xi->d)),
                                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)))));
        float t = -fp16(xi->dmin) * (float)msum;
        for (int j = 0; j < 8; j++) t = fmaf(ds[j], isum[j], t);
        acc = fmaf(y[i].d, t, acc);
    }
    *s = acc;
}
static void vec_dot_q4_K_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    vec_dot_k4(KX8_Q4_K, n, s, vx, vy);
}
static void vec_dot_q5_K_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    vec_dot_k4(KX8_Q5_K, n, s, vx, vy);
}

static void vec_dot_q6_K_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const int nb = n / QK_K;
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), ones = _mm256_set1_epi16(1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    float acc = 0.0f;
    for (int i = 0; i < nb; i++) {
        float isum[16], ds[16];
        const float d = fp16(x[i].d);
        for (int h = 0; h < 2; h++) {
            /* values 128h + 32p + 0..31: lanes 0-3 sub-block 8h + 2p, lanes 4-7 8h + 2p + 1 */
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i v[4];
            for (int p = 0; p < 4; p++) {
                const __m256i ql = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32 * (p % 2)));
                const __m256i lo = p / 2 ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4) : _mm256_and_si256(ql, m4);
                const __m256i hi = 2 * p >= 4 ? _mm256_srli_epi16(qh, 2 * p - 4) : _mm256_slli_epi16(qh, 4 - 2 * p);
                v[p] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_or_si256(lo, _mm256_and_si256(hi, m30)),
                                                              _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p))),
                                         ones);
            }
            __m256i r = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            r = _mm256_permutevar8x32_epi32(r, order);
            const __m256i bs = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(y[i].bsums + 8 * h)));
            _mm256_storeu_ps(isum + 8 * h, _mm256_cvtepi32_ps(_mm256_sub_epi32(r, _mm256_slli_epi32(bs, 5))));
            _mm256_storeu_ps(ds + 8 * h, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                           _mm_loadl_epi64((const __m128i *)(x[i].scales + 8 * h))))));
        }
        float t = 0.0f;
        for (int g = 0; g < 16; g++) t = fmaf(ds[g], isum[g], t);
        acc = fmaf(y[i].d, t, acc);
    }
    *s = acc;
}

static void vec_dot_iq4_xs_x8(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const int nb = n / QK_K;
    const block_iq4_xs *x = (const block_iq4_xs *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    float acc = 0.0f;
    for (int i = 0; i < nb; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x[i].scales_h >> 2 * ib) & 3) << 4)) - 32;
            /* values 0..15 then 16..31 of the sub-block */
            const __m256i v = _mm256_shuffle_epi8(lut, nibbles_32(x[i].qs + 16 * ib));
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v),
                                                   _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib)), v));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        acc = fmaf(fp16(x[i].d) * y[i].d, (float)hsum_i32_8(sumi), acc);
    }
    *s = acc;
}

static void kx8_vec_dot(int kind, int n, float *s, const void *x, const void *y) {
    if (kind == KX8_IQ4_XS) vec_dot_iq4_xs_x8(n, s, x, y);
    else if (kind == KX8_Q6_K) vec_dot_q6_K_x8(n, s, x, y);
    else vec_dot_k4(kind, n, s, x, y);
}

/* per type: the file-layout product (without memory for the per-thread buffer, one output at a time by the
 * vec_dot: the same floats), the repacked product (rows from a group start; -1: no memory, the caller reads the
 * file rows), the repacked row size (the file's) and the repack (whole groups of 8 rows built, the last rows % 8
 * copied; x8_common.h's) */
#define KX8_ENTRY_POINTS(name, KIND)                                                                          \
    static void gemm_##name##_file_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,  \
                                      size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        x8_gemm_file(kx8_gemm, kx8_vec_dot, KIND, n, S, lds, w, w_row, nr, y, y_row, nc);                      \
    }                                                                                                          \
    static int gemm_##name##_x8(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w,        \
                                size_t w_row, int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {     \
        return kx8_gemm(KIND, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);          \
    }                                                                                                          \
    static int64_t name##_x8_row_size(int64_t cols) {                                                          \
        return cols > 0 && cols % QK_K == 0 ? cols / QK_K * (int64_t)kx8_file_bytes(KIND) : -1;               \
    }                                                                                                          \
    static void repack_##name##_x8(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows,         \
                                   int64_t cols) {                                                             \
        x8_repack(kx8_build, KIND, (int)(cols / QK_K), (size_t)(cols / QK_K) * kx8_file_bytes(KIND), w, dst,  \
                  rows);                                                                                       \
    }
KX8_ENTRY_POINTS(q4_K, KX8_Q4_K)
KX8_ENTRY_POINTS(q5_K, KX8_Q5_K)
KX8_ENTRY_POINTS(q6_K, KX8_Q6_K)
KX8_ENTRY_POINTS(iq4_xs, KX8_IQ4_XS)

/* Q4_K, Q5_K and Q6_K of this tier: vec_dot, the file-layout products and the repacked layouts, in the orders above */
void oxl_register_avx2_kx8(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_K].vec_dot = vec_dot_q4_K_x8;
    t->type[OXL_TYPE_Q4_K].gemm = gemm_q4_K_file_x8;
    t->type[OXL_TYPE_Q4_K].gemm_one_row = 1;   /* one file row: the group built per call 40-44 GOPS, vec_dot 33 */
    t->type[OXL_TYPE_Q4_K].repacked = (oxl_repacked_layout){"q4_K_x8", q4_K_x8_row_size, repack_q4_K_x8, gemm_q4_K_x8};
    t->type[OXL_TYPE_Q5_K].vec_dot = vec_dot_q5_K_x8;
    t->type[OXL_TYPE_Q5_K].gemm = gemm_q5_K_file_x8;
    t->type[OXL_TYPE_Q5_K].gemm_one_row = 0;   /* one file row of Q5_K / Q6_K: vec_dot (building their groups per
                                                  call cost more: 2048 x 2048 in cache, Q5_K 26 vs 31 GOPS, Q6_K 24.5 vs 30) */
    t->type[OXL_TYPE_Q5_K].repacked = (oxl_repacked_layout){"q5_K_x8", q5_K_x8_row_size, repack_q5_K_x8, gemm_q5_K_x8};
    t->type[OXL_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_x8;
    t->type[OXL_TYPE_IQ4_XS].gemm = gemm_iq4_xs_file_x8;
    t->type[OXL_TYPE_IQ4_XS].gemm_one_row = 0;
    t->type[OXL_TYPE_IQ4_XS].repacked = (oxl_repacked_layout){"iq4_xs_x8", iq4_xs_x8_row_size, repack_iq4_xs_x8, gemm_iq4_xs_x8};
    t->type[OXL_TYPE_Q6_K].vec_dot = vec_dot_q6_K_x8;
    t->type[OXL_TYPE_Q6_K].gemm = gemm_q6_K_file_x8;
    t->type[OXL_TYPE_Q6_K].gemm_one_row = 0;
    t->type[OXL_TYPE_Q6_K].repacked = (oxl_repacked_layout){"q6_K_x8", q6_K_x8_row_size, repack_q6_K_x8, gemm_q6_K_x8};
}
