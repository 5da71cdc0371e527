# cython: language_level=3
"""Cython wrapper of csrc/tokenizer/spm: llama.cpp's SentencePiece-style BPE in C.

Private: oxillama.tokenizer.Tokenizer uses it for `tokenizer.ggml.model == "llama"` vocabularies.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t

from oxillama.errors import TokenizerError


cdef extern from "tokenizer/spm.h" nogil:
    ctypedef struct oxl_spm:
        pass
    int64_t OXL_SPM_ERR_NOMEM
    int64_t OXL_SPM_MAX_TEXT
    oxl_spm *oxl_spm_new(const uint8_t *data, int64_t data_len, const int64_t *offsets, int32_t n_vocab,
                         const float *scores, int byte_fallback, int32_t unk_id)
    void oxl_spm_free(oxl_spm *s)
    int32_t oxl_spm_lookup(const oxl_spm *s, const uint8_t *bytes, int64_t n)
    int64_t oxl_spm_encode(const oxl_spm *s, const uint8_t *text, int64_t len, int32_t *out, int64_t cap)


cdef class SpmModel:
    """Token texts (one UTF-8 buffer cut at int64 offsets), float32 scores; read-only once built."""
    cdef oxl_spm *_s
    cdef bytes _data
    cdef object _offsets
    cdef object _scores
    cdef bint _byte_fallback
    cdef int _unk_id
    cdef readonly int32_t n_vocab

    def __cinit__(self, bytes data, offsets, scores, bint byte_fallback, int unk_id=-1):
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        scores = np.ascontiguousarray(scores, dtype=np.float32)
        if offsets.ndim != 1 or offsets.size < 2:
            raise TokenizerError("SPM vocabulary: offsets must be a 1-d array of n_vocab + 1 entries")
        n = offsets.size - 1
        if scores.shape != (n,):
            raise TokenizerError(f"SPM vocabulary: {scores.size} scores for {n} tokens")
        if n > 2**31 - 1:
            raise TokenizerError(f"SPM vocabulary of {n} tokens is too large")
        if not -1 <= unk_id < n:
            raise TokenizerError(f"SPM vocabulary: unknown-token id {unk_id} out of range [0, {n})")
        self._data, self._offsets, self._scores, self.n_vocab = data, offsets, scores, n
        self._byte_fallback, self._unk_id = byte_fallback, unk_id
        cdef const int64_t[::1] off = offsets
        cdef const float[::1] sc = scores
        self._s = oxl_spm_new(<const uint8_t *>self._data, len(data), &off[0], <int32_t>n, &sc[0], byte_fallback,
                              unk_id)
        if self._s == NULL:
            raise TokenizerError("SPM vocabulary: offsets do not cut the token buffer (or out of memory)")

    def __reduce__(self):
        return SpmModel, (self._data, self._offsets, self._scores, self._byte_fallback, self._unk_id)

    def __dealloc__(self):
        oxl_spm_free(self._s)

    def lookup(self, bytes text) -> int:
        """The id of the token with exactly these bytes (the last one if repeated), or -1."""
        return oxl_spm_lookup(self._s, <const uint8_t *>text, len(text))

    def encode(self, bytes text) -> list:
        """Token ids of UTF-8 `text` (spaces already escaped to U+2581)."""
        cdef int64_t n = len(text), got
        cdef const uint8_t *p = <const uint8_t *>text
        if n == 0:
            return []
        if n > OXL_SPM_MAX_TEXT:
            raise TokenizerError(f"a text fragment of {n} bytes is longer than the SPM encoder takes "
                                 f"({OXL_SPM_MAX_TEXT}); split it")
        cdef int32_t[::1] out = np.empty(n, dtype=np.int32)   # never more ids than bytes
        with nogil:
            got = oxl_spm_encode(self._s, p, n, &out[0], n)
        if got == OXL_SPM_ERR_NOMEM:
            raise MemoryError("SPM encode")
        if got < 0 or got > n:
            raise TokenizerError(f"SPM encode failed ({got})")
        return np.asarray(out[:got]).tolist()
