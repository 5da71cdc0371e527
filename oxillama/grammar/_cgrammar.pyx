# cython: language_level=3
"""Cython wrappers of csrc/grammar: the byte-level grammar machine and the vocabulary trie.

Private: oxillama.grammar.matcher and oxillama.grammar.grammar are the public face.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memset

from oxillama.errors import GrammarError


cdef extern from "grammar/grammar.h":
    ctypedef struct oxg_machine:
        pass

    ctypedef struct oxg_trie:
        int32_t n_nodes
        int32_t max_depth
        const uint8_t *byte
        const int32_t *depth
        const int32_t *end
        const int32_t *tok_off
        const int32_t *toks
        const uint64_t *below

    int OXG_UNIT_UNALIGNED
    int oxg_unit(const uint8_t *bytes, int64_t n, int32_t *len)
    int OXG_ERR_NOMEM, OXG_ERR_ARG, OXG_ERR_LIMIT, OXG_DEAD
    oxg_machine *oxg_new(const int32_t *seq, int32_t n_seq, const int32_t *alt_off, const int32_t *alts,
                         int32_t n_rules, const uint8_t *sets, int32_t n_sets)
    void oxg_free(oxg_machine *m)
    void oxg_reset(oxg_machine *m)
    int32_t oxg_initial(oxg_machine *m, int32_t root)
    int32_t oxg_step(oxg_machine *m, int32_t state, uint8_t byte)
    int32_t oxg_walk(oxg_machine *m, int32_t state, const uint8_t *bytes, int64_t n)
    int oxg_can_end(const oxg_machine *m, int32_t state)
    int32_t oxg_n_stacks(const oxg_machine *m, int32_t state)
    int32_t oxg_n_states(const oxg_machine *m)
    int32_t oxg_n_nodes(const oxg_machine *m)
    int64_t oxg_export(const oxg_machine *m, int32_t state, int32_t *out, int64_t cap)
    int32_t oxg_import(oxg_machine *m, const int32_t *data, int64_t n)
    int64_t oxg_fill_mask(oxg_machine *m, int32_t state, const oxg_trie *trie, uint8_t *mask)
    void oxg_apply_mask(const float *src, const uint8_t *mask, float *dst, int64_t n) nogil
    void oxg_sort_tokens(const uint8_t *data, const int64_t *off, int32_t *ids, int32_t *tmp, int32_t n)


cdef int64_t _check(int64_t rc) except -1:
    if rc >= 0:
        return rc
    if rc == OXG_ERR_NOMEM:
        raise MemoryError("grammar matcher out of memory")
    if rc == OXG_ERR_LIMIT:
        raise GrammarError("grammar too ambiguous: the matcher's parse stacks passed their limit")
    raise GrammarError("invalid grammar state")


cdef class Vocab:
    """Token bytes of a vocabulary and their prefix trie (preorder arrays, see grammar.h).

    Tokens listed in `skip` (end-of-generation ids) and tokens with no bytes are left out of the
    trie, so the grammar never allows them through the trie.
    """
    cdef readonly int32_t n_vocab
    cdef readonly object byte, depth, end, tok_off, toks, below, tok_bytes_off, tok_bytes
    cdef readonly tuple skip
    cdef oxg_trie trie
    cdef object __weakref__
    cdef const int64_t *_off
    cdef const uint8_t *_data

    def __init__(self, vocab_bytes, skip=()):
        cdef Py_ssize_t n = len(vocab_bytes)
        if n <= 0 or n >= 2 ** 31 - 1:
            raise GrammarError(f"vocabulary size {n} out of range")
        for i, b in enumerate(vocab_bytes):
            if not isinstance(b, (bytes, bytearray)):
                raise GrammarError(f"vocab_bytes[{i}] must be bytes, not {type(b).__name__}")
        self.n_vocab = <int32_t>n
        lengths = np.fromiter(map(len, vocab_bytes), dtype=np.int64, count=n)
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        self.tok_bytes_off = off
        self.tok_bytes = np.frombuffer(b"".join(vocab_bytes) + b"\0", dtype=np.uint8)
        skip_set = set(int(t) for t in skip)
        self.skip = tuple(sorted(skip_set))
        keep = lengths > 0
        keep[[t for t in skip_set if 0 <= t < n]] = False
        order = np.flatnonzero(keep).astype(np.int32)
        tmp = np.empty_like(order)
        cdef int32_t[::1] order_v = order, tmp_v = tmp
        cdef const int64_t[::1] off_s = off
        cdef const uint8_t[::1] data_s = self.tok_bytes
        if order.shape[0] > 1:
            oxg_sort_tokens(&data_s[0], &off_s[0], &order_v[0], &tmp_v[0], <int32_t>order.shape[0])
        self._build(order)
        cdef const int64_t[::1] off_v = self.tok_bytes_off
        cdef const uint8_t[::1] data_v = self.tok_bytes
        self._off = &off_v[0]
        self._data = &data_v[0]

    cdef _build(self, order_a):
        cdef const int32_t[::1] order = order_a
        cdef const int64_t[::1] off = self.tok_bytes_off
        cdef const uint8_t[::1] data = self.tok_bytes
        cdef Py_ssize_t n_tok = order.shape[0], total = 0, i, j, k
        for i in range(n_tok):
            total += off[order[i] + 1] - off[order[i]]
        byte_a = np.zeros(total + 1, dtype=np.uint8)
        depth_a = np.zeros(total + 1, dtype=np.int32)
        end_a = np.zeros(total + 1, dtype=np.int32)
        tok_node = np.zeros(n_tok, dtype=np.int32)
        cdef uint8_t[::1] byte = byte_a
        cdef int32_t[::1] depth = depth_a, end = end_a, tnode = tok_node
        cdef int32_t max_depth = 0
        for i in range(n_tok):
            max_depth = max(max_depth, <int32_t>(off[order[i] + 1] - off[order[i]]))
        open_a = np.zeros(max_depth + 2, dtype=np.int32)
        below_a = np.zeros(total + 1, dtype=np.uint64)
        suffix_a = np.zeros(max_depth + 2, dtype=np.uint64)
        cdef int32_t[::1] open_ = open_a
        cdef uint64_t[::1] below = below_a, suffix = suffix_a
        cdef uint64_t unaligned = (<uint64_t>1) << OXG_UNIT_UNALIGNED
        cdef int32_t n_open = 0, n_nodes = 0, lcp, length, prev = -1, tok, unit_len, unit
        cdef int64_t a, b
        for i in range(n_tok):
            tok = order[i]
            a = off[tok]
            length = <int32_t>(off[tok + 1] - a)
            # suffix[k]: kinds of the units starting at byte k or later, plus the unaligned bit if
            # byte k is inside a unit (see oxg_trie in grammar.h)
            suffix[length] = 0
            k = 0
            while k < length:
                unit = oxg_unit(&data[a + k], length - k, &unit_len)
                suffix[k] = (<uint64_t>1) << unit
                for j in range(k + 1, k + unit_len):
                    suffix[j] = unaligned
                k += unit_len
            for k in range(length - 1, -1, -1):
                suffix[k] |= suffix[k + 1] & ~unaligned
            lcp = 0
            if prev >= 0:
                b = off[prev]
                while lcp < length and lcp < off[prev + 1] - b and data[a + lcp] == data[b + lcp]:
                    lcp += 1
            # nodes deeper than the common prefix are finished
            while n_open > lcp:
                n_open -= 1
                end[open_[n_open]] = n_nodes
            for k in range(lcp, length):
                byte[n_nodes] = data[a + k]
                depth[n_nodes] = k + 1
                open_[n_open] = n_nodes
                n_open += 1
                n_nodes += 1
            tnode[i] = open_[length - 1]
            for k in range(length - 1):   # the nodes this token passes below
                below[open_[k]] |= suffix[k]
            prev = tok
        while n_open > 0:
            n_open -= 1
            end[open_[n_open]] = n_nodes
        tok_off_a = np.zeros(n_nodes + 1, dtype=np.int32)
        cdef int32_t[::1] tok_off = tok_off_a
        for i in range(n_tok):
            tok_off[tnode[i] + 1] += 1
        for j in range(n_nodes):
            tok_off[j + 1] += tok_off[j]
        self.byte = byte_a
        self.depth = depth_a
        self.end = end_a
        self.tok_off = tok_off_a
        self.below = below_a
        toks_a = np.append(order_a, 0).astype(np.int32)  # tokens sorted by bytes attach in preorder
        self.toks = toks_a
        cdef const int32_t[::1] toks = toks_a
        self.trie.n_nodes = n_nodes
        self.trie.max_depth = max_depth
        self.trie.byte = &byte[0]
        self.trie.depth = &depth[0]
        self.trie.end = &end[0]
        self.trie.tok_off = &tok_off[0]
        self.trie.toks = &toks[0]
        self.trie.below = &below[0]

    @property
    def n_trie_nodes(self):
        return self.trie.n_nodes

    def token_bytes(self, int32_t tok):
        if tok < 0 or tok >= self.n_vocab:
            raise GrammarError(f"token id {tok} out of range for a vocabulary of {self.n_vocab}")
        return bytes(self.tok_bytes[self._off[tok]:self._off[tok + 1]])


cdef class Machine:
    """One grammar's lazily determinised byte machine. States are small ints (0 = dead)."""
    cdef oxg_machine *m

    def __cinit__(self, seq, alt_off, alts, bytes sets):
        cdef int32_t[::1] s = np.ascontiguousarray(seq, dtype=np.int32)
        cdef int32_t[::1] ao = np.ascontiguousarray(alt_off, dtype=np.int32)
        cdef int32_t[::1] al = np.ascontiguousarray(np.append(np.asarray(alts, dtype=np.int32), 0), dtype=np.int32)
        if s.shape[0] == 0 or ao.shape[0] < 2 or len(sets) % 32:
            raise GrammarError("empty or malformed grammar arrays")
        self.m = oxg_new(&s[0], <int32_t>s.shape[0], &ao[0], &al[0], <int32_t>(ao.shape[0] - 1),
                         <const uint8_t *>sets, <int32_t>(len(sets) // 32))
        if self.m == NULL:
            raise GrammarError("malformed grammar arrays (or out of memory)")

    def __dealloc__(self):
        oxg_free(self.m)

    def reset(self):
        oxg_reset(self.m)
        if oxg_n_states(self.m) < 1:
            raise MemoryError("grammar matcher out of memory")

    def initial(self, int32_t root):
        return <int32_t>_check(oxg_initial(self.m, root))

    def walk(self, int32_t state, const uint8_t[::1] data):
        if data.shape[0] == 0:
            return <int32_t>_check(oxg_walk(self.m, state, NULL, 0))
        return <int32_t>_check(oxg_walk(self.m, state, &data[0], data.shape[0]))

    def can_end(self, int32_t state):
        return bool(_check(oxg_can_end(self.m, state)))

    def n_stacks(self, int32_t state):
        return <int32_t>_check(oxg_n_stacks(self.m, state))

    @property
    def n_states(self):
        return oxg_n_states(self.m)

    @property
    def n_nodes(self):
        return oxg_n_nodes(self.m)

    def export(self, int32_t state):
        """The state's stacks, each a list of seq positions from top to bottom."""
        cdef int64_t n = _check(oxg_export(self.m, state, NULL, 0))
        buf = np.zeros(max(n, 1), dtype=np.int32)
        cdef int32_t[::1] b = buf
        _check(oxg_export(self.m, state, &b[0], n))
        out, k = [], 0
        flat = buf.tolist()
        while k < n:
            ln = flat[k]
            out.append(flat[k + 1:k + 1 + ln])
            k += 1 + ln
        return out

    def import_(self, stacks):
        flat = []
        for st in stacks:
            flat.append(len(st))
            for p in st:
                p = int(p)
                if not 0 <= p < 2 ** 31 - 1:
                    raise GrammarError(f"grammar state position {p} out of range")
                flat.append(p)
        buf = np.asarray(flat + [0], dtype=np.int32)
        cdef int32_t[::1] b = buf
        return <int32_t>_check(oxg_import(self.m, &b[0], len(flat)))

    def token_allowed(self, int32_t state, Vocab vocab, int64_t tok):
        """The state after the token's bytes, 0 if the grammar rejects them (empty tokens: 0)."""
        if tok < 0 or tok >= vocab.n_vocab:
            raise GrammarError(f"token id {tok} out of range for a vocabulary of {vocab.n_vocab}")
        cdef int64_t a = vocab._off[tok], b = vocab._off[tok + 1]
        if a == b:
            return 0
        return <int32_t>_check(oxg_walk(self.m, state, vocab._data + a, b - a))

    def fill_mask(self, int32_t state, Vocab vocab, mask, bint skip_loops=True):
        """mask[t] = True for every trie token the state accepts, False elsewhere; returns the
        number of trie nodes visited. skip_loops=False walks every subtree the state does not
        reject (the reference the tests hold the faster walk to)."""
        if mask.ndim != 1 or mask.shape[0] != vocab.n_vocab or mask.dtype.itemsize != 1 \
                or mask.dtype.kind not in "bu" or not mask.flags.c_contiguous or not mask.flags.writeable:
            raise GrammarError(f"mask must be a writable contiguous bool array of shape ({vocab.n_vocab},), "
                               f"got {mask.dtype} {tuple(mask.shape)}")
        cdef uint8_t[::1] mv = mask.view(np.uint8)
        memset(&mv[0], 0, vocab.n_vocab)
        cdef oxg_trie trie = vocab.trie
        if not skip_loops:
            trie.below = NULL
        return _check(oxg_fill_mask(self.m, state, &trie, &mv[0]))


def apply_mask_to_logits(logits, mask, out=None):
    """out[i] = logits[i] where mask[i], else -inf, for float32 logits; out=None: in place."""
    cdef const float[::1] src = logits
    cdef float[::1] dst = logits if out is None else out
    cdef const uint8_t[::1] mk = mask.view(np.uint8)
    if src.shape[0] != mk.shape[0] or dst.shape[0] != mk.shape[0]:
        raise GrammarError(f"logits length {src.shape[0]} differs from the vocabulary size {mk.shape[0]}")
    if mk.shape[0]:
        with nogil:
            oxg_apply_mask(&src[0], &mk[0], &dst[0], mk.shape[0])
