# Quant kernels: dequantize, quantize, vec_dot, matvec, matmul. Validation happens here once;
# the C code below trusts the lengths it is given.
from libc.stdlib cimport malloc, free
from libc.stdint cimport uint8_t

import mmap as _mmap

from oxillama.errors import QuantError

_HUGE_PAGE = 2 << 20


def _weight_buffer(int64_t nbytes):
    """An uninitialized uint8 array of nbytes for a repacked weight copy, 64-byte aligned, and from 2 MB on in
    its own anonymous map starting at a 2 MB boundary with its whole 2 MB pages advised huge (Linux), so that
    the stream of ~1 GB a decode step reads takes a TLB walk per 2 MB instead of per 4 KB. A numpy array starts
    16 bytes into a cache line, so every 64-byte load of the sixteen-row kernels straddled two lines, and its
    huge pages are only the 2 MB runs that happen to lie inside it. The 1.7B Q4_K_M file's Q4_K matrices cycled,
    one row, 1 thread (Xeon, CPU time, interleaved): 64-byte aligned 1.45x, 2 MB aligned 1.83x (Q6_K 1.35x,
    1.64x). The map's slack pages (< 2 MB) are never touched, so they take no memory."""
    if nbytes < _HUGE_PAGE or not hasattr(_mmap, "MADV_HUGEPAGE") or not hasattr(_mmap, "MAP_ANONYMOUS"):
        arr = np.empty(nbytes + 64, np.uint8)
        off = (-arr.ctypes.data) % 64
        return arr[off:off + nbytes]
    m = _mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
    arr = np.frombuffer(m, np.uint8)
    off = (-arr.ctypes.data) % _HUGE_PAGE
    try:
        m.madvise(_mmap.MADV_HUGEPAGE, off, nbytes // _HUGE_PAGE * _HUGE_PAGE)
    except OSError:
        pass   # advice: without it the pages are 4 KB ones
    return arr[off:off + nbytes]


cdef const oxl_type_traits *_traits(const oxl_kernel_table *k, int qtype) except NULL:
    if qtype < 0 or qtype >= OXL_TYPE_COUNT or k.type[qtype].name == NULL:
        raise QuantError(f"unknown quant type id {qtype}")
    return &k.type[qtype]


cdef int64_t _nbytes(const oxl_type_traits *t, int64_t n) except -1:
    if n < 0:
        raise QuantError(f"element count must be >= 0, got {n}")
    if n % t.blck_size:
        raise QuantError(f"{t.name.decode()}: element count {n} is not a multiple of the block size {t.blck_size}")
    return n // t.blck_size * <int64_t>t.type_size


def row_size(int qtype, int64_t n):
    """Bytes for n values of qtype."""
    return _nbytes(_traits(oxl_kernels(), qtype), n)


def dequantize(const uint8_t[::1] data, int qtype, int64_t n, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    cdef int64_t need = _nbytes(t, n)
    if data.shape[0] != need:
        raise QuantError(f"{t.name.decode()}: {n} values need {need} bytes, got {data.shape[0]}")
    if t.to_float == NULL:
        raise QuantError(f"dequantize is not implemented for {t.name.decode()}")
    out = bytearray(n * 4)
    cdef float[::1] y = memoryview(out).cast("B").cast("f")
    if n:
        with nogil:
            t.to_float(&data[0], &y[0], n)
    return out


def quantize(const float[::1] x, int qtype, bint reference=True, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    cdef int64_t n = x.shape[0]
    cdef int64_t need = _nbytes(t, n)
    cdef oxl_from_float_fn fn = t.from_float_ref if reference else t.from_float
    if fn == NULL:
        raise QuantError(f"quantize is not implemented for {t.name.decode()}")
    out = bytearray(need)
    cdef uint8_t[::1] y = out
    if n:
        with nogil:
            fn(&x[0], &y[0], n)
    return out


def can_quantize(int qtype, bint with_weights=False):
    """Whether quantize_rows can write qtype."""
    return 0 <= qtype < OXL_TYPE_COUNT and oxl_can_quantize_chunk(qtype, with_weights) != 0


def can_dequantize(int qtype):
    cdef const oxl_kernel_table *k = oxl_kernels()
    return 0 <= qtype < OXL_TYPE_COUNT and k.type[qtype].name != NULL and k.type[qtype].to_float != NULL


def quantize_rows(const float[::1] x, int qtype, int64_t nrow, int64_t n_per_row, weights=None):
    """nrow rows of n_per_row values quantized as a model quantizer does (ggml's quantize_<type>),
    with optional importance weights (n_per_row float32 values shared by the rows); returns bytes."""
    cdef const oxl_type_traits *t = _traits(oxl_kernels(), qtype)
    if nrow < 0 or n_per_row <= 0 or x.shape[0] != nrow * n_per_row:
        raise QuantError(f"quantize_rows: {x.shape[0]} values are not {nrow} rows of {n_per_row}")
    cdef int64_t row = _nbytes(t, n_per_row)
    cdef const float[::1] w
    cdef const float *wp = NULL
    if weights is not None:
        w = weights
        if w.shape[0] != n_per_row:
            raise QuantError(f"quantize_rows: {w.shape[0]} importance weights for rows of {n_per_row}")
        wp = &w[0]
    if not oxl_can_quantize_chunk(qtype, wp != NULL):
        raise QuantError(f"quantize_rows: cannot quantize to {t.name.decode()}")
    out = bytearray(row * nrow)
    cdef uint8_t[::1] y = out
    cdef int64_t got = 0
    if nrow:
        with nogil:
            got = oxl_quantize_chunk(qtype, &x[0], &y[0], nrow, n_per_row, wp)
        if got != row * nrow:
            raise QuantError(f"quantize_rows: {t.name.decode()} failed ({got})")
    return out


def vec_dot(int qtype, const uint8_t[::1] w, const uint8_t[::1] act, int64_t n, tier=None):
    """dot(weight row, activations) with the tier's kernel; act is already of the vec_dot type."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    cdef const oxl_type_traits *ta = _traits(k, t.vec_dot_type)
    if t.vec_dot == NULL:
        raise QuantError(f"vec_dot is not implemented for {t.name.decode()}")
    if n <= 0:
        raise QuantError("vec_dot needs n > 0")
    if w.shape[0] != _nbytes(t, n) or act.shape[0] != _nbytes(ta, n):
        raise QuantError(f"vec_dot {t.name.decode()}: byte lengths {w.shape[0]}/{act.shape[0]} do not match n={n}")
    cdef float s = 0
    with nogil:
        t.vec_dot(<int>n, &s, &w[0], &act[0])
    return s


def vec_dot_type(int qtype):
    return _traits(oxl_kernels(), qtype).vec_dot_type


def _check_rc(int rc, what):
    if rc != 0:
        raise QuantError(f"{what} failed with code {rc}")


def matvec(const uint8_t[::1] w, int qtype, int64_t rows, int64_t cols, const float[::1] x,
           float[::1] y, int n_threads=1, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    if t.vec_dot == NULL:
        raise QuantError(f"matvec is not implemented for {t.name.decode()}")
    if rows <= 0 or cols <= 0:
        raise QuantError(f"matvec needs rows, cols > 0, got {rows}x{cols}")
    if w.shape[0] != _nbytes(t, cols) * rows:
        raise QuantError(f"{t.name.decode()} {rows}x{cols} needs {_nbytes(t, cols) * rows} bytes, got {w.shape[0]}")
    if x.shape[0] != cols or y.shape[0] != rows:
        raise QuantError(f"matvec shapes: x has {x.shape[0]} (want {cols}), y has {y.shape[0]} (want {rows})")
    cdef int64_t scratch_n = oxl_act_size(k, qtype, cols, 1)
    cdef void *scratch = malloc(max(scratch_n, 1))
    cdef int rc
    if scratch == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = oxl_matvec(k, qtype, &w[0], rows, cols, &x[0], &y[0], scratch, n_threads)
    finally:
        free(scratch)
    _check_rc(rc, "matvec")


def matmul(const uint8_t[::1] w, int qtype, int64_t rows, int64_t cols, const float[:, ::1] X,
           float[:, ::1] Y, int n_threads=1, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    if t.vec_dot == NULL:
        raise QuantError(f"matmul is not implemented for {t.name.decode()}")
    if rows <= 0 or cols <= 0:
        raise QuantError(f"matmul needs rows, cols > 0, got {rows}x{cols}")
    if w.shape[0] != _nbytes(t, cols) * rows:
        raise QuantError(f"{t.name.decode()} {rows}x{cols} needs {_nbytes(t, cols) * rows} bytes, got {w.shape[0]}")
    cdef int64_t n = X.shape[0]
    if X.shape[1] != cols or Y.shape[0] != n or Y.shape[1] != rows:
        raise QuantError(f"matmul shapes: X {X.shape[0]}x{X.shape[1]}, Y {Y.shape[0]}x{Y.shape[1]}, W {rows}x{cols}")
    if n == 0:
        return
    cdef int64_t scratch_n = oxl_act_size(k, qtype, cols, n)
    cdef void *scratch = malloc(max(scratch_n, 1))
    cdef int rc
    if scratch == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = oxl_matmul(k, qtype, &w[0], rows, cols, &X[0, 0], n, &Y[0, 0], scratch, n_threads)
    finally:
        free(scratch)
    _check_rc(rc, "matmul")


def has_gemm(int qtype, tier=None):
    """Whether the tier has a multi-row kernel for qtype (else matmul runs vec_dot per output)."""
    return _traits(_table(tier), qtype).gemm != NULL


def repacked_row_size(int qtype, int64_t cols, tier=None):
    """Bytes of one row of `cols` values in the tier's repacked layout for qtype, or -1 if it has none."""
    cdef const oxl_kernel_table *k = _table(tier)
    _traits(k, qtype)
    return oxl_repacked_row_size(k, qtype, cols)


def repack(const uint8_t[::1] w, int qtype, int64_t rows, int64_t cols, int n_threads=1, tier=None):
    """The rows of w (file layout) in the tier's repacked layout, as a new uint8 array; None where the tier
    has no layout for the type and width."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    cdef int64_t prow = oxl_repacked_row_size(k, qtype, cols)
    cdef uint8_t[::1] out
    cdef int rc
    if prow < 0:
        return None
    if rows < 0 or w.shape[0] != _nbytes(t, cols) * rows:
        raise QuantError(f"repack {t.name.decode()}: {w.shape[0]} bytes do not hold {rows} rows of {cols} values")
    arr = _weight_buffer(max(prow * rows, 1))
    out = arr
    with nogil:
        rc = oxl_repack(k, qtype, &w[0], rows, cols, &out[0], n_threads)
    _check_rc(rc, "repack")
    return arr[:prow * rows]


def gemm_range(const uint8_t[::1] w, int qtype, int64_t rows, int64_t cols, const uint8_t[::1] xq, int64_t n,
               float[:, ::1] Y, int64_t r0, int64_t r1, tier=None, const uint8_t[::1] packed=None):
    """Y[j, r] = dot(W[r], Xq[j]) for r in [r0, r1) through oxl_gemm_range, the entry the forward pass
    uses for n > 1 on its own row ranges; xq holds n activation rows already of the vec_dot type.
    packed: w's rows as repack() gives them, read instead of w through oxl_gemm_packed_range (False
    is returned if that kernel could not run, or would not: a repacked range starts at a multiple of
    OXL_REPACK_ROW_ALIGN rows and ends at one or at the last row, as the forward pass's ranges do)."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef const oxl_type_traits *t = _traits(k, qtype)
    cdef const oxl_type_traits *ta = _traits(k, t.vec_dot_type)
    if t.vec_dot == NULL:
        raise QuantError(f"gemm_range is not implemented for {t.name.decode()}")
    if rows <= 0 or cols <= 0 or n <= 0 or not 0 <= r0 <= r1 <= rows:
        raise QuantError(f"gemm_range needs rows, cols, n > 0 and 0 <= r0 <= r1 <= rows, got "
                         f"{rows}x{cols}, n={n}, [{r0}, {r1})")
    if w.shape[0] != _nbytes(t, cols) * rows or xq.shape[0] != _nbytes(ta, cols) * n:
        raise QuantError(f"gemm_range {t.name.decode()}: byte lengths {w.shape[0]}/{xq.shape[0]} do not match "
                         f"{rows}x{cols}, n={n}")
    if Y.shape[0] != n or Y.shape[1] != rows:
        raise QuantError(f"gemm_range: Y is {Y.shape[0]}x{Y.shape[1]}, want {n}x{rows}")
    cdef int rc = 0
    if packed is not None:
        if packed.shape[0] != oxl_repacked_row_size(k, qtype, cols) * rows:
            raise QuantError(f"gemm_range: {packed.shape[0]} repacked bytes do not hold {rows}x{cols}")
        if r0 % OXL_REPACK_ROW_ALIGN or (r1 % OXL_REPACK_ROW_ALIGN and r1 != rows):
            return False
        with nogil:
            rc = oxl_gemm_packed_range(k, qtype, &packed[0], cols, &xq[0], n, &Y[0, 0], rows, r0, r1)
        return rc == 0
    with nogil:
        oxl_gemm_range(k, qtype, &w[0], cols, &xq[0], n, &Y[0, 0], rows, r0, r1)
    return True
