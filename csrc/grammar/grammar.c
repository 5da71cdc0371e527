/* Grammar matcher: hash-consed parse stacks and a lazily built state/byte transition table.
 * See grammar.h for the data layout. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

struct oxg_machine {
    /* grammar */
    int32_t *seq, n_seq;
    int32_t *alt_off, *alts, n_rules;
    uint8_t *sets;
    int32_t n_sets;
    /* stack nodes; node 0 is the empty stack */
    int32_t *node_pos, *node_parent, n_nodes, cap_nodes;
    uint32_t *visit;              /* generation stamp per node, for de-duplicating one expansion */
    uint32_t gen;
    int32_t *node_tab;            /* open addressing, -1 = free */
    uint32_t node_tab_mask;
    /* states: sorted node-id sets; state 0 is the empty set (dead) */
    int64_t *st_off;              /* n_states + 1 offsets into st_data */
    int32_t *st_data;
    int64_t n_st_data, cap_st_data;
    int32_t n_states, cap_states;
    uint8_t *st_can_end;
    int32_t *trans;               /* cap_states * 256, -1 = not computed yet */
    uint64_t *loop_known, *loop;  /* per state: unit kinds tested, and those that lead back to it */
    int32_t *st_tab;
    uint32_t st_tab_mask;
    /* scratch */
    int32_t *work, cap_work;
    int32_t *out, n_out, cap_out;
    int32_t *path, cap_path;
};

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return OXG_ERR_NOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int grow32(int32_t **p, int32_t *cap, int64_t need) {
    int64_t c = *cap;
    int rc = grow((void **)p, &c, need, sizeof(int32_t));
    *cap = (int32_t)c;
    return rc;
}

/* unit kinds no state ever loops on: tested once per state, for free */
#define NEVER_LOOPS ((uint64_t)1 << OXG_UNIT_OTHER | (uint64_t)1 << OXG_UNIT_UNALIGNED)

static inline uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

/* ---- stack nodes ---------------------------------------------------------------------------- */

static int node_tab_rebuild(oxg_machine *m, uint32_t size) {
    int32_t *t = malloc((size_t)size * sizeof(int32_t));
    if (!t) return OXG_ERR_NOMEM;
    memset(t, 0xff, (size_t)size * sizeof(int32_t));
    for (int32_t n = 1; n < m->n_nodes; n++) {
        uint32_t h = hash2((uint32_t)m->node_pos[n], (uint32_t)m->node_parent[n]) & (size - 1);
        while (t[h] >= 0) h = (h + 1) & (size - 1);
        t[h] = n;
    }
    free(m->node_tab);
    m->node_tab = t;
    m->node_tab_mask = size - 1;
    return 0;
}

/* id of the stack (pos on top of parent), created if new; negative on error */
static int32_t intern_node(oxg_machine *m, int32_t pos, int32_t parent) {
    uint32_t h = hash2((uint32_t)pos, (uint32_t)parent) & m->node_tab_mask;
    for (;;) {
        int32_t n = m->node_tab[h];
        if (n < 0) break;
        if (m->node_pos[n] == pos && m->node_parent[n] == parent) return n;
        h = (h + 1) & m->node_tab_mask;
    }
    if (m->n_nodes >= OXG_MAX_NODES) return OXG_ERR_LIMIT;
    if (m->n_nodes >= m->cap_nodes) {
        int32_t c = m->cap_nodes * 2;
        int32_t *a = realloc(m->node_pos, (size_t)c * sizeof(int32_t));
        if (!a) return OXG_ERR_NOMEM;
        m->node_pos = a;
        a = realloc(m->node_parent, (size_t)c * sizeof(int32_t));
        if (!a) return OXG_ERR_NOMEM;
        m->node_parent = a;
        uint32_t *v = realloc(m->visit, (size_t)c * sizeof(uint32_t));
        if (!v) return OXG_ERR_NOMEM;
        memset(v + m->cap_nodes, 0, (size_t)(c - m->cap_nodes) * sizeof(uint32_t));
        m->visit = v;
        m->cap_nodes = c;
    }
    int32_t n = m->n_nodes++;
    m->node_pos[n] = pos;
    m->node_parent[n] = parent;
    m->visit[n] = 0;
    m->node_tab[h] = n;
    if ((uint32_t)m->n_nodes * 2 > m->node_tab_mask + 1) {
        int rc = node_tab_rebuild(m, (m->node_tab_mask + 1) * 2);
        if (rc) return rc;
    }
    return n;
}

/* ---- states --------------------------------------------------------------------------------- */

static uint32_t hash_nodes(const int32_t *a, int32_t n) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int32_t i = 0; i < n; i++) h = hash2(h, (uint32_t)a[i]);
    return h;
}

static int st_tab_rebuild(oxg_machine *m, uint32_t size) {
    int32_t *t = malloc((size_t)size * sizeof(int32_t));
    if (!t) return OXG_ERR_NOMEM;
    memset(t, 0xff, (size_t)size * sizeof(int32_t));
    for (int32_t s = 0; s < m->n_states; s++) {
        const int32_t *a = m->st_data + m->st_off[s];
        uint32_t h = hash_nodes(a, (int32_t)(m->st_off[s + 1] - m->st_off[s])) & (size - 1);
        while (t[h] >= 0) h = (h + 1) & (size - 1);
        t[h] = s;
    }
    free(m->st_tab);
    m->st_tab = t;
    m->st_tab_mask = size - 1;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Intern m->out[0..n_out) (sorted and de-duplicated here) as a state id. */
static int32_t intern_state(oxg_machine *m) {
    int32_t n = m->n_out;
    int32_t *a = m->out;
    if (n > 16) {
        qsort(a, (size_t)n, sizeof(int32_t), cmp_i32);
    } else {
        for (int32_t i = 1; i < n; i++) {
            int32_t v = a[i], j = i - 1;
            while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; }
            a[j + 1] = v;
        }
    }
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (k == 0 || a[k - 1] != a[i]) a[k++] = a[i];
    n = k;
    uint32_t h = hash_nodes(a, n) & m->st_tab_mask;
    for (;;) {
        int32_t s = m->st_tab[h];
        if (s < 0) break;
        int64_t len = m->st_off[s + 1] - m->st_off[s];
        if (len == n && memcmp(m->st_data + m->st_off[s], a, (size_t)n * sizeof(int32_t)) == 0) return s;
        h = (h + 1) & m->st_tab_mask;
    }
    if (m->n_states + 1 >= m->cap_states) {
        int32_t c = m->cap_states * 2;
        int64_t *o = realloc(m->st_off, (size_t)(c + 1) * sizeof(int64_t));
        if (!o) return OXG_ERR_NOMEM;
        m->st_off = o;
        uint8_t *ce = realloc(m->st_can_end, (size_t)c);
        if (!ce) return OXG_ERR_NOMEM;
        m->st_can_end = ce;
        int32_t *t = realloc(m->trans, (size_t)c * 256 * sizeof(int32_t));
        if (!t) return OXG_ERR_NOMEM;
        memset(t + (size_t)m->cap_states * 256, 0xff, (size_t)(c - m->cap_states) * 256 * sizeof(int32_t));
        m->trans = t;
        uint64_t *lk = realloc(m->loop_known, (size_t)c * sizeof(uint64_t));
        if (!lk) return OXG_ERR_NOMEM;
        m->loop_known = lk;
        uint64_t *lp = realloc(m->loop, (size_t)c * sizeof(uint64_t));
        if (!lp) return OXG_ERR_NOMEM;
        m->loop = lp;
        m->cap_states = c;
    }
    if (grow((void **)&m->st_data, &m->cap_st_data, m->n_st_data + n, sizeof(int32_t))) return OXG_ERR_NOMEM;
    int32_t s = m->n_states++;
    memcpy(m->st_data + m->n_st_data, a, (size_t)n * sizeof(int32_t));
    m->n_st_data += n;
    m->st_off[s + 1] = m->n_st_data;
    m->st_can_end[s] = (uint8_t)(n > 0 && a[0] == 0);
    m->loop_known[s] = NEVER_LOOPS;
    m->loop[s] = 0;
    m->st_tab[h] = s;
    if ((uint32_t)m->n_states * 2 > m->st_tab_mask + 1) {
        int rc = st_tab_rebuild(m, (m->st_tab_mask + 1) * 2);
        if (rc) return rc;
    }
    return s;
}

/* ---- expansion ------------------------------------------------------------------------------ */

static int push_work(oxg_machine *m, int32_t *n_work, int32_t v) {
    if (*n_work >= m->cap_work && grow32(&m->work, &m->cap_work, (int64_t)*n_work + 1)) return OXG_ERR_NOMEM;
    m->work[(*n_work)++] = v;
    return 0;
}

static int push_out(oxg_machine *m, int32_t v) {
    if (m->n_out >= m->cap_out && grow32(&m->out, &m->cap_out, (int64_t)m->n_out + 1)) return OXG_ERR_NOMEM;
    m->out[m->n_out++] = v;
    return 0;
}

/* Add to m->out every stack reachable from `node` by opening rules until a byte set is on top.
 * Nodes already expanded in this generation are skipped (same node, same result). */
static int expand(oxg_machine *m, int32_t node) {
    int32_t n_work = 0;
    int rc = push_work(m, &n_work, node);
    if (rc) return rc;
    while (n_work > 0) {
        int32_t x = m->work[--n_work];
        if (m->visit[x] == m->gen) continue;
        m->visit[x] = m->gen;
        if (x == 0) {
            if ((rc = push_out(m, 0))) return rc;
            continue;
        }
        int32_t p = m->node_pos[x];
        int32_t e = m->seq[p];
        if (e >= 0) {
            if ((rc = push_out(m, x))) return rc;
            continue;
        }
        int32_t r = -(e + 2);
        int32_t cont = m->node_parent[x];
        if (m->seq[p + 1] != OXG_END) {
            cont = intern_node(m, p + 1, cont);
            if (cont < 0) return cont;
        }
        for (int32_t i = m->alt_off[r + 1] - 1; i >= m->alt_off[r]; i--) {
            int32_t a = m->alts[i];
            int32_t y = cont;
            if (m->seq[a] != OXG_END) {
                y = intern_node(m, a, cont);
                if (y < 0) return y;
            }
            if ((rc = push_work(m, &n_work, y))) return rc;
        }
    }
    return 0;
}

static void next_gen(oxg_machine *m) {
    if (++m->gen == 0) {
        memset(m->visit, 0, (size_t)m->cap_nodes * sizeof(uint32_t));
        m->gen = 1;
    }
}

static int32_t compute_step(oxg_machine *m, int32_t state, uint8_t byte) {
    next_gen(m);
    m->n_out = 0;
    int64_t lo = m->st_off[state], hi = m->st_off[state + 1];
    for (int64_t i = lo; i < hi; i++) {
        int32_t x = m->st_data[i];
        if (x == 0) continue;
        int32_t p = m->node_pos[x];
        const uint8_t *bits = m->sets + 32 * (size_t)m->seq[p];
        if (!((bits[byte >> 3] >> (byte & 7)) & 1)) continue;
        int32_t base = m->node_parent[x];
        if (m->seq[p + 1] != OXG_END) {
            base = intern_node(m, p + 1, base);
            if (base < 0) return base;
        }
        int rc = expand(m, base);
        if (rc) return rc;
        /* the st_data array is not touched by expand, so lo/hi stay valid */
    }
    return intern_state(m);
}

/* ---- public --------------------------------------------------------------------------------- */

oxg_machine *oxg_new(const int32_t *seq, int32_t n_seq, const int32_t *alt_off, const int32_t *alts,
                     int32_t n_rules, const uint8_t *sets, int32_t n_sets) {
    if (!seq || !alt_off || n_seq < 1 || n_rules < 1 || n_sets < 0 || (n_sets > 0 && !sets)) return NULL;
    if (seq[n_seq - 1] != OXG_END || alt_off[0] != 0) return NULL;
    for (int32_t r = 0; r < n_rules; r++)
        if (alt_off[r + 1] < alt_off[r]) return NULL;
    int32_t n_alts = alt_off[n_rules];
    if (n_alts > 0 && !alts) return NULL;
    for (int32_t i = 0; i < n_alts; i++)
        if (alts[i] < 0 || alts[i] >= n_seq) return NULL;
    for (int32_t i = 0; i < n_seq; i++) {
        int32_t e = seq[i];
        if (e >= n_sets || (e < -1 && -(e + 2) >= n_rules)) return NULL;
    }
    oxg_machine *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->n_seq = n_seq;
    m->n_rules = n_rules;
    m->n_sets = n_sets;
    m->seq = malloc((size_t)n_seq * sizeof(int32_t));
    m->alt_off = malloc((size_t)(n_rules + 1) * sizeof(int32_t));
    m->alts = malloc((size_t)(n_alts + 1) * sizeof(int32_t));
    m->sets = malloc((size_t)n_sets * 32 + 1);
    if (!m->seq || !m->alt_off || !m->alts || !m->sets) { oxg_free(m); return NULL; }
    memcpy(m->seq, seq, (size_t)n_seq * sizeof(int32_t));
    memcpy(m->alt_off, alt_off, (size_t)(n_rules + 1) * sizeof(int32_t));
    if (n_alts) memcpy(m->alts, alts, (size_t)n_alts * sizeof(int32_t));
    if (n_sets) memcpy(m->sets, sets, (size_t)n_sets * 32);
    oxg_reset(m);
    if (!m->node_pos) { oxg_free(m); return NULL; }
    return m;
}

void oxg_reset(oxg_machine *m) {
    free(m->node_pos); free(m->node_parent); free(m->visit); free(m->node_tab);
    free(m->st_off); free(m->st_data); free(m->st_can_end); free(m->trans); free(m->st_tab);
    free(m->loop_known); free(m->loop);
    m->cap_nodes = 1024;
    m->node_pos = malloc(1024 * sizeof(int32_t));
    m->node_parent = malloc(1024 * sizeof(int32_t));
    m->visit = calloc(1024, sizeof(uint32_t));
    m->node_tab = malloc(2048 * sizeof(int32_t));
    m->cap_states = 256;
    m->st_off = malloc(257 * sizeof(int64_t));
    m->st_can_end = malloc(256);
    m->trans = malloc(256 * 256 * sizeof(int32_t));
    m->st_tab = malloc(512 * sizeof(int32_t));
    m->cap_st_data = 1024;
    m->st_data = malloc(1024 * sizeof(int32_t));
    m->loop_known = malloc(256 * sizeof(uint64_t));
    m->loop = malloc(256 * sizeof(uint64_t));
    if (!m->node_pos || !m->node_parent || !m->visit || !m->node_tab || !m->st_off || !m->st_can_end ||
        !m->trans || !m->st_tab || !m->st_data || !m->loop_known || !m->loop) {
        free(m->node_pos); free(m->node_parent); free(m->visit); free(m->node_tab);
        free(m->st_off); free(m->st_data); free(m->st_can_end); free(m->trans); free(m->st_tab);
        free(m->loop_known); free(m->loop);
        m->node_pos = NULL; m->node_parent = NULL; m->visit = NULL; m->node_tab = NULL;
        m->st_off = NULL; m->st_data = NULL; m->st_can_end = NULL; m->trans = NULL; m->st_tab = NULL;
        m->loop_known = NULL; m->loop = NULL;
        return;
    }
    memset(m->node_tab, 0xff, 2048 * sizeof(int32_t));
    m->node_tab_mask = 2047;
    memset(m->st_tab, 0xff, 512 * sizeof(int32_t));
    m->st_tab_mask = 511;
    memset(m->trans, 0xff, 256 * 256 * sizeof(int32_t));
    m->gen = 0;
    m->node_pos[0] = -1;
    m->node_parent[0] = -1;
    m->n_nodes = 1;
    /* state 0: the empty set, dead: every byte leads back to it */
    m->st_off[0] = 0;
    m->st_off[1] = 0;
    m->n_st_data = 0;
    m->st_can_end[0] = 0;
    m->loop_known[0] = ~(uint64_t)0;  /* the dead state is never walked from */
    m->loop[0] = 0;
    m->n_states = 1;
    for (int b = 0; b < 256; b++) m->trans[b] = OXG_DEAD;
    uint32_t h = hash_nodes(NULL, 0) & m->st_tab_mask;
    m->st_tab[h] = 0;
}

void oxg_free(oxg_machine *m) {
    if (!m) return;
    free(m->seq); free(m->alt_off); free(m->alts); free(m->sets);
    free(m->node_pos); free(m->node_parent); free(m->visit); free(m->node_tab);
    free(m->st_off); free(m->st_data); free(m->st_can_end); free(m->trans); free(m->st_tab);
    free(m->loop_known); free(m->loop);
    free(m->work); free(m->out); free(m->path);
    free(m);
}

static int valid_state(const oxg_machine *m, int32_t s) { return m && m->node_pos && s >= 0 && s < m->n_states; }

int32_t oxg_initial(oxg_machine *m, int32_t root) {
    if (!m || !m->node_pos || root < 0 || root >= m->n_rules) return OXG_ERR_ARG;
    next_gen(m);
    m->n_out = 0;
    for (int32_t i = m->alt_off[root]; i < m->alt_off[root + 1]; i++) {
        int32_t a = m->alts[i];
        int32_t x = 0;
        if (m->seq[a] != OXG_END) {
            x = intern_node(m, a, 0);
            if (x < 0) return x;
        }
        int rc = expand(m, x);
        if (rc) return rc;
    }
    return intern_state(m);
}

int32_t oxg_step(oxg_machine *m, int32_t state, uint8_t byte) {
    if (!valid_state(m, state)) return OXG_ERR_ARG;
    int32_t t = m->trans[(size_t)state * 256 + byte];
    if (t >= 0) return t;
    t = compute_step(m, state, byte);
    if (t >= 0) m->trans[(size_t)state * 256 + byte] = t;
    return t;
}

int32_t oxg_walk(oxg_machine *m, int32_t state, const uint8_t *bytes, int64_t n) {
    if (!valid_state(m, state) || n < 0 || (n > 0 && !bytes)) return OXG_ERR_ARG;
    for (int64_t i = 0; i < n && state != OXG_DEAD; i++) {
        int32_t t = m->trans[(size_t)state * 256 + bytes[i]];
        if (t < 0) {
            t = compute_step(m, state, bytes[i]);
            if (t < 0) return t;
            m->trans[(size_t)state * 256 + bytes[i]] = t;
        }
        state = t;
    }
    return state;
}

int oxg_can_end(const oxg_machine *m, int32_t state) {
    if (!valid_state(m, state)) return OXG_ERR_ARG;
    return m->st_can_end[state];
}

int32_t oxg_n_stacks(const oxg_machine *m, int32_t state) {
    if (!valid_state(m, state)) return OXG_ERR_ARG;
    return (int32_t)(m->st_off[state + 1] - m->st_off[state]);
}

int32_t oxg_n_states(const oxg_machine *m) { return m->n_states; }
int32_t oxg_n_nodes(const oxg_machine *m) { return m->n_nodes; }

int64_t oxg_export(const oxg_machine *m, int32_t state, int32_t *out, int64_t cap) {
    if (!valid_state(m, state) || cap < 0 || (cap > 0 && !out)) return OXG_ERR_ARG;
    int64_t k = 0;
    for (int64_t i = m->st_off[state]; i < m->st_off[state + 1]; i++) {
        int64_t len_at = k++;
        int32_t len = 0;
        for (int32_t x = m->st_data[i]; x != 0; x = m->node_parent[x]) {
            if (k < cap) out[k] = m->node_pos[x];
            k++;
            len++;
        }
        if (len_at < cap) out[len_at] = len;
    }
    return k;
}

int32_t oxg_import(oxg_machine *m, const int32_t *data, int64_t n) {
    if (!m || !m->node_pos || n < 0 || (n > 0 && !data)) return OXG_ERR_ARG;
    next_gen(m);
    m->n_out = 0;
    int64_t k = 0;
    while (k < n) {
        int32_t len = data[k++];
        if (len < 0 || len > n - k) return OXG_ERR_ARG;
        if (grow32(&m->path, &m->cap_path, len + 1)) return OXG_ERR_NOMEM;
        for (int32_t j = 0; j < len; j++) {
            int32_t p = data[k + j];
            if (p < 0 || p >= m->n_seq || m->seq[p] == OXG_END) return OXG_ERR_ARG;
            m->path[j] = p;
        }
        /* top of stack first: build from the bottom up */
        int32_t x = 0;
        for (int32_t j = len - 1; j >= 0; j--) {
            x = intern_node(m, m->path[j], x);
            if (x < 0) return x;
        }
        k += len;
        if (x != 0 && m->seq[m->node_pos[x]] >= 0) {
            if (push_out(m, x)) return OXG_ERR_NOMEM;
        } else {
            int rc = expand(m, x);
            if (rc) return rc;
        }
    }
    return intern_state(m);
}

/* ---- vocabulary masks ------------------------------------------------------------------------ */

int oxg_ascii_unit(uint8_t b) {
    if (b == '\t') return 1;
    if (b == '\n') return 2;
    if (b == '\r') return 3;
    if (b < 0x20) return 0;
    if (b == ' ') return 4;
    if (b >= '0' && b <= '9') return 5;
    if (b >= 'a' && b <= 'z') return 6;
    if (b >= 'A' && b <= 'Z') return 7;
    if (b == 0x7f) return 8;
    /* punctuation: 0x21-0x2F, 0x3A-0x40, 0x5B-0x60, 0x7B-0x7E -> 9..40 */
    if (b <= 0x2f) return 9 + (b - 0x21);
    if (b <= 0x40) return 24 + (b - 0x3a);
    if (b <= 0x60) return 31 + (b - 0x5b);
    return 37 + (b - 0x7b);
}

/* Well-formed UTF-8 (RFC 3629, table 3-7): lead byte range and the range of the second byte;
 * every later byte is 0x80-0xBF. */
typedef struct { uint8_t lead_lo, lead_hi, second_lo, second_hi, len; } utf8_row;
static const utf8_row UTF8_ROWS[] = {
    {0xC2, 0xDF, 0x80, 0xBF, 2},
    {0xE0, 0xE0, 0xA0, 0xBF, 3}, {0xE1, 0xEC, 0x80, 0xBF, 3}, {0xED, 0xED, 0x80, 0x9F, 3},
    {0xEE, 0xEF, 0x80, 0xBF, 3},
    {0xF0, 0xF0, 0x90, 0xBF, 4}, {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4},
};
#define N_UTF8_ROWS ((int)(sizeof(UTF8_ROWS) / sizeof(UTF8_ROWS[0])))

int oxg_unit(const uint8_t *bytes, int64_t n, int32_t *len) {
    uint8_t b = bytes[0];
    if (b < 0x80) { *len = 1; return oxg_ascii_unit(b); }
    int32_t want = b >= 0xC0 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF7 ? 4 : 1;
    *len = (int32_t)(want < n ? want : n);
    if (want == 1 || n < want) return OXG_UNIT_OTHER;
    for (int r = 0; r < N_UTF8_ROWS; r++) {
        const utf8_row *w = &UTF8_ROWS[r];
        if (b < w->lead_lo || b > w->lead_hi) continue;
        if (bytes[1] < w->second_lo || bytes[1] > w->second_hi) return OXG_UNIT_OTHER;
        for (int k = 2; k < want; k++)
            if (bytes[k] < 0x80 || bytes[k] > 0xBF) return OXG_UNIT_OTHER;
        return OXG_UNIT_UTF8_2 + (want - 2);
    }
    return OXG_UNIT_OTHER;
}

static inline int32_t step(oxg_machine *m, int32_t s, uint8_t b) {
    int32_t t = m->trans[(size_t)s * 256 + b];
    if (t < 0) {
        t = compute_step(m, s, b);
        if (t >= 0) m->trans[(size_t)s * 256 + b] = t;
    }
    return t;
}

/* 1 if every byte string of `depth` continuation bytes (0x80-0xBF) leads t to `home`, 0 if not,
 * <0 on error. The few distinct intermediate states make this cheap despite 64^depth strings. */
static int conts_lead_home(oxg_machine *m, int32_t t, int depth, int32_t home) {
    if (depth == 0) return t == home;
    if (t == OXG_DEAD) return 0;
    int32_t seen[8];
    int n_seen = 0;
    for (int b = 0x80; b <= 0xBF; b++) {
        int32_t u = step(m, t, (uint8_t)b);
        if (u < 0) return u;
        int known = 0;
        for (int k = 0; k < n_seen; k++) known |= seen[k] == u;
        if (known) continue;
        int rc = conts_lead_home(m, u, depth - 1, home);
        if (rc <= 0) return rc;
        if (n_seen < 8) seen[n_seen++] = u;
    }
    return 1;
}

/* 1 if every unit of kind `unit` leads state s back to s, 0 if not, <0 on error. */
static int unit_loops(oxg_machine *m, int32_t s, int unit) {
    if (unit < OXG_UNIT_UTF8_2) {
        for (int b = 0; b < 0x80; b++) {
            if (oxg_ascii_unit((uint8_t)b) != unit) continue;
            int32_t t = step(m, s, (uint8_t)b);
            if (t != s) return t < 0 ? t : 0;
        }
        return 1;
    }
    int len = unit - OXG_UNIT_UTF8_2 + 2;
    for (int r = 0; r < N_UTF8_ROWS; r++) {
        const utf8_row *w = &UTF8_ROWS[r];
        if (w->len != len) continue;
        for (int lead = w->lead_lo; lead <= w->lead_hi; lead++) {
            int32_t t = step(m, s, (uint8_t)lead);
            if (t <= 0) return t;
            for (int b = w->second_lo; b <= w->second_hi; b++) {
                int32_t u = step(m, t, (uint8_t)b);
                if (u <= 0) return u;
                int rc = conts_lead_home(m, u, len - 2, s);
                if (rc <= 0) return rc;
            }
        }
    }
    return 1;
}

/* 1 if state s loops on every unit kind in `units`, testing (once per state and kind) only the
 * kinds not yet known, and stopping at the first that fails. */
static int loops_on(oxg_machine *m, int32_t s, uint64_t units) {
    if (units & m->loop_known[s] & ~m->loop[s]) return 0;
    uint64_t todo = units & ~m->loop_known[s];
    while (todo) {
        int u = __builtin_ctzll(todo);
        todo &= todo - 1;
        int rc = unit_loops(m, s, u);
        if (rc < 0) return rc;
        m->loop_known[s] |= (uint64_t)1 << u;
        if (!rc) return 0;
        m->loop[s] |= (uint64_t)1 << u;
    }
    return 1;
}

static inline void mark(uint8_t *mask, const int32_t *toks, int32_t lo, int32_t hi) {
    for (int32_t j = lo; j < hi; j++) mask[toks[j]] = 1;
}

int64_t oxg_fill_mask(oxg_machine *m, int32_t state, const oxg_trie *trie, uint8_t *mask) {
    if (!valid_state(m, state) || !trie || !mask || trie->n_nodes < 0 || trie->max_depth < 0) return OXG_ERR_ARG;
    if (grow32(&m->path, &m->cap_path, (int64_t)trie->max_depth + 1)) return OXG_ERR_NOMEM;
    int32_t *states = m->path;
    states[0] = state;
    int64_t visited = 0;
    int32_t i = 0;
    const int32_t n = trie->n_nodes;
    const int32_t *tok_off = trie->tok_off;
    while (i < n) {
        int32_t d = trie->depth[i];
        int32_t s = states[d - 1];
        uint64_t below = trie->below ? trie->below[i] : 0;
        if (below) {
            int rc = loops_on(m, s, below);
            if (rc < 0) return rc;
            if (rc) {
                /* every token below node i comes back to s: allowed without a walk */
                mark(mask, trie->toks, tok_off[i + 1], tok_off[trie->end[i]]);
                int32_t t = step(m, s, trie->byte[i]);
                if (t < 0) return t;
                if (t != OXG_DEAD) mark(mask, trie->toks, tok_off[i], tok_off[i + 1]);
                visited++;
                i = trie->end[i];
                continue;
            }
        }
        int32_t t = step(m, s, trie->byte[i]);
        if (t < 0) return t;
        visited++;
        if (t == OXG_DEAD) {
            i = trie->end[i];
            continue;
        }
        states[d] = t;
        mark(mask, trie->toks, tok_off[i], tok_off[i + 1]);
        i++;
    }
    return visited;
}

void oxg_apply_mask(const float *src, const uint8_t *mask, float *dst, int64_t n) {
    const float ninf = -__builtin_inff();
    for (int64_t i = 0; i < n; i++) dst[i] = mask[i] ? src[i] : ninf;
}

/* ---- vocabulary order ----------------------------------------------------------------------- */

static int tok_cmp_from(const uint8_t *data, const int64_t *off, int32_t a, int32_t b, int64_t d) {
    int64_t la = off[a + 1] - off[a] - d, lb = off[b + 1] - off[b] - d;
    int c = memcmp(data + off[a] + d, data + off[b] + d, (size_t)(la < lb ? la : lb));
    return c ? c : (la > lb) - (la < lb);
}

/* MSD radix sort of ids[0..n) by their bytes from byte d on; tmp has room for n ids. */
static void radix_sort(const uint8_t *data, const int64_t *off, int32_t *ids, int32_t *tmp, int32_t n, int64_t d) {
    while (n > 1) {
        if (n < 24) {   /* insertion sort: few tokens left */
            for (int32_t i = 1; i < n; i++) {
                int32_t v = ids[i], j = i - 1;
                while (j >= 0 && tok_cmp_from(data, off, ids[j], v, d) > 0) { ids[j + 1] = ids[j]; j--; }
                ids[j + 1] = v;
            }
            return;
        }
        int32_t count[257] = {0};   /* bucket 0: tokens that end before byte d */
        for (int32_t i = 0; i < n; i++) {
            int32_t t = ids[i];
            count[off[t] + d < off[t + 1] ? 1 + data[off[t] + d] : 0]++;
        }
        int32_t start[258];
        start[0] = 0;
        for (int b = 0; b < 257; b++) start[b + 1] = start[b] + count[b];
        int32_t pos[257];
        memcpy(pos, start, sizeof(pos));
        for (int32_t i = 0; i < n; i++) {
            int32_t t = ids[i];
            tmp[pos[off[t] + d < off[t + 1] ? 1 + data[off[t] + d] : 0]++] = t;
        }
        memcpy(ids, tmp, (size_t)n * sizeof(int32_t));
        /* recurse into every byte bucket but the largest, which the loop continues with */
        int big = 1;
        for (int b = 2; b < 257; b++)
            if (count[b] > count[big]) big = b;
        for (int b = 1; b < 257; b++)
            if (b != big && count[b] > 1) radix_sort(data, off, ids + start[b], tmp, count[b], d + 1);
        ids += start[big];
        n = count[big];
        d++;
    }
}

void oxg_sort_tokens(const uint8_t *data, const int64_t *off, int32_t *ids, int32_t *tmp, int32_t n) {
    radix_sort(data, off, ids, tmp, n, 0);
}
