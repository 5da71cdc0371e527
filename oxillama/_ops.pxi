# Row ops of a tier's table, one call per row, for tests and for users who want the kernels alone.
from oxillama.errors import InvalidArgumentError


def _same_len(name, *arrays):
    n = arrays[0].shape[0]
    for a in arrays[1:]:
        if a is not None and a.shape[0] != n:
            raise InvalidArgumentError(f"{name}: arrays differ in length")
    if n <= 0:
        raise InvalidArgumentError(f"{name}: empty input")
    return n


def op_rms_norm(const float[::1] x, const float[::1] w, float eps, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("rms_norm", x, w)
    out = np.empty(n, dtype=np.float32)
    cdef float[::1] y = out
    k.ops.rms_norm(&x[0], &w[0] if w is not None else NULL, &y[0], n, eps)
    return out


def op_layer_norm(const float[::1] x, const float[::1] w, const float[::1] b, float eps, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("layer_norm", x, w, b)
    out = np.empty(n, dtype=np.float32)
    cdef float[::1] y = out
    k.ops.layer_norm(&x[0], &w[0] if w is not None else NULL, &b[0] if b is not None else NULL, &y[0], n, eps)
    return out


def op_softmax(const float[::1] x, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("softmax", x)
    out = np.array(x, dtype=np.float32)
    cdef float[::1] y = out
    k.ops.softmax(&y[0], n)
    return out


def op_gated_act(str act, const float[::1] g, const float[::1] u, tier=None):
    """act(g) * u for act in silu, gelu_tanh, gelu_erf (u may be None for the gelus)."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len(act, g, u)
    out = np.empty(n, dtype=np.float32)
    cdef float[::1] y = out
    cdef const float *up = &u[0] if u is not None else NULL
    if act == "silu":
        if up == NULL:
            raise InvalidArgumentError("silu_mul needs u")
        k.ops.silu_mul(&g[0], up, &y[0], n)
    elif act == "gelu_tanh":
        k.ops.gelu_mul(&g[0], up, &y[0], n)
    elif act == "gelu_erf":
        k.ops.gelu_erf_mul(&g[0], up, &y[0], n)
    else:
        raise InvalidArgumentError(f"unknown activation {act!r}")
    return out


def op_dot_f16(const float[::1] x, const uint16_t[::1] y, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("dot_f16", x, y)
    return k.ops.dot_f16(&x[0], &y[0], n)


def op_axpy_f16(float[::1] y, float a, const uint16_t[::1] x, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("axpy_f16", y, x)
    k.ops.axpy_f16(&y[0], a, &x[0], n)


def op_fp32_to_fp16(const float[::1] x, tier=None):
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = _same_len("fp32_to_fp16", x)
    out = np.empty(n, dtype=np.float16)
    cdef uint16_t[::1] y = out.view(np.uint16)
    k.ops.fp32_to_fp16(&x[0], &y[0], n)
    return out


def op_attn_f16(const float[::1] q, const uint16_t[:, ::1] K, const uint16_t[:, ::1] V, float scale, tier=None):
    """(scores, out): scale * K @ q, then out = softmax-free weighted sum p @ V with p = scores."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = K.shape[0], hd = q.shape[0]
    if n < 1 or K.shape[1] != hd or V.shape[0] != n or V.shape[1] != hd:
        raise InvalidArgumentError("op_attn_f16: K and V must be (n, head_dim) with n >= 1")
    scores = np.empty(n, dtype=np.float32)
    out = np.empty(hd, dtype=np.float32)
    cdef float[::1] s = scores
    cdef float[::1] o = out
    k.ops.attn_scores_f16(&q[0], &K[0, 0], hd, n, hd, scale, &s[0])
    k.ops.attn_values_f16(&s[0], &V[0, 0], hd, n, hd, &o[0])
    return scores, out


def op_attn_f16_group(const float[:, ::1] q, const uint16_t[:, ::1] K, const uint16_t[:, ::1] V, float scale,
                      Py_ssize_t stride=0, tier=None):
    """(scores (G, n), out (G, hd)) for the G query heads of one GQA group: scale * K @ q_h, then the
    softmax-free weighted sums scores_h @ V. K and V rows are `stride` halves apart (default head_dim):
    the head's slice of a cache row of several KV heads."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int G = q.shape[0], hd = q.shape[1]
    if stride == 0:
        stride = hd
    if G < 1 or hd < 1 or stride < hd or K.shape[1] != stride or V.shape[1] != stride or K.shape[0] < 1 \
            or V.shape[0] != K.shape[0]:
        raise InvalidArgumentError("op_attn_f16_group: q must be (G, hd), K and V (n, stride) with stride >= hd")
    cdef int n = K.shape[0]
    scores = np.empty((G, n), dtype=np.float32)
    out = np.empty((G, hd), dtype=np.float32)
    cdef float[:, ::1] s = scores
    cdef float[:, ::1] o = out
    k.ops.attn_scores_f16_group(&q[0, 0], G, &K[0, 0], stride, n, hd, scale, &s[0, 0])
    k.ops.attn_values_f16_group(&s[0, 0], G, &V[0, 0], stride, n, hd, &o[0, 0])
    return scores, out


def op_ssm_scan_states(float[:, ::1] h, const float[::1] B, const float[::1] C, const float[::1] xdt, float dA,
                       float[::1] y, tier=None, bint stream=True):
    """One token of the selective scan for one head, in place on h (d_state, n) and y (n) (kernels.h); stream:
    the prefetching variant (a hint, the same floats)."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int d_state = h.shape[0], n = h.shape[1]
    if B.shape[0] != d_state or C.shape[0] != d_state or xdt.shape[0] != n or y.shape[0] != n or d_state < 1 \
            or n < 1:
        raise ValueError("ssm_scan_states: h (d_state, n), B and C (d_state), xdt and y (n)")
    k.ops.ssm_scan_states(&h[0, 0], &B[0], &C[0], &xdt[0], dA, &y[0], d_state, n, stream)


def op_causal_conv(const float[:, ::1] x, float[:, ::1] state, const float[:, ::1] w, b=None, bint silu=False,
                   int c0=0, c1=None, tier=None):
    """The causal depthwise conv (kernels.h) of channels [c0, c1) over the rows of x (n, n_channels), from and
    into state (L - 1, n_channels); w (n_channels, L), b (n_channels) or None. Returns y (n, n_channels), zero
    outside [c0, c1)."""
    cdef const oxl_kernel_table *k = _table(tier)
    cdef int n = x.shape[0], nc = x.shape[1], L = w.shape[1]
    cdef int hi = nc if c1 is None else c1
    cdef const float[::1] bv
    cdef const float *bp = NULL
    if n < 1 or L < 1 or L > OXL_CONV_MAX_L or w.shape[0] != nc or state.shape[0] != L - 1 \
            or (L > 1 and state.shape[1] != nc) or not 0 <= c0 <= hi <= nc:
        raise ValueError("causal_conv: x (n, n_channels), state (L - 1, n_channels), w (n_channels, L), "
                         "0 <= c0 <= c1 <= n_channels")
    if b is not None:
        bv = b
        if bv.shape[0] != nc:
            raise ValueError("causal_conv: b (n_channels)")
        bp = &bv[0]
    y = np.zeros((n, nc), dtype=np.float32)
    cdef float[:, ::1] yv = y
    cdef float dummy = 0.0
    cdef float *sp = &state[0, 0] if L > 1 else &dummy
    k.ops.causal_conv(&x[0, 0], nc, &yv[0, 0], nc, n, sp, nc, &w[0, 0], bp, L, c0, hi, silu)
    return y
