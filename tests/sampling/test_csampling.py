"""The C whole-vocabulary passes against NumPy."""
import numpy as np
import pytest

from oxillama.errors import SamplerError
from oxillama.sampling import _csampling

# the polynomial exp is within ~25 float32 ulp of float64 exp (the range reduction's error grows
# with |x|; at x = -60 the value is 1e-26 and irrelevant next to the max's weight of 1)
EXP_REL_TOL = 3e-6
SUM_REL_TOL = 1e-5


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1023, 1024, 1025, 5000])
def test_max_and_exp_sum_match_numpy(rng, n):
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    m = _csampling.vmax(x)
    assert m == x.max()
    w = np.empty(n, np.float32)
    s_w, s_wx = _csampling.exp_sum(x, m, 1.0, w)
    ref = np.exp(x.astype(np.float64) - m)
    np.testing.assert_allclose(w, ref, rtol=EXP_REL_TOL, atol=0)
    assert s_w == pytest.approx(ref.sum(), rel=SUM_REL_TOL)
    assert s_wx == pytest.approx((ref * (x - m)).sum(), rel=SUM_REL_TOL)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 16, 17, 1023, 49152 + 3])
def test_check_is_copy_checks_scan_and_argmax(rng, n):
    """check(): copy_check's (max, flags) without writing, and np.argmax's position (ties: the first)."""
    x = rng.integers(-6, 6, n).astype(np.float32)   # many ties, across lanes and in the tail
    x[::5] = -np.inf
    dst = np.empty_like(x)
    m, has_nan, has_posinf, at = _csampling.check(x)
    assert (m, has_nan, has_posinf) == _csampling.copy_check(x, dst)
    assert at == int(np.argmax(x)) and m == x.max()
    x[-1] = x.max() + 1                               # the max in the scalar tail (or the last lane)
    assert _csampling.check(x)[3] == n - 1
    x[n // 2] = np.nan
    assert _csampling.check(x)[1:3] == (True, False)
    x[n // 2] = np.inf
    assert _csampling.check(x)[1:3] == (False, True)


def test_exp_sum_masked_and_scaled(rng):
    x = (rng.standard_normal(3000) * 4).astype(np.float32)
    x[::7] = -np.inf
    x[5] = x.max() - 200  # far below: underflows to exactly 0
    m = x.max()
    w = np.empty_like(x)
    s_w, s_wx = _csampling.exp_sum(x, m, 0.5, w)
    assert np.all(w[::7] == 0) and w[5] == 0
    assert np.isfinite(s_wx)
    fin = np.isfinite(x)
    ref = np.exp((x[fin].astype(np.float64) - m) * 0.5)
    assert s_w == pytest.approx(ref.sum(), rel=SUM_REL_TOL)


@pytest.mark.parametrize("k", [1, 5, 40, 300])
def test_top_k_is_sorted_prefix_with_ties_by_lower_index(rng, k):
    x = rng.integers(-20, 20, 2000).astype(np.float32)  # many ties
    x[::13] = -np.inf
    ids = np.empty(k, np.int32)
    vals = np.empty(k, np.float32)
    m = _csampling.top_k(x, k, ids, vals)
    ref = np.lexsort((np.arange(len(x)), -x))[:k]
    assert m == k
    np.testing.assert_array_equal(ids, ref)
    np.testing.assert_array_equal(vals, x[ref])


def test_top_k_skips_masked_entries():
    x = np.array([-np.inf, 1.0, -np.inf, 0.5], np.float32)
    ids = np.empty(4, np.int32)
    vals = np.empty(4, np.float32)
    assert _csampling.top_k(x, 4, ids, vals) == 2
    assert ids[:2].tolist() == [1, 3]


def test_filter_and_pick(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.empty(1000, np.int32)
    m = _csampling.filter_ge(x, 0.5, out)
    np.testing.assert_array_equal(out[:m], np.flatnonzero(x >= 0.5))
    w = np.array([0, 1, 0, 2, 0], np.float32)
    assert _csampling.pick(w, 5, 0.0) == 1      # a zero weight is never picked
    assert _csampling.pick(w, 5, 0.999) == 1
    assert _csampling.pick(w, 5, 1.0) == 3
    assert _csampling.pick(w, 5, 2.9999) == 3
    assert _csampling.pick(w, 5, 3.5) == 3      # rounding past the total: last positive weight


def test_wrappers_check_buffer_lengths():
    x = np.zeros(10, np.float32)
    with pytest.raises(SamplerError):
        _csampling.exp_sum(x, 0.0, 1.0, np.empty(5, np.float32))
    with pytest.raises(SamplerError):
        _csampling.top_k(x, 8, np.empty(4, np.int32), np.empty(8, np.float32))
    with pytest.raises(SamplerError):
        _csampling.filter_ge(x, 0.0, np.empty(3, np.int32))
    with pytest.raises(SamplerError):
        _csampling.pick(x, 11, 0.0)
    with pytest.raises(SamplerError):
        _csampling.vmax(np.zeros(0, np.float32))


@pytest.mark.parametrize("n,scale", [(5, 1.0), (300, 0.5), (20000, 2.0), (20000, 0.01)])
def test_top_p_cut_is_the_smallest_prefix(rng, n, scale):
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    x[rng.integers(0, n, max(1, n // 10))] = x[0]  # ties
    x[rng.integers(0, n, max(1, n // 20))] = -np.inf
    w = np.empty_like(x)
    _csampling.exp_sum(x, x.max(), 1.0, w)
    out = np.empty(n, np.int32)
    wd = w.astype(np.float64)
    for p in (0.05, 0.3, 0.7, 0.95, 1.0):
        m = _csampling.top_p_cut(w, p, out)
        order = np.lexsort((np.arange(n), -wd))
        cum = np.cumsum(wd[order])
        k = min(int(np.searchsorted(cum, p * wd.sum(), side="left")) + 1, int((wd > 0).sum()))
        np.testing.assert_array_equal(out[:m], np.sort(order[:k]))


@pytest.mark.parametrize("k", [40, 65, 256, 3000])
def test_top_k_large_rows_sampled_threshold_path(rng, k):
    # rows of >= 8192 entries with k > 64 take the sample-threshold-then-heap path
    n = 50000
    x = rng.integers(-50, 50, n).astype(np.float32)  # heavy ties
    x[rng.integers(0, n, 500)] = -np.inf
    x[-1] = 1000.0  # the top token last: the tail after the last full block counts
    ids = np.empty(k, np.int32)
    vals = np.empty(k, np.float32)
    assert _csampling.top_k(x, k, ids, vals) == k
    ref = np.lexsort((np.arange(n), -x))[:k]
    np.testing.assert_array_equal(ids, ref)
