/* AVX-512 VNNI multi-row kernels (gemm) for Q4_1 and Q5_0: a batched decode of several sequences, a
 * speculative verify, a prefill chunk. (Q4_0 and Q8_0 have their own order on this tier: quants_x16_vnni.c.)
 *
 * vpdpbusd sums four u8 x s8 products into an int32 lane in one instruction, exactly (no int16
 * saturation), where AVX2 needs vpsignb + vpmaddubsw + vpmaddwd. A 512-bit register holds two blocks of
 * one row, block i in the lower 256 bits and i + 1 in the upper: the canonical order of the AVX2 tier
 * (csrc/x86/avx2/quants_legacy_avx2.c) with `even` in lanes 0..7 and `odd` in lanes 8..15, as the
 * AVX-512 tier's vec_dot (inherited by this tier) keeps them. Lane k of a block's products is values
 * 4k..4k+3, exact however it is computed, so every output here is that vec_dot's float, bit for bit.
 *
 * The unsigned operand of vpdpbusd is the weight (Q5_0: q + 16, off * sum4(y) taken off per activation
 * block, packed once).
 *
 * Activation rows go through in panels whose packed form fits PANEL_BYTES (all of a decode's or a small
 * batch's rows, a share of a prefill chunk's), and within a panel in groups of up to VG, one accumulator
 * register each: every weight row of the call is streamed once per panel and decoded once per group.
 * Beyond VG_SMALL activation rows (a prefill chunk, not a decode or a small batch) weight rows go in pairs,
 * each packed activation vector loaded once for both (Xeon, 1 thread, 64 rows: 2048 x 2048 Q4_0 68 -> 87
 * GOPS, Q8_0 67 -> 93; 4 rows x 4 activation rows: 81 / 76).
 * Panels live in a per-thread buffer that grows to the widest panel the thread has packed and is freed
 * when the thread ends. Products whose one packed activation row would not fit go to the inherited
 * (AVX2-compiled) multi-row kernel, which gives the same floats. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../quants_legacy_x86.h"

#define VG 8                       /* activation rows per group */
#define VG_SMALL 8                 /* up to this many activation rows, one weight row at a time */
/* Packed activations of one panel: a prefill chunk of 64 rows x 2048 values packs to 384 KB, so a panel
 * is a share of it that stays in L2 beside the weight rows it meets. Xeon (2026-11-25), 2048 x 2048 Q4_0
 * by 64 rows on 1 thread: whole chunks to the AVX2 kernel (the limit was 128 KB on the stack) 21 GOPS,
 * 256 KB panels here ~4x that. */
#define PANEL_BYTES (256 * 1024)

enum { VNNI_Q4_1, VNNI_Q5_0, VNNI_KINDS };
static oxl_gemm_fn g_wide[VNNI_KINDS];   /* the inherited kernels, for products too wide to pack */

static inline int vk_kind(int vk) { return vk == VNNI_Q4_1 ? K_Q4_1 : K_Q5_0; }
/* the offset added to the weight's bytes (Q5_0: q + 16) */
static inline int vk_off(int vk) { return tile_off(vk_kind(vk)); }

static inline __m512i join_i(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
static inline __m512 join_f(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

/* -c * sum4(v) per int32 lane, v's bytes signed: what vpdpbusd's u8 operand adds over the true products
 * when c was added to its bytes (c * sum4 of the other operand) */
static inline __m512i neg_sum4_512(char c, __m512i v) {
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(c), v));
}

/* Packed activations of one call: pair k (blocks 2k, 2k + 1) of row j at [k * nc + j]. For an odd block
 * count the last pair has its upper half zero. */
typedef struct {
    __m512i *q;    /* int8 lanes */
    __m512i *o;    /* nibble types with an offset: -off * sum4(y) per int32 lane */
    __m512 *d;     /* dy broadcast over each block's 8 lanes */
    float *s;      /* Q4_1: block i of row j at [i * nc + j] */
    int nc;
} packed;

static inline size_t pack_bytes(int vk, int np, int nc) {
    const size_t per = 64 * (2 + (vk_off(vk) != 0)) + (vk == VNNI_Q4_1 ? 8 : 0);
    return (size_t)np * nc * per;
}

static inline void pack(int vk, int nb, const char *y, size_t y_row, int nc, packed *P) {
    const int kind = vk_kind(vk), np = (nb + 1) / 2;
    for (int j = 0; j < nc; j++) {
        const char *yr = y + j * y_row;
        for (int k = 0; k < np; k++) {
            const int i = 2 * k, has_hi = i + 1 < nb;
            float d0, d1 = 0.0f, s0, s1 = 0.0f;
            const __m256i lo = act_block(kind, yr, i, &d0, &s0);
            const __m256i hi = has_hi ? act_block(kind, yr, i + 1, &d1, &s1) : _mm256_setzero_si256();
            const __m512i q = join_i(lo, hi);   /* a missing upper block: zero products, zero scale */
            P->q[k * nc + j] = q;
            P->d[k * nc + j] = join_f(d0, d1);
            if (vk_off(vk)) P->o[k * nc + j] = neg_sum4_512((char)vk_off(vk), q);
            if (vk == VNNI_Q4_1) {
                P->s[i * nc + j] = s0;
                if (has_hi) P->s[(i + 1) * nc + j] = s1;
            }
        }
    }
}

/* the canonical finish for C outputs: (hsum8(even + odd) [+ hsum8(tail)]) + summs */
static inline void finish(const int C, const __m512 *acc, const __m256 *tail, int has_tail, const float *summs,
                          float *S, int64_t lds) {
    for (int j = 0; j < C; j += 4) {
        __m256 v[4], t[4];
        for (int c = 0; c < 4; c++) {
            const int jj = j + c < C ? j + c : j;
            v[c] = _mm256_add_ps(_mm512_castps512_ps256(acc[jj]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[jj]), 1)));
            t[c] = has_tail ? tail[jj] : _mm256_setzero_ps();
        }
        __m128 h = hsum_f32_8x4(v[0], v[1], v[2], v[3]);
        if (has_tail) h = _mm_add_ps(h, hsum_f32_8x4(t[0], t[1], t[2], t[3]));
        float out[4];
        _mm_storeu_ps(out, _mm_add_ps(h, _mm_loadu_ps(summs + j)));
        for (int c = 0; c < 4 && j + c < C; c++) S[(j + c) * lds] = out[c];
    }
}

/* R weight rows (w_row bytes apart) against C packed activation rows (j0 .. j0 + C - 1 of P): each activation
 * vector is loaded once for the R rows; each (weight row, activation row) output has its own accumulator and
 * the steps of the one-row case, so R changes no float */
OXL_INLINE void row_group(int vk, const int R, const int C, int nb, const char *w, size_t w_row, const packed *P,
                             int j0, float *S, int64_t lds) {
    const int kind = vk_kind(vk);
    const size_t bx = kind_block_bytes(kind);
    const int nc = P->nc;
    __m512 acc[2][VG];
    float summs[2][VG + 4] = {{0}};
    __m256 sm[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};   /* Q4_1: summs of the group's rows, lane j */
    /* only the group's C lanes are read: whatever lies past them (other blocks, or the stack beyond the
     * packed rows) would be summed in the unused lanes, and a denormal there costs a microcode assist per
     * FMA (SmolLM2 decode through this kernel ran at half speed) */
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(C), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) acc[r][j] = _mm512_setzero_ps();
    /* each dot starts at what the weight's offset added: Q5_0 at the packed -off sum4(y), Q4_1 at zero */
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const int k = i / 2;
        __m512i x[2];
        __m512 dx[2];
        float mx0[2] = {0.0f, 0.0f}, mx1[2] = {0.0f, 0.0f};
        for (int r = 0; r < R; r++) {
            const char *wr = w + r * w_row;
            float dx0, dx1;
            x[r] = join_i(tile_decode(kind, wr + i * bx, &dx0, &mx0[r]), tile_decode(kind, wr + (i + 1) * bx, &dx1, &mx1[r]));
            dx[r] = join_f(dx0, dx1);
        }
        const __m512i *q = P->q + k * nc + j0, *o = P->o + k * nc + j0;
        const __m512 *d = P->d + k * nc + j0;
        for (int j = 0; j < C; j++) {
            const __m512i qj = _mm512_load_si512(q + j);
            const __m512 dj = _mm512_load_ps(d + j);
            for (int r = 0; r < R; r++) {
                const __m512i p = _mm512_dpbusd_epi32(vk_off(vk) ? _mm512_load_si512(o + j) : _mm512_setzero_si512(), x[r], qj);
                /* dx * dy rounded once, as vec_dot's scalar product */
                acc[r][j] = _mm512_fmadd_ps(_mm512_mul_ps(dx[r], dj), _mm512_cvtepi32_ps(p), acc[r][j]);
            }
        }
        if (vk == VNNI_Q4_1) {
            /* per row: summs + fma(mx0, sy0, mx1 * sy1), vec_dot's steps */
            const float *s0 = P->s + i * nc + j0, *s1 = s0 + nc;
            const __m256 sy0 = _mm256_maskload_ps(s0, lanes), sy1 = _mm256_maskload_ps(s1, lanes);
            for (int r = 0; r < R; r++) {
                const __m256 t = _mm256_mul_ps(_mm256_set1_ps(mx1[r]), sy1);
                sm[r] = _mm256_add_ps(sm[r], _mm256_fmadd_ps(_mm256_set1_ps(mx0[r]), sy0, t));
            }
        }
    }
    const int has_tail = i < nb;
    __m256 tail[2][VG];
    if (has_tail) {   /* the lower halves of the last pair */
        const int k = i / 2;
        for (int r = 0; r < R; r++) {
            float dx, mx = 0.0f;
            const __m256i x = tile_decode(kind, w + r * w_row + i * bx, &dx, &mx);
            const __m256 dxv = _mm256_set1_ps(dx);
            for (int j = 0; j < C; j++) {
                const __m256i qy = _mm512_castsi512_si256(P->q[k * nc + j0 + j]);
                const __m256i base = vk_off(vk) ? _mm512_castsi512_si256(P->o[k * nc + j0 + j]) : _mm256_setzero_si256();
                const __m256i p = _mm256_dpbusd_epi32(base, x, qy);
                const __m256 c = _mm256_mul_ps(dxv, _mm512_castps512_ps256(P->d[k * nc + j0 + j]));
                tail[r][j] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(p), _mm256_setzero_ps());
            }
            if (vk == VNNI_Q4_1)
                sm[r] = _mm256_fmadd_ps(_mm256_set1_ps(mx), _mm256_maskload_ps(P->s + i * nc + j0, lanes), sm[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        if (vk == VNNI_Q4_1) _mm256_storeu_ps(summs[r], sm[r]);
        finish(C, acc[r], tail[r], has_tail, summs[r], S + r, lds);
    }
}

/* R and C as run-time values: GCC makes one copy per type from this, with loops over R and C (Q4_0 ran 20%
 * faster so than with both constant, Xeon 2026-11-25) */
OXL_INLINE void row_group_any(int vk, int R, int C, int nb, const char *w, size_t w_row, const packed *P, int j0,
                                 float *S, int64_t lds) {
    row_group(vk, R, C, nb, w, w_row, P, j0, S, lds);
}

OXL_INLINE void row_group_c(int vk, int R, int C, int nb, const char *w, size_t w_row, const packed *P, int j0,
                               float *S, int64_t lds) {
    if (vk != VNNI_Q4_1) {
        row_group_any(vk, R, C, nb, w, w_row, P, j0, S, lds);
        return;
    }
    /* Q4_1 with C constant, one weight row at a time (gemm_vnni): the loops' copy ran SmolLM2's prefill at
     * 0.86x (18c0a09) */
#define ROW_GROUP_R(C_)                                                            \
    if (R == 2) row_group(vk, 2, C_, nb, w, w_row, P, j0, S, lds);                 \
    else row_group(vk, 1, C_, nb, w, w_row, P, j0, S, lds);                        \
    break;
    switch (C) {
    case 8: ROW_GROUP_R(8)
    case 7: ROW_GROUP_R(7)
    case 6: ROW_GROUP_R(6)
    case 5: ROW_GROUP_R(5)
    case 4: ROW_GROUP_R(4)
    case 3: ROW_GROUP_R(3)
    case 2: ROW_GROUP_R(2)
    default: ROW_GROUP_R(1)
    }
#undef ROW_GROUP_R
}

/* this thread's panel buffer, at least `bytes` long and 64-byte aligned (NULL if out of memory) */
static pthread_key_t g_panel_key;
static pthread_once_t g_panel_once = PTHREAD_ONCE_INIT;
typedef struct {
    void *p;
    size_t bytes;
} panel_buf;
static void panel_free(void *v) {
    panel_buf *b = (panel_buf *)v;
    free(b->p);
    free(b);
}
static void panel_key_init(void) { (void)pthread_key_create(&g_panel_key, panel_free); }

static void *panel_memory(size_t bytes) {
    (void)pthread_once(&g_panel_once, panel_key_init);
    panel_buf *b = (panel_buf *)pthread_getspecific(g_panel_key);
    if (!b) {
        if (!(b = (panel_buf *)calloc(1, sizeof(*b)))) return NULL;
        if (pthread_setspecific(g_panel_key, b)) {
            free(b);
            return NULL;
        }
    }
    if (b->bytes < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes)) return NULL;
        free(b->p);
        b->p = p, b->bytes = bytes;
    }
    return b->p;
}

void *oxl_vnni_panel_memory(size_t bytes);   /* also the sixteen-row kernels' (x16_common.h) */
void *oxl_vnni_panel_memory(size_t bytes) { return panel_memory(bytes); }

OXL_INLINE void gemm_vnni(int vk, int n, float *S, int64_t lds, const void *vw, size_t w_row, int nr,
                            const void *vy, size_t y_row, int nc) {
    const int nb = n / 32, np = (nb + 1) / 2;
    const size_t row_pack = pack_bytes(vk, np, 1);
    /* activation rows per panel: as many as fit, whole groups where more than one group fits */
    int panel = (int)OXL_MIN((size_t)nc, PANEL_BYTES / row_pack);
    if (panel > VG) panel -= panel % VG;
    unsigned char *buf = panel >= 1 ? (unsigned char *)panel_memory(pack_bytes(vk, np, panel)) : NULL;
    if (!buf) {
        g_wide[vk](n, S, lds, vw, w_row, nr, vy, y_row, nc);
        return;
    }
    const char *w = (const char *)vw;
    for (int j0 = 0; j0 < nc; j0 += panel) {
        const int pc = OXL_MIN(panel, nc - j0);
        packed P = {.nc = pc};
        unsigned char *p = buf;
        P.q = (__m512i *)p, p += (size_t)np * pc * 64;
        P.d = (__m512 *)p, p += (size_t)np * pc * 64;
        P.o = (__m512i *)p;
        if (vk_off(vk)) p += (size_t)np * pc * 64;
        P.s = (float *)p;
        pack(vk, nb, (const char *)vy + j0 * y_row, y_row, pc, &P);
        float *Sp = S + j0 * lds;
        /* pairs of weight rows where a panel is more than a decode's few rows (the weights then come from
         * cache, and the activation loads are what the rows can share); one at a time, one stream, else */
        const int R = nc > VG_SMALL && vk != VNNI_Q4_1 ? 2 : 1;
        int r = 0;
        for (; r + R <= nr; r += R) {
            for (int rr = 0; rr < R; rr++) oxl_stream_row(w + (r + rr) * w_row, w_row, w + (size_t)nr * w_row);
            for (int j = 0; j < pc; j += VG)
                row_group_c(vk, R, OXL_MIN(VG, pc - j), nb, w + r * w_row, w_row, &P, j, Sp + j * lds + r, lds);
        }
        for (; r < nr; r++) {
            oxl_stream_row(w + r * w_row, w_row, w + (size_t)nr * w_row);
            for (int j = 0; j < pc; j += VG)
                row_group_c(vk, 1, OXL_MIN(VG, pc - j), nb, w + r * w_row, w_row, &P, j, Sp + j * lds + r, lds);
        }
    }
}

#define GEMM_VNNI(name, vk) \
    static void name(int n, float *OXL_RESTRICT S, int64_t lds, const void *OXL_RESTRICT w, size_t w_row, int nr, \
                     const void *OXL_RESTRICT y, size_t y_row, int nc) { \
        gemm_vnni(vk, n, S, lds, w, w_row, nr, y, y_row, nc); \
    }

GEMM_VNNI(gemm_q4_1_vnni, VNNI_Q4_1)
GEMM_VNNI(gemm_q5_0_vnni, VNNI_Q5_0)

/* Takes over the multi-row kernels of the types whose vec_dot is the AVX-512 tier's (the same sums); the
 * inherited ones stay for products too wide to pack. They also take single rows (the decode matvec):
 * with the activation packed once per call, one row through them ran SmolLM2's decode at 1.3x the
 * AVX-512 vec_dot row by row (Xeon, 2026-11-25), and a vpdpbusd vec_dot, which has to join and convert
 * each activation block's scales per call, did not gain. */
void oxl_register_avx512vnni_legacy(oxl_kernel_table *t) {
    static const int types[] = {OXL_TYPE_Q4_1, OXL_TYPE_Q5_0};
    static const oxl_gemm_fn gemms[] = {gemm_q4_1_vnni, gemm_q5_0_vnni};
    for (int vk = 0; vk < VNNI_KINDS; vk++) {
        if (!t->type[types[vk]].gemm) continue;   /* no inherited kernel to fall back on: keep the parent's */
        g_wide[vk] = t->type[types[vk]].gemm;
        t->type[types[vk]].gemm = gemms[vk];
        t->type[types[vk]].gemm_one_row = 1;
    }
}
