/* The K-quants Q4_K, Q5_K and Q6_K on the AVX-512 VNNI tier: sixteen weight rows side by side, one int32 lane
 * per row, as Q4_0 and Q8_0 (quants_x16_vnni.c).
 *
 * Q4_K: value = d sc_j q - dmin m_j, q unsigned 4-bit, sub-blocks j = 0..7 of 32 values, sc_j and m_j 6-bit;
 * Q5_K the same with q 5-bit (the fifth bits in qh). Activations Q8_K (float dy, int8 values, bsums of 16).
 * The order, the same in every call shape of this tier (vec_dot, the one-row decode, the multi-row, batched
 * and verify products, the repacked prefill tiles), for each output:
 *
 *     out = +0;  for each super-block in order:
 *         t = (-dmin) * (float)msum                      msum = sum_j m_j bsum_j, exact int32 (< 2^22)
 *         for j = 0..7:  t = fma(d * sc_j, (float)isum_j, t)
 *         out = fma(dy, t, out)
 *
 * isum_j the exact int32 dot of sub-block j's 32 unsigned q and activation values (< 2^17), bsum_j the sum of
 * its 32 activation values, d * sc_j exact as a float (an fp16 times a 6-bit integer), every multiply and fma
 * rounded once. The mins go first, so t needs no zero start; dy comes in once per super-block, so a sub-block
 * costs one convert and one fma per sixteen rows. A register of sixteen rows computes sixteen such serial
 * sums: per sub-block and activation row eight vpdpbusd (4 values x 16 rows, the weight the unsigned operand,
 * four broadcast activation bytes the signed one), a convert and an fma; per super-block four vpdpwssd for
 * msum (pairs of mins against pairs of bsum_j), a convert, a multiply and the fma by dy.
 *
 * Q6_K: value = d sc_g (q - 32), q unsigned 6-bit, sixteen sub-blocks g of 16 values, sc_g int8:
 *
 *     out = +0;  for each super-block in order:
 *         t = +0;  for g = 0..15:  t = fma(d * sc_g, (float)isum_g, t);   out = fma(dy, t, out)
 *
 * isum_g = sum q y - 32 bsums[g] (exact, |isum_g| <= 2^16), d * sc_g exact (an fp16 times an 8-bit integer):
 * four vpdpbusd, a convert and an fma per sub-block and activation row, the int32 sums starting at -32 bsums[g].
 *
 * Layouts (the repacked copy, or built per call from file rows into a per-thread buffer): a group of 16 rows,
 * nb super-blocks of 16 x the file's block bytes each (the file's bytes of those rows), super-block after
 * super-block. q4_K_x16 and q5_K_x16:
 *     0    d of rows 0..15 (fp16)                    32   dmin of rows 0..15
 *     64   P0 (a dword a row, row l at 4l): byte k = sc_k | (sc_(4+k) >> 4) << 6
 *     128  P1: bytes [m0, m2, m1, m3], byte k's bits 6-7 the bits 4-5 of m_(4 + its m's index)
 *     192  P2: byte k = (sc_(4+k) & 15) | (m_(4+i) & 15) << 4, i the index of P1's byte k
 *     256  quants: chunk (c, k) (c = 0..3, k = 0..7) at 64 (8c + k) holds row l's qs[32c + 4k .. +3] at 4l:
 *          low nibbles values 32 (2c) + 4k .., sub-block 2c; high nibbles sub-block 2c + 1
 *     2304 (q5_K) qh: chunk k (0..7) at 64k holds row l's qh[4k .. +3] at 4l: bit j the fifth bit of sub-block j
 * (P1's order makes the pairs of mins two masks: (m0 | m1 << 16) = P1 & 0x003F003F, (m2 | m3 << 16) its >> 8.)
 * q6_K_x16: 0 d of rows 0..15; 32 scales: chunk k (0..3) at 64k holds row l's scales[4k .. +3] at 4l;
 *     288 ql: chunk z (0..31) holds row l's ql[4z .. +3] at 4l; 2336 qh: chunk z (0..15) row l's qh[4z .. +3].
 * A repacked matrix is its whole groups of 16 rows in this form, then its last rows % 16 rows as in the file:
 * the file's size, and a product's row range starts at a multiple of 16 (forward.c aligns them).
 *
 * Kernel alone (Xeon, 1 thread, CPU time, 2048 x 2048 in cache, medians of alternating child processes
 * against the previous build, 2026-11-26, a loaded machine): Q4_K 64 activation rows 166 -> 363 GOPS
 * (repacked), 8 rows 113 -> 342, 1 row 57 -> 82-91; Q6_K 170 -> 266, 117 -> 239, 49 -> 54; Q5_K 128 -> 273, 102 -> 286, 46 -> 67.
 * Passes of 16 activation rows (the sums t of 16 rows in registers, the per-row totals in a buffer), one dpbusd
 * chain a sub-block (no add of two), the activations copied per call into blocks of 16 rows read from one pointer,
 * the weight loads kept from merging across steps (GCC spilled t): repacked, 64 rows Q4_K 322 -> 382 GOPS, Q5_K
 * 267 -> 372, Q6_K 224 -> 319; 16 rows 318 -> 369, 261 -> 361, 218 -> 300; 1 row 93 -> 108, 62 -> 81, 54 -> 58
 * (the same machine and method, 2026-11-26). Per super-block and activation row a pass now issues ~96 (Q4_K) and
 * ~114 (Q6_K) vector uops, most of them the 64 vpdpbusd and, for Q6_K, its 16 sub-blocks' convert and fma.
 * Four rows' chains interleaved (kx_sub) on top: 64 rows Q4_K 1.08x, Q5_K 1.01x, Q6_K 1.03x; 16 rows 1.12x, 1.04x,
 * 1.04x (quieter machine: Q4_K 461, Q5_K 396, Q6_K 378 GOPS at 64 rows).
 * File rows (--no-repack, MoE experts, tied outputs) take the same kernel, each super-block of 16 rows put in the
 * x16 form just before it is used (kx_build_sb: 16 x 16 dword transposes, in L1) while the next 16 rows stream
 * into L2; against row by row through vec_dot (the same machine, 1 thread, 2048 x 2048 in cache): Q4_K 1
 * activation row 42 -> 64 GOPS, 8 rows 153 -> 269; Q5_K 40 -> 43, 118 -> 196; Q6_K 37 -> 35, 94 -> 156. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../quants_legacy_x86.h"
#include "../../scalar/quants_k.h"
#include "x16_common.h"

#define KX X16        /* rows per group */
#define KX_VG 16      /* activation rows per pass over a group (the remainder in passes of up to X16_VG) */
/* A repacked matrix streams group after group; each of a super-block's `parts` steps asks for its share of the
 * lines KX_AHEAD_L2 bytes on into L2 (T1) and KX_AHEAD_L1 bytes on into L1 (T0). With T0 alone at 4096, as
 * before, one row streamed from DRAM at 60-80% of a plain read's rate on this Xeon: a T0 prefetch holds one of
 * the core's few L1 fill buffers until its line comes from DRAM, an L2 one does not; the near T0 then takes
 * lines from L2. Q4_K one row (1 thread, CPU time, variants interleaved in one process, 2026-11-26): the 1.7B
 * Q4_K_M file's Q4_K matrices cycled (DRAM) 1.36x (T1 alone 1.29x), 2048 x 2048 in cache 0.96x (T1 alone
 * 0.90x), 8 rows in cache 1.06x. */
#define KX_AHEAD_L2 8192
#define KX_AHEAD_L1 2048


enum { KX_Q4_K, KX_Q5_K, KX_Q6_K };

/* bytes of one super-block of a row in the file; of a group (16 rows: the same bytes, interleaved) */
static inline size_t kx_file_bytes(int kind) {
    return kind == KX_Q4_K ? sizeof(block_q4_K) : kind == KX_Q5_K ? sizeof(block_q5_K) : sizeof(block_q6_K);
}
static inline size_t kx_sb_bytes(int kind) { return KX * kx_file_bytes(kind); }
enum { KX_Q4_K_META = 256, KX_Q5_K_QH = 256 + 2048, KX_Q6_K_QL = 288, KX_Q6_K_QH = 288 + 2048 };

/* ---- the x16 form built from file rows, one super-block of up to 16 rows at a time (missing rows zero) ----
 * The x16 form is a transpose: chunk z of a super-block holds dword z of every row's block. Loading 64 bytes
 * of each of 16 rows and transposing 16 x 16 dwords (4 rounds of 16 shuffles) gives 16 chunks; the scales'
 * dwords only need a byte shuffle more (P1 and P2 keep the mins in the order 0, 2, 1, 3). */

/* dwords z = 0..15 of the 64 bytes at each row's p[l] (missing rows l >= nrows zero) as out[z], lane l row l */
static inline void kx_tr16(const char *p, size_t w_row, int nrows, __m512i out[16]) {
    __m512i r[16], a[16];
    for (int l = 0; l < 16; l++)
        r[l] = l < nrows ? _mm512_loadu_si512((const void *)(p + (size_t)l * w_row)) : _mm512_setzero_si512();
    for (int k = 0; k < 8; k++) {   /* a[2k] lane L: rows 2k, 2k+1 at dwords 4L, 4L+1; a[2k+1] at 4L+2, 4L+3 */
        a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int q = 0; q < 4; q++) {   /* r[4q + e] lane L: rows 4q..4q+3 at dword 4L + e */
        r[4 * q + 0] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
        r[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
        r[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
        r[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
    }
    for (int e = 0; e < 4; e++) {
        /* rows 0..7 (and 8..15) at dwords [e, 8 + e] (0x88) or [4 + e, 12 + e] (0xDD), four rows a lane */
        const __m512i c_lo = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x88), c_hi = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xDD);
        const __m512i e_lo = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x88);
        const __m512i e_hi = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xDD);
        out[e] = _mm512_shuffle_i32x4(c_lo, e_lo, 0x88);
        out[8 + e] = _mm512_shuffle_i32x4(c_lo, e_lo, 0xDD);
        out[4 + e] = _mm512_shuffle_i32x4(c_hi, e_hi, 0x88);
        out[12 + e] = _mm512_shuffle_i32x4(c_hi, e_hi, 0xDD);
    }
}

static inline void kx_st(uint8_t *p, __m512i v) { _mm512_storeu_si512((void *)p, v); }

/* Q4_K and Q5_K's first four dwords (d | dmin, scales[0..3], [4..7], [8..11]) to d, dmin, P0, P1, P2 */
static inline void kx_put_head_k4(const __m512i h[4], uint8_t *g) {
    const __m512i swap12 = _mm512_set4_epi32(0x0F0D0E0C, 0x0B090A08, 0x07050604, 0x03010200);   /* bytes 0 2 1 3 */
    static const int16_t words[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,    /* the d */
                                      1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};  /* the dmin */
    kx_st(g, _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)words), h[0]));   /* d then dmin */
    kx_st(g + 64, h[1]);
    kx_st(g + 128, _mm512_shuffle_epi8(h[2], swap12));
    /* low nibbles (sc_4+k) as they are, high ones (m_4+i) in P1's order */
    kx_st(g + 192, _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), h[3], _mm512_shuffle_epi8(h[3], swap12), 0xCA));
}

/* super-block i of up to 16 file rows (w_row bytes apart) in the x16 form at g */
OXL_INLINE void kx_build_sb(int kind, const char *w, size_t w_row, int nrows, int i, uint8_t *g) {
    const char *b = w + (size_t)i * kx_file_bytes(kind);
    __m512i t[16];
    if (kind == KX_Q4_K) {   /* dwords 0..3 the head, 4..35 qs */
        kx_tr16(b, w_row, nrows, t);
        kx_put_head_k4(t, g);
        for (int z = 4; z < 16; z++) kx_st(g + KX_Q4_K_META + 64 * (z - 4), t[z]);
        kx_tr16(b + 64, w_row, nrows, t);
        for (int z = 0; z < 16; z++) kx_st(g + KX_Q4_K_META + 64 * (z + 12), t[z]);
        x16_rows_dwords(b + 128, w_row, nrows, t);
        for (int z = 0; z < 4; z++) kx_st(g + KX_Q4_K_META + 64 * (z + 28), t[z]);
    } else if (kind == KX_Q5_K) {   /* dwords 0..3 the head, 4..11 qh, 12..43 qs */
        kx_tr16(b, w_row, nrows, t);
        kx_put_head_k4(t, g);
        for (int z = 4; z < 12; z++) kx_st(g + KX_Q5_K_QH + 64 * (z - 4), t[z]);
        for (int z = 12; z < 16; z++) kx_st(g + KX_Q4_K_META + 64 * (z - 12), t[z]);
        kx_tr16(b + 64, w_row, nrows, t);
        for (int z = 0; z < 16; z++) kx_st(g + KX_Q4_K_META + 64 * (z + 4), t[z]);
        kx_tr16(b + 112, w_row, nrows, t);   /* dwords 28..43; 28..31 again */
        for (int z = 4; z < 16; z++) kx_st(g + KX_Q4_K_META + 64 * (z + 16), t[z]);
    } else {   /* Q6_K: ql dwords 0..31, qh 32..47, scales 48..51, d at byte 208 */
        for (int h = 0; h < 3; h++) {
            kx_tr16(b + 64 * h, w_row, nrows, t);
            for (int z = 0; z < 16; z++) kx_st(g + (h < 2 ? KX_Q6_K_QL + 64 * (16 * h + z) : KX_Q6_K_QH + 64 * z), t[z]);
        }
        x16_rows_dwords(b + 192, w_row, nrows, t);
        for (int z = 0; z < 4; z++) kx_st(g + 32 + 64 * z, t[z]);
        uint16_t d[16] = {0};
        for (int l = 0; l < nrows; l++) memcpy(&d[l], b + (size_t)l * w_row + offsetof(block_q6_K, d), 2);
        memcpy(g, d, 32);
    }
}

/* step `part` of `parts` over the super-block of `bytes` at g of a repacked matrix: its share of the lines on */
static inline void kx_ahead(const uint8_t *g, size_t bytes, int part, int parts) {
    const size_t lines = (bytes + 63) / 64;
    for (size_t l = lines * (size_t)part / (size_t)parts; l < lines * (size_t)(part + 1) / (size_t)parts; l++) {
        __builtin_prefetch(g + KX_AHEAD_L2 + 64 * l, 0, 2);
        __builtin_prefetch(g + KX_AHEAD_L1 + 64 * l, 0, 3);
    }
}

/* super-block i's share (pf_step bytes) of a stream of rows to come */
static inline void kx_stream(const char *pf, size_t pf_step, int i) {
    for (size_t k = 0; k < pf_step; k += 64) __builtin_prefetch(pf + (size_t)i * pf_step + k, 0, 2);
}

static void kx_build(int kind, const char *w, size_t w_row, int nrows, int nb, uint8_t *dst) {
    for (int i = 0; i < nb; i++) kx_build_sb(kind, w, w_row, nrows, i, dst + (size_t)i * kx_sb_bytes(kind));
}

/* per activation super-block: its values, its scale; Q4_K: the pairs of 32-value sums (bsum_2k | bsum_2k+1 << 16);
 * Q6_K: where each 16-value sub-block's int32 sum starts, -32 bsums[g] (q is stored + 32). The prepared rows lie
 * in blocks of KX_VG activation rows, super-block i of a block's rows side by side (A[(b nb + i) KX_VG + j % KX_VG]
 * for row j of block b = j / KX_VG): a pass reads all of its rows from one pointer a super-block, each operand at a
 * constant displacement, and its reads are one sequential stream. */
typedef struct {
    int8_t qs[QK_K];
    int32_t v[16];
    float d;
} kx_act;

static void kx_prepare(int kind, int nb, const char *y, size_t y_row, int nc, kx_act *A) {
    for (int j = 0; j < nc; j++)
        for (int i = 0; i < nb; i++) {
            const block_q8_K *yb = (const block_q8_K *)(const void *)(y + (size_t)j * y_row) + i;
            kx_act *a = &A[((size_t)(j / KX_VG) * nb + i) * KX_VG + j % KX_VG];
            a->d = yb->d;
            memcpy(a->qs, yb->qs, QK_K);
            if (kind == KX_Q6_K) {
                for (int g = 0; g < 16; g++) a->v[g] = -32 * yb->bsums[g];
                continue;
            }
            for (int k = 0; k < 4; k++) {
                const int lo = yb->bsums[4 * k] + yb->bsums[4 * k + 1], hi = yb->bsums[4 * k + 2] + yb->bsums[4 * k + 3];
                a->v[k] = (int32_t)(((uint32_t)(uint16_t)lo) | ((uint32_t)(uint16_t)hi << 16));
            }
        }
}

static inline __m512i bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* byte b of every dword, zero-extended */
static inline __m512i byte_of(__m512i v, int b) {
    return b == 3 ? _mm512_srli_epi32(v, 24) : _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF));
}

/* loops unrolled whole (the sums of a pass's rows stay in registers, shift counts are constants); left rolled
 * under the test suite's SIMDe models of AVX-512 (tests/native): the same arithmetic, compiled in minutes less */
#define KX_STR(x) #x
#ifdef OXL_TEST_SIMDE_IMMINTRIN_H
#define KX_UNROLL_N(n)
#else
#define KX_UNROLL_N(n) _Pragma(KX_STR(GCC unroll n))
#endif
#define KX_UNROLL KX_UNROLL_N(16)

/* p, which the compiler no longer knows: the weight loads of one step are not merged with another's, which would
 * keep them live across steps (GCC then spills the sums t of the pass's rows) */
static inline const uint8_t *kx_opaque(const uint8_t *p) {
    __asm__("" : "+r"(p));
    return p;
}

/* one sub-block of 4 n values for the pass's rows j < C: t[j] = fma(ds, (float)isum_j, t[j]), isum_j the exact
 * int32 dot of x[k] (values 4k..4k+3 of the 16 rows) with row j's activation bytes from a[j].qs + off, starting at
 * a[j].v[start] (start < 0: at 0). Four rows' chains interleaved, so that the instructions in flight hold several
 * independent chains (integer sums: any split gives the same isum_j). */
#define KX_IL 4
OXL_INLINE void kx_sub(const int C, __m512 *t, __m512 ds, const __m512i *x, const int n, const kx_act *a, const int off,
                       const int start) {
    KX_UNROLL_N(4)
    for (int j0 = 0; j0 < C; j0 += KX_IL) {
        const int nr = OXL_MIN(KX_IL, C - j0);
        __m512i s[KX_IL];
        KX_UNROLL_N(4)
        for (int r = 0; r < nr; r++) s[r] = start < 0 ? _mm512_setzero_si512() : bcast4(&a[j0 + r].v[start]);
        KX_UNROLL_N(8)
        for (int k = 0; k < n; k++)
            KX_UNROLL_N(4)
            for (int r = 0; r < nr; r++) s[r] = x16_dpbusd_u7(s[r], x[k], bcast4(a[j0 + r].qs + off + 4 * k));
        KX_UNROLL_N(4)
        for (int r = 0; r < nr; r++) t[j0 + r] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(s[r]), t[j0 + r]);
    }
}

/* accm[16 j ..] (lane l: row l) over all nb super-blocks of one group against the pass's activation rows
 * 0..C-1 (A: row 0's prepared super-block 0; super-block i of row j at A[i KX_VG + j]). The sub-block sums t
 * of C rows stay in registers; the per-row totals go to accm, a buffer the compiler cannot keep in registers.
 * (file: the group's rows at wf, w_row bytes apart, built super-block by super-block into tile, while the
 * stream pf of bytes to come is asked for pf_step bytes a super-block; else the repacked group at g0) */
OXL_INLINE void kx_group_k4(const int kind, const int file, const int C, int nb, const uint8_t *g0, const kx_act *A,
                            int ahead, float *accm, const char *wf, size_t w_row, int nrows, uint8_t *tile,
                            const char *pf, size_t pf_step) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
    const __m512i m10 = _mm512_set1_epi8(0x10);
    const __m512i m0f = _mm512_set1_epi8(0x0F), mpair = _mm512_set1_epi32(0x00FF00FF);
    KX_UNROLL for (int j = 0; j < C; j++) _mm512_store_ps(accm + 16 * j, _mm512_setzero_ps());
    for (int i = 0; i < nb; i++) {
        const uint8_t *g = file ? tile : g0 + (size_t)i * kx_sb_bytes(kind);
        if (file) {
            kx_stream(pf, pf_step, i);
            kx_build_sb(kind, wf, w_row, nrows, i, tile);
        }
        const kx_act *a = A + (size_t)i * KX_VG;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        const __m512 mv = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32))));
        const __m512i p0 = _mm512_loadu_si512((const void *)(g + 64)), p1 = _mm512_loadu_si512((const void *)(g + 128));
        const __m512i p2 = _mm512_loadu_si512((const void *)(g + 192));
        const __m512i sc_lo = _mm512_and_si512(p0, m6);
        const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(p2, m0f), _mm512_and_si512(_mm512_srli_epi32(p0, 2), m30));
        const __m512i m_lo = _mm512_and_si512(p1, m6);
        const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(p2, 4), m0f),
                                             _mm512_and_si512(_mm512_srli_epi32(p1, 2), m30));
        const __m512i mp[4] = {_mm512_and_si512(m_lo, mpair), _mm512_and_si512(_mm512_srli_epi32(m_lo, 8), mpair),
                               _mm512_and_si512(m_hi, mpair), _mm512_and_si512(_mm512_srli_epi32(m_hi, 8), mpair)};
        __m512 t[KX_VG];
        KX_UNROLL for (int j = 0; j < C; j++) {
            __m512i ms = x16_dpwssd(_mm512_setzero_si512(), mp[0], bcast4(&a[j].v[0]));
            ms = x16_dpwssd(ms, mp[1], bcast4(&a[j].v[1]));
            ms = x16_dpwssd(ms, mp[2], bcast4(&a[j].v[2]));
            ms = x16_dpwssd(ms, mp[3], bcast4(&a[j].v[3]));
            t[j] = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(ms));
        }
        KX_UNROLL_N(8)
        for (int s = 0; s < 8; s++) {
            if (ahead) kx_ahead(g, kx_sb_bytes(kind), s, 8);
            const int c = s / 2, h = s % 2;
            const uint8_t *gs = kx_opaque(g), *qs = gs + KX_Q4_K_META;
            __m512i x[8];
            KX_UNROLL_N(8)
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * (8 * c + k)));
                x[k] = h ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
                if (kind == KX_Q5_K) {   /* the fifth bit of sub-block s's values: bit s of qh, to bit 4 */
                    const __m512i qh = _mm512_loadu_si512((const void *)(gs + KX_Q5_K_QH + 64 * k));
                    const __m512i b = s <= 4 ? _mm512_slli_epi16(qh, 4 - s) : _mm512_srli_epi16(qh, s - 4);
                    x[k] = _mm512_ternarylogic_epi32(x[k], b, m10, 0xF8);   /* x | (b & m10) */
                }
            }
            const __m512 ds = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(byte_of(s < 4 ? sc_lo : sc_hi, s % 4)));
            kx_sub(C, t, ds, x, 8, a, 32 * s, -1);
        }
        KX_UNROLL for (int j = 0; j < C; j++)
            _mm512_store_ps(accm + 16 * j, _mm512_fmadd_ps(_mm512_set1_ps(a[j].d), t[j], _mm512_load_ps(accm + 16 * j)));
    }
}

/* signed byte b of every dword */
static inline __m512i sbyte_of(__m512i v, int b) {
    return _mm512_srai_epi32(b == 3 ? v : _mm512_slli_epi32(v, 24 - 8 * b), 24);
}

/* Q6_K: value = d sc_g (q - 32), sixteen 16-value sub-blocks g, sc_g int8: the same steps with t starting at
 * +0 and one fma per sub-block, isum_g starting at -32 bsums[g] */
OXL_INLINE void kx_group_q6_K(const int file, const int C, int nb, const uint8_t *g0, const kx_act *A, int ahead,
                              float *accm, const char *wf, size_t w_row, int nrows, uint8_t *tile, const char *pf,
                              size_t pf_step) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    KX_UNROLL for (int j = 0; j < C; j++) _mm512_store_ps(accm + 16 * j, _mm512_setzero_ps());
    for (int i = 0; i < nb; i++) {
        const uint8_t *g = file ? tile : g0 + (size_t)i * kx_sb_bytes(KX_Q6_K);
        if (file) {
            kx_stream(pf, pf_step, i);
            kx_build_sb(KX_Q6_K, wf, w_row, nrows, i, tile);
        }
        const kx_act *a = A + (size_t)i * KX_VG;
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512 t[KX_VG];
        KX_UNROLL for (int j = 0; j < C; j++) t[j] = _mm512_setzero_ps();
        /* values 128h + 32p + 0..31: sub-blocks 8h + 2p (chunks 0..3) and 8h + 2p + 1 (4..7) */
        KX_UNROLL_N(2)
        for (int h = 0; h < 2; h++)
            KX_UNROLL_N(4)
            for (int p = 0; p < 4; p++) {
                if (ahead) kx_ahead(g, kx_sb_bytes(KX_Q6_K), 4 * h + p, 8);
                KX_UNROLL_N(2)
                for (int e = 0; e < 2; e++) {
                    const int sb = 8 * h + 2 * p + e;
                    const uint8_t *gs = kx_opaque(g);
                    __m512i x[4];
                    KX_UNROLL_N(4)
                    for (int k = 0; k < 4; k++) {
                        const int kk = 4 * e + k;
                        const __m512i ql = _mm512_loadu_si512((const void *)(gs + KX_Q6_K_QL + 64 * (16 * h + 8 * (p % 2) + kk)));
                        const __m512i qh = _mm512_loadu_si512((const void *)(gs + KX_Q6_K_QH + 64 * (8 * h + kk)));
                        const __m512i lo = p / 2 ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4) : _mm512_and_si512(ql, m4);
                        const __m512i hi = 2 * p > 4 ? _mm512_srli_epi16(qh, 2 * p - 4)
                                           : 2 * p == 4 ? qh : _mm512_slli_epi16(qh, 4 - 2 * p);
                        x[k] = _mm512_ternarylogic_epi32(lo, hi, m30, 0xF8);   /* lo | (hi & m30) */
                    }
                    const __m512i sc = _mm512_loadu_si512((const void *)(gs + 32 + 64 * (sb / 4)));
                    const __m512 ds = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sbyte_of(sc, sb % 4)));
                    kx_sub(C, t, ds, x, 4, a, 16 * sb, sb);
                }
            }
        KX_UNROLL for (int j = 0; j < C; j++)
            _mm512_store_ps(accm + 16 * j, _mm512_fmadd_ps(_mm512_set1_ps(a[j].d), t[j], _mm512_load_ps(accm + 16 * j)));
    }
}

OXL_INLINE void kx_group_store(int kind, const int C, int nb, const uint8_t *g, const kx_act *A, int ahead, float *accm,
                               float *S, int64_t lds, int nrows, const char *wf, size_t w_row, uint8_t *tile,
                               const char *pf, size_t pf_step) {
    /* file as a constant: the repacked product's loop holds no build */
    if (kind == KX_Q6_K) {
        if (wf) kx_group_q6_K(1, C, nb, NULL, A, ahead, accm, wf, w_row, nrows, tile, pf, pf_step);
        else kx_group_q6_K(0, C, nb, g, A, ahead, accm, NULL, 0, nrows, NULL, NULL, 0);
    } else {
        if (wf) kx_group_k4(kind, 1, C, nb, NULL, A, ahead, accm, wf, w_row, nrows, tile, pf, pf_step);
        else kx_group_k4(kind, 0, C, nb, g, A, ahead, accm, NULL, 0, nrows, NULL, NULL, 0);
    }
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    KX_UNROLL for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(S + j * lds, m, _mm512_load_ps(accm + 16 * j));
}

/* a pass's activation rows: KX_VG while as many remain, else up to X16_VG (a pass of KX_VG rows, and ones of
 * 1..X16_VG: ten compiled forms, not sixteen) */
static inline int kx_pass_rows(int left) { return left >= KX_VG ? KX_VG : OXL_MIN(X16_VG, left); }

/* C as a constant per call (the loops over activation rows unroll) */
OXL_INLINE void kx_group_c(int kind, int C, int nb, const uint8_t *g, const kx_act *A, int ahead, float *accm, float *S,
                           int64_t lds, int nrows, const char *wf, size_t w_row, uint8_t *tile, const char *pf,
                           size_t pf_step) {
#define KX_C(C_) kx_group_store(kind, C_, nb, g, A, ahead, accm, S, lds, nrows, wf, w_row, tile, pf, pf_step)
    if (C == KX_VG) KX_C(KX_VG);
    else X16_BY_C(C, KX_C)
#undef KX_C
}

/* S[j * lds + r] for nr rows from w (file rows w_row bytes apart, or a repacked matrix's rows from a group
 * start) and nc activation rows; -1 if no memory for the per-thread buffer (the per-row totals of a pass, the
 * prepared activations, one group's tile) */
OXL_INLINE int kx_gemm(int kind, int packed, int n, float *S, int64_t lds, const char *w, size_t w_row, int nr,
                       const char *y, size_t y_row, int nc) {
    const int nb = n / QK_K;
    const size_t nblk = (size_t)(nc + KX_VG - 1) / KX_VG, accm_bytes = KX_VG * 64;
    uint8_t *tile, *buf = x16_panel(accm_bytes + nblk * nb * KX_VG * sizeof(kx_act), (size_t)nb * kx_sb_bytes(kind), &tile);
    if (!buf) return -1;
    float *accm = (float *)(void *)buf;
    kx_act *A = (kx_act *)(void *)(buf + accm_bytes);
    kx_prepare(kind, nb, y, y_row, nc, A);
    const int one_pass = kx_pass_rows(nc) == nc;
    const char *end = w + (size_t)nr * w_row;
    for (int r = 0; r < nr; r += KX) {
        const int nrows = OXL_MIN(KX, nr - r);
        const char *g = w + (size_t)r * w_row, *wf = NULL, *pf = NULL;
        size_t pf_step = 0;
        int ahead = 1;   /* a repacked group: kx_ahead */
        if (!packed || nrows < KX) {   /* file rows (a repacked matrix's last rows % 16 are too) */
            ahead = 0;
            if (one_pass) {
                /* one pass: each super-block built as it is needed, in L1, while the next group's rows
                 * (contiguous) stream in, an nb-th of them per super-block */
                if (r == 0)
                    for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);
                wf = g, g = NULL;
                pf = wf + (size_t)nrows * w_row;
                pf_step = (OXL_MIN((size_t)(end - pf), KX * w_row) + (size_t)nb - 1) / (size_t)nb;
            } else {
                for (int l = 0; l < nrows; l++) oxl_stream_row(g + (size_t)l * w_row, w_row, end);   /* several: the group built once */
                kx_build(kind, g, w_row, nrows, nb, tile);
                g = (const char *)tile;
            }
        }
        for (int j0 = 0, C; j0 < nc; j0 += C) {
            C = kx_pass_rows(nc - j0);
            kx_group_c(kind, C, nb, (const uint8_t *)g, A + ((size_t)(j0 / KX_VG) * nb) * KX_VG + j0 % KX_VG, ahead,
                       accm, S + j0 * lds + r, lds, nrows, wf, w_row, tile, pf, pf_step);
        }
    }
    return 0;
}

/* the 8 lanes' sums of v[0..7] (exact int32), as floats in order */
static inline __m256 hsum_i32_8x8_ps(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31)));
}

/* one row, one activation row: the same steps, one output */
OXL_INLINE void vec_dot_k4(int kind, int n, float *s, const void *vx, const void *vy) {
    const int nb = n / QK_K;
    const size_t bx = kx_file_bytes(kind);
    const block_q8_K *y = (const block_q8_K *)vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    float acc = 0.0f;
    for (int i = 0; i < nb; i++) {
        const block_q4_K *xi = (const block_q4_K *)(const void *)((const char *)vx + (size_t)i * bx);
        const uint8_t *qs = kind == KX_Q5_K ? ((const block_q5_K *)(const void *)xi)->qs : xi->qs;
        const __m256i qh = kind == KX_Q5_K ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)(const void *)xi)->qh)
                                           : _mm256_setzero_si256();
        uint8_t u[16];
        oxl_unpack_scales_k4(xi->scales, u);
        int32_t msum = 0;
        for (int j = 0; j < 8; j++) msum += u[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        __m256i v[8];
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (kind == KX_Q5_K) {   /* bits 2c and 2c + 1 of qh, to bit 4 */
                lo = _mm256_or_si256(lo, _mm256_and_si256(c <= 2 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4), m10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(c <= 1 ? _mm256_slli_epi16(qh, 3 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 3), m10));
            }
            v[2 * c] = x16_dpbusd256(_mm256_setzero_si256(), lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            v[2 * c + 1] = x16_dpbusd256(_mm256_setzero_si256(), hi,
                                               _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
        }
        float isum[8], ds[8];
        _mm256_storeu_ps(isum, hsum_i32_8x8_ps(v));
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
static void vec_dot_q4_K_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    vec_dot_k4(KX_Q4_K, n, s, vx, vy);
}
static void vec_dot_q5_K_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    vec_dot_k4(KX_Q5_K, n, s, vx, vy);
}

static void vec_dot_q6_K_x16(int n, float *OXL_RESTRICT s, const void *OXL_RESTRICT vx, const void *OXL_RESTRICT vy) {
    const int nb = n / QK_K;
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
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
                v[p] = x16_dpbusd256(_mm256_setzero_si256(), _mm256_or_si256(lo, _mm256_and_si256(hi, m30)),
                                           _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * p)));
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

static void kx_vec_dot(int kind, int n, float *s, const void *x, const void *y) {
    if (kind == KX_Q6_K) vec_dot_q6_K_x16(n, s, x, y);
    else vec_dot_k4(kind, n, s, x, y);
}

/* the file-layout products; without memory for the per-thread buffer, one output at a time (the same floats).
 * Q6_K with one activation row also goes row by row: its per-call build of 16 rows costs more than the sixteen
 * lanes save (one file row in cache 0.89x, beyond the cache 0.80x vec_dot's, 1 thread CPU time); it is the tied
 * output of most Q4_K_M files at decode. */
OXL_INLINE void kx_gemm_file(int kind, int n, float *S, int64_t lds, const void *w, size_t w_row, int nr, const void *y,
                             size_t y_row, int nc) {
    if ((kind == KX_Q6_K && nc == 1) ||
        kx_gemm(kind, 0, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc)) {
        /* row by row */
        const char *end = (const char *)w + (size_t)nr * w_row;
        for (int r = 0; r < nr; r++) {
            oxl_stream_row((const char *)w + (size_t)r * w_row, w_row, end);
            for (int j = 0; j < nc; j++)
                kx_vec_dot(kind, n, &S[j * lds + r], (const char *)w + (size_t)r * w_row, (const char *)y + (size_t)j * y_row);
        }
    }
}
static void gemm_q4_K_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    kx_gemm_file(KX_Q4_K, n, S, lds, w, w_row, nr, y, y_row, nc);
}
static void gemm_q5_K_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    kx_gemm_file(KX_Q5_K, n, S, lds, w, w_row, nr, y, y_row, nc);
}
static void gemm_q6_K_file_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row,
                               int nr, const void *OXL_RESTRICT y, size_t y_row, int nc) {
    kx_gemm_file(KX_Q6_K, n, S, lds, w, w_row, nr, y, y_row, nc);
}
/* the repacked products (rows from a group start); -1: no memory, the caller reads the file rows */
static int gemm_q4_K_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return kx_gemm(KX_Q4_K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}
static int gemm_q5_K_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return kx_gemm(KX_Q5_K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}
static int gemm_q6_K_x16(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr,
                         const void *OXL_RESTRICT y, size_t y_row, int nc) {
    return kx_gemm(KX_Q6_K, 1, n, S, lds, (const char *)w, w_row, nr, (const char *)y, y_row, nc);
}

/* the repacked layouts have the file's bytes per row */
static int64_t q4_K_x16_row_size(int64_t cols) {
    return cols > 0 && cols % QK_K == 0 ? cols / QK_K * (int64_t)sizeof(block_q4_K) : -1;
}
static int64_t q5_K_x16_row_size(int64_t cols) {
    return cols > 0 && cols % QK_K == 0 ? cols / QK_K * (int64_t)sizeof(block_q5_K) : -1;
}
static int64_t q6_K_x16_row_size(int64_t cols) {
    return cols > 0 && cols % QK_K == 0 ? cols / QK_K * (int64_t)sizeof(block_q6_K) : -1;
}

/* whole groups of 16 rows repacked, the last rows % 16 copied; run once at load, per thread over a row range
 * that starts at a group boundary of the whole matrix (matmul.c's oxl_repack splits in multiples of 16) */
static void kx_repack(int kind, const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    const int nb = (int)(cols / QK_K);
    const size_t row = (size_t)nb * kx_file_bytes(kind);
    int64_t r = 0;
    for (; r + KX <= rows; r += KX) kx_build(kind, (const char *)w + r * row, row, KX, nb, (uint8_t *)dst + r * row);
    memcpy((char *)dst + r * row, (const char *)w + r * row, (size_t)(rows - r) * row);
}
static void repack_q4_K_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    kx_repack(KX_Q4_K, w, dst, rows, cols);
}
static void repack_q5_K_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    kx_repack(KX_Q5_K, w, dst, rows, cols);
}
static void repack_q6_K_x16(const void *OXL_RESTRICT w, void *OXL_RESTRICT dst, int64_t rows, int64_t cols) {
    kx_repack(KX_Q6_K, w, dst, rows, cols);
}

/* Q4_K, Q5_K and Q6_K of this tier: vec_dot, the file-layout products (one row or many) and the repacked layouts, all
 * in the orders above */
void oxl_register_avx512vnni_kx16(oxl_kernel_table *t) {
    t->type[OXL_TYPE_Q4_K].vec_dot = vec_dot_q4_K_x16;
    t->type[OXL_TYPE_Q4_K].gemm = gemm_q4_K_file_x16;
    t->type[OXL_TYPE_Q4_K].gemm_one_row = 1;
    t->type[OXL_TYPE_Q4_K].repacked = (oxl_repacked_layout){"q4_K_x16", q4_K_x16_row_size, repack_q4_K_x16, gemm_q4_K_x16};
    t->type[OXL_TYPE_Q5_K].vec_dot = vec_dot_q5_K_x16;
    t->type[OXL_TYPE_Q5_K].gemm = gemm_q5_K_file_x16;
    t->type[OXL_TYPE_Q5_K].gemm_one_row = 1;
    t->type[OXL_TYPE_Q5_K].repacked = (oxl_repacked_layout){"q5_K_x16", q5_K_x16_row_size, repack_q5_K_x16, gemm_q5_K_x16};
    t->type[OXL_TYPE_Q6_K].vec_dot = vec_dot_q6_K_x16;
    t->type[OXL_TYPE_Q6_K].gemm = gemm_q6_K_file_x16;
    t->type[OXL_TYPE_Q6_K].gemm_one_row = 1;
    t->type[OXL_TYPE_Q6_K].repacked = (oxl_repacked_layout){"q6_K_x16", q6_K_x16_row_size, repack_q6_K_x16, gemm_q6_K_x16};
}
