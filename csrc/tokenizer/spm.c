/* SentencePiece-style BPE encoder; see spm.h. */
#include "spm.h"

#include <stdlib.h>
#include <string.h>

struct oxl_spm {
    const uint8_t *data;      /* token texts, cut at offsets (owned by the caller) */
    const int64_t *offsets;   /* (n_vocab + 1,) */
    const float *scores;      /* (n_vocab,) */
    int32_t n_vocab;
    int32_t unk_id;
    int32_t byte_ids[256];
    uint64_t mask;            /* hash capacity - 1 */
    int32_t *slots;           /* token ids, -1 empty */
};

static uint64_t hash_bytes(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int same_text(const oxl_spm *s, int32_t id, const uint8_t *p, int64_t n) {
    const int64_t b = s->offsets[id], e = s->offsets[id + 1];
    return e - b == n && (n == 0 || memcmp(s->data + b, p, (size_t)n) == 0);
}

int32_t oxl_spm_lookup(const oxl_spm *s, const uint8_t *bytes, int64_t n) {
    for (uint64_t i = hash_bytes(bytes, n) & s->mask;; i = (i + 1) & s->mask) {
        const int32_t id = s->slots[i];
        if (id < 0) return -1;
        if (same_text(s, id, bytes, n)) return id;
    }
}

oxl_spm *oxl_spm_new(const uint8_t *data, int64_t data_len, const int64_t *offsets, int32_t n_vocab,
                     const float *scores, int byte_fallback, int32_t unk_id) {
    if (!data || !offsets || !scores || n_vocab < 1 || offsets[0] != 0 || data_len < 0) return NULL;
    for (int32_t i = 0; i < n_vocab; i++)
        if (offsets[i + 1] < offsets[i] || offsets[i + 1] > data_len) return NULL;
    if (unk_id >= n_vocab) return NULL;
    oxl_spm *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n_vocab) cap <<= 1;
    s->slots = malloc(cap * sizeof *s->slots);
    if (!s->slots) {
        free(s);
        return NULL;
    }
    memset(s->slots, 0xff, cap * sizeof *s->slots);
    s->data = data;
    s->offsets = offsets;
    s->scores = scores;
    s->n_vocab = n_vocab;
    s->unk_id = unk_id < 0 ? -1 : unk_id;
    s->mask = cap - 1;
    for (int32_t id = 0; id < n_vocab; id++) {    /* a repeated text maps to its last id, as in llama.cpp */
        const uint8_t *p = data + offsets[id];
        const int64_t n = offsets[id + 1] - offsets[id];
        uint64_t i = hash_bytes(p, n) & s->mask;
        while (s->slots[i] >= 0 && !same_text(s, s->slots[i], p, n)) i = (i + 1) & s->mask;
        s->slots[i] = id;
    }
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        const uint8_t name[6] = {'<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>'};
        s->byte_ids[b] = byte_fallback ? oxl_spm_lookup(s, name, 6) : -1;
    }
    return s;
}

void oxl_spm_free(oxl_spm *s) {
    if (!s) return;
    free(s->slots);
    free(s);
}

/* 16 bytes each: a text of len bytes needs at most len symbols and 3 len pairs (64 bytes a byte) */
typedef struct {
    int32_t start;    /* byte offset in the text */
    int32_t n;        /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next;
} symbol;

typedef struct {
    float score;
    int32_t left, right;
    int32_t size;
} bigram;

/* heap order: higher score first, then the leftmost pair */
static int before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(bigram *h, int64_t *n, bigram x) {
    int64_t i = (*n)++;
    while (i > 0) {
        const int64_t p = (i - 1) / 2;
        if (!before(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static bigram heap_pop(bigram *h, int64_t *n) {
    const bigram top = h[0], last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void try_add(const oxl_spm *s, const uint8_t *text, const symbol *sym, int32_t left, int32_t right,
                    bigram *heap, int64_t *n_heap) {
    if (left < 0 || right < 0) return;
    const int32_t size = sym[left].n + sym[right].n;
    const int32_t id = oxl_spm_lookup(s, text + sym[left].start, size);
    if (id < 0) return;
    const bigram b = {s->scores[id], left, right, size};
    heap_push(heap, n_heap, b);
}

static int utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead >> 5) == 0x6) return 2;
    if ((lead >> 4) == 0xe) return 3;
    if ((lead >> 3) == 0x1e) return 4;
    return 1;   /* a stray continuation byte stands alone, as in llama.cpp */
}

int64_t oxl_spm_encode(const oxl_spm *s, const uint8_t *text, int64_t len, int32_t *out, int64_t cap) {
    if (!s || len < 0 || len > OXL_SPM_MAX_TEXT || (len > 0 && !text) || cap < 0 || (cap > 0 && !out))
        return OXL_SPM_ERR_ARG;
    if (len == 0) return 0;
    symbol *sym = malloc((size_t)len * sizeof *sym);
    /* n - 1 first pairs, then at most two new pairs per merge (n - 1 merges) */
    bigram *heap = malloc((size_t)(3 * len) * sizeof *heap);
    if (!sym || !heap) {
        free(sym);
        free(heap);
        return OXL_SPM_ERR_NOMEM;
    }
    int32_t n_sym = 0;
    for (int32_t off = 0; off < len; n_sym++) {
        const int32_t n = utf8_len(text[off]) < len - off ? utf8_len(text[off]) : (int32_t)(len - off);
        sym[n_sym] = (symbol){off, n, n_sym - 1, off + n < len ? n_sym + 1 : -1};
        off += n;
    }
    int64_t n_heap = 0;
    for (int32_t i = 1; i < n_sym; i++) try_add(s, text, sym, i - 1, i, heap, &n_heap);
    while (n_heap > 0) {
        const bigram b = heap_pop(heap, &n_heap);
        symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;   /* outdated by an earlier merge */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_add(s, text, sym, l->prev, b.left, heap, &n_heap);
        try_add(s, text, sym, b.left, l->next, heap, &n_heap);
    }
    int64_t n_out = 0;
#define EMIT(id) do { if (n_out < cap) out[n_out] = (id); n_out++; } while (0)
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const uint8_t *p = text + sym[i].start;
        const int32_t id = oxl_spm_lookup(s, p, sym[i].n);
        if (id >= 0) {
            EMIT(id);
            continue;
        }
        /* never merged, so one character that is not a token: its byte tokens, else unknown */
        int all = 1;
        for (int32_t k = 0; k < sym[i].n; k++) all &= s->byte_ids[p[k]] >= 0;
        if (all) {
            for (int32_t k = 0; k < sym[i].n; k++) EMIT(s->byte_ids[p[k]]);
        } else if (s->unk_id >= 0) {
            EMIT(s->unk_id);
        }
    }
#undef EMIT
    free(sym);
    free(heap);
    return n_out;
}
