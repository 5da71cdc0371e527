/* Grammar matcher over bytes: pushdown stacks of a byte-level grammar, determinised lazily.
 *
 * The grammar (built in oxillama/grammar/gbnf.py) is flat arrays:
 *   seq[]      every alternative's elements, each alternative ended by OXG_END;
 *              element >= 0 is a byte-set id, <= -2 is a reference to rule -(e + 2).
 *   alt_off[]  rule r's alternatives start at seq offsets alts[alt_off[r] .. alt_off[r+1]).
 *   sets[]     32-byte bitmaps, bit b of set s = sets[32*s + b/8] >> (b%8) & 1.
 *
 * A parse *stack* is a chain of seq positions (top = the byte set to match next, below it the
 * positions to resume after each open rule), as in llama.cpp. Stacks are hash-consed nodes
 * (pos, parent), so equal stacks are equal ids; node 0 is the empty stack (grammar complete).
 * A matcher state is a sorted set of stacks, also interned (set 0 = no stacks = dead), and
 * the transition (state, byte) -> state is cached in a dense table, which turns the pushdown
 * machine into a lazily built DFA over the states actually visited.
 */
#ifndef OXG_GRAMMAR_H
#define OXG_GRAMMAR_H

#include <stdint.h>

#define OXG_END (-1)
#define OXG_DEAD 0

enum {
    OXG_ERR_NOMEM = -1,
    OXG_ERR_ARG = -2,      /* bad grammar arrays, bad state id or bad stack data */
    OXG_ERR_LIMIT = -3,    /* more stack nodes than OXG_MAX_NODES: grammar too ambiguous */
};

#define OXG_MAX_NODES (1 << 26)

typedef struct oxg_machine oxg_machine;

/* Copies the arrays after checking every index. NULL on bad input or no memory. */
oxg_machine *oxg_new(const int32_t *seq, int32_t n_seq, const int32_t *alt_off, const int32_t *alts,
                     int32_t n_rules, const uint8_t *sets, int32_t n_sets);
void oxg_free(oxg_machine *m);
/* Forget every interned stack and state (the grammar stays). Old state ids become invalid. */
void oxg_reset(oxg_machine *m);

/* State at the start of rule `root`, or a negative error. */
int32_t oxg_initial(oxg_machine *m, int32_t root);
/* Next state after one byte / a byte string, OXG_DEAD if rejected, or a negative error. */
int32_t oxg_step(oxg_machine *m, int32_t state, uint8_t byte);
int32_t oxg_walk(oxg_machine *m, int32_t state, const uint8_t *bytes, int64_t n);
/* 1 if the state holds the empty stack (the grammar may end here), 0 if not, <0 on a bad id. */
int oxg_can_end(const oxg_machine *m, int32_t state);
/* Number of stacks in a state, or <0 on a bad id. */
int32_t oxg_n_stacks(const oxg_machine *m, int32_t state);
int32_t oxg_n_states(const oxg_machine *m);
int32_t oxg_n_nodes(const oxg_machine *m);

/* Serialise a state: out = [len_0, top..bottom positions, len_1, ...]; returns the number of
 * int32 written or needed (call with cap 0 to size), or a negative error. */
int64_t oxg_export(const oxg_machine *m, int32_t state, int32_t *out, int64_t cap);
/* Inverse of oxg_export (positions are checked); returns a state id or a negative error. */
int32_t oxg_import(oxg_machine *m, const int32_t *data, int64_t n);

/* Vocabulary prefix trie in preorder: node i (depth[i] >= 1) is reached by byte[i] from the
 * nearest earlier node of depth depth[i]-1; its subtree ends before end[i]; the tokens whose
 * bytes end at node i are toks[tok_off[i] .. tok_off[i+1]), so the tokens strictly below node i
 * are toks[tok_off[i+1] .. tok_off[end[i]]).
 *
 * below[i] summarises the bytes of those tokens from node i on, as *units*: a unit starts at a
 * byte below 0x80 or 0x80-0xBF/0xF8-0xFF (one byte), or at a lead byte 0xC0-0xDF / 0xE0-0xEF /
 * 0xF0-0xF7 (two / three / four bytes, fewer if the token ends first). Unit starts depend only on
 * the bytes before them, so "node i's byte starts a unit" is a property of the node. Bit u of
 * below[i] is set if some token below i has a unit of kind u (OXG_UNIT_*) at or after node i's
 * byte; OXG_UNIT_UNALIGNED is set if node i's byte does not start a unit. Zero: no tokens below.
 * When every kind in below[i] leads a state s back to s for every byte string of that kind, all
 * tokens below node i are allowed from s without walking them (a JSON string's content). */
enum {
    /* ASCII kinds 0..40: each byte has one kind (oxg_ascii_unit) */
    OXG_UNIT_UTF8_2 = 41,       /* well-formed two-byte character (RFC 3629) */
    OXG_UNIT_UTF8_3 = 42,       /* well-formed three-byte character (no surrogates) */
    OXG_UNIT_UTF8_4 = 43,       /* well-formed four-byte character (up to U+10FFFF) */
    OXG_UNIT_OTHER = 44,        /* a stray continuation byte, 0xF8-0xFF, a malformed or cut sequence */
    OXG_UNIT_UNALIGNED = 63,    /* node i's byte is inside a unit */
};

typedef struct {
    int32_t n_nodes;
    int32_t max_depth;
    const uint8_t *byte;
    const int32_t *depth;
    const int32_t *end;
    const int32_t *tok_off;
    const int32_t *toks;
    const uint64_t *below;
} oxg_trie;

/* Kind (0..40) of an ASCII byte: the control bytes other than tab, LF and CR share one kind,
 * digits one, a-z one, A-Z one; tab, LF, CR, space, DEL and each punctuation byte are their own. */
int oxg_ascii_unit(uint8_t byte);
/* Kind of the unit starting at bytes[0] of a token with n bytes left, and its length in bytes. */
int oxg_unit(const uint8_t *bytes, int64_t n, int32_t *len);

/* mask[tok] = 1 for every trie token that the state accepts (mask is not cleared first).
 * Returns the number of trie nodes visited, or a negative error. */
int64_t oxg_fill_mask(oxg_machine *m, int32_t state, const oxg_trie *trie, uint8_t *mask);

/* Sort token ids by their bytes data[off[id] .. off[id+1]) (a prefix first); tmp holds n ids. */
void oxg_sort_tokens(const uint8_t *data, const int64_t *off, int32_t *ids, int32_t *tmp, int32_t n);

/* dst[i] = mask[i] ? src[i] : -inf. */
void oxg_apply_mask(const float *src, const uint8_t *mask, float *dst, int64_t n);

#endif
