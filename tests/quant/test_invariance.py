"""Batch invariance of the products: every output element of a matmul is the very float that the
tier's vec_dot gives for its (weight row, activation row), bit for bit, whatever the number of
activation rows, the row range a thread was given, or the thread count. This is what makes a token's
logits the same in a one-token decode, a k-token verify, a batch of sequences and a prefill; no
tolerance applies (np.array_equal).

Oracle: the tier's own vec_dot, called per element. Checked for every type that has a vec_dot, on
every usable tier (scalar and NEON have no multi-row kernel: there gemm is vec_dot per output).
"""
from __future__ import annotations

import numpy as np
import pytest

from oxillama import _core
from oxillama.quant import GGMLType, quantize, type_info

from .helpers import qid, rng_rows, weights_bytes

TIERS = _core.usable_tiers()
TYPES_WITH_VEC_DOT = [name for _, (name, *_rest, has_vec_dot) in sorted(_core.type_table().items())
                      if has_vec_dot and name in GGMLType.__members__]
# activation row counts: decode, verify and batched-decode sizes, the kernels' group and chunk
# boundaries (passes of 4 or 8, small batch <= 16, chunks of 64 activation rows), prefill-like sizes
N_ACT = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 64, 65, 130)
N_ACT_MAX = max(N_ACT)
W_ROWS = 37   # not a multiple of the 4-row tiles / 4-row chunks
# row ranges as threads and forward_impl.h's matmul_share hand them out, and ones that start and end mid-tile
ROW_RANGES = ((0, W_ROWS), (1, 30), (5, 6), (3, 37), (16, 32), (16, 37), (32, 37), (0, 5))
REPACK_ROW_ALIGN = 16   # kernels.h OXL_REPACK_ROW_ALIGN: a repacked range starts at a multiple of it
# (cols) per block size: an odd and an even number of blocks, and for 32-value blocks more blocks than
# one decoded panel holds (64) with an odd tail (Q1_0's 128-value blocks: 132 activation blocks)
COLS = {1: (77, 160), 32: (288, 320, 4256), 64: (192, 256), 128: (384, 512, 4224), 256: (768, 1024)}
HOT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


def _act_type(qtype: str) -> str:
    return GGMLType(_core.vec_dot_type(qid(qtype))).name


def _case(qtype: str, cols: int, tier: str, seed: int):
    rng = np.random.default_rng(seed)
    W = rng_rows(rng, W_ROWS, cols)
    w = weights_bytes(W, qtype, rng)
    X = rng_rows(rng, N_ACT_MAX, cols)
    act = _act_type(qtype)
    # the tier's fast activation quantizer, as matmul uses it; blocks never straddle rows
    xq = X.view(np.uint8) if act == "F32" else quantize(X, act, tier=tier, reference=False)
    xq = np.ascontiguousarray(xq).reshape(N_ACT_MAX, -1)
    wr = np.ascontiguousarray(w).view(np.uint8).reshape(W_ROWS, -1)
    expect = np.empty((N_ACT_MAX, W_ROWS), np.float32)
    for j in range(N_ACT_MAX):
        for r in range(W_ROWS):
            expect[j, r] = _core.vec_dot(qid(qtype), wr[r], xq[j], cols, tier)
    return X, wr.reshape(-1), xq, expect


def _cols_for(qtype: str):
    return COLS[type_info(qtype).block_size]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("qtype", TYPES_WITH_VEC_DOT)
def test_gemm_range_equals_vec_dot_bit_for_bit(qtype, tier):
    for ci, cols in enumerate(_cols_for(qtype)):
        X, w, xq, expect = _case(qtype, cols, tier, seed=ci)
        for n in N_ACT:
            xq_n = np.ascontiguousarray(xq[:n]).reshape(-1)
            for r0, r1 in ROW_RANGES:
                Y = np.full((n, W_ROWS), np.nan, np.float32)
                _core.gemm_range(w, qid(qtype), W_ROWS, cols, xq_n, n, Y, r0, r1, tier)
                assert np.array_equal(Y[:, r0:r1], expect[:n, r0:r1]), (qtype, tier, cols, n, (r0, r1))
                # nothing outside the range is written
                assert np.isnan(Y[:, :r0]).all() and np.isnan(Y[:, r1:]).all()


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("qtype", TYPES_WITH_VEC_DOT)
def test_matmul_and_matvec_equal_vec_dot_on_1_and_2_threads(qtype, tier):
    cols = _cols_for(qtype)[0]
    X, w, xq, expect = _case(qtype, cols, tier, seed=7)
    for n in (1, 2, 5, 8, 17, 130):
        for n_threads in (1, 2):
            Y = np.full((n, W_ROWS), np.nan, np.float32)
            _core.matmul(w, qid(qtype), W_ROWS, cols, np.ascontiguousarray(X[:n]), Y, n_threads, tier)
            assert np.array_equal(Y, expect[:n]), (qtype, tier, n, n_threads)
    for j in (0, 1, 129):
        for n_threads in (1, 2):
            y = np.full(W_ROWS, np.nan, np.float32)
            _core.matvec(w, qid(qtype), W_ROWS, cols, np.ascontiguousarray(X[j]), y, n_threads, tier)
            assert np.array_equal(y, expect[j]), (qtype, tier, j, n_threads)


@pytest.mark.parametrize("tier", [t for t in TIERS if t in ("avx2", "avx512", "avx512vnni")])
def test_x86_tiers_keep_their_multi_row_kernels(tier):
    """The pairing rule in dispatch.c drops a gemm whose vec_dot was replaced by a higher tier; the
    AVX-512 tier's vec_dots sum in the AVX2 order, so the hot types keep their fast matmul there."""
    missing = [t for t in HOT_TYPES if not _core.has_gemm(qid(t), tier)]
    assert missing == []


def test_scalar_tier_has_no_multi_row_kernel():
    """Scalar matmul is vec_dot per output, invariant by construction."""
    assert not any(_core.has_gemm(qid(t), "scalar") for t in TYPES_WITH_VEC_DOT)


LAYOUT_CASES = [(t, q) for t in TIERS for q in _core.repacked_layouts(t)]


@pytest.mark.skipif(not LAYOUT_CASES, reason="no tier of this CPU has a repacked weight layout")
@pytest.mark.parametrize("tier,qtype", LAYOUT_CASES)
def test_repacked_rows_give_the_file_rows_floats_bit_for_bit(qtype, tier):
    """A plan reads its matrices' repacked copy (ForwardPlan(repack=True)): each output must be the tier's
    vec_dot on the file rows, bit for bit, for every activation row count and every row range that starts
    at a multiple of the layouts' row groups and ends at one or at the last row (W_ROWS = 37: two whole
    groups of 16 rows and the 5 rows left); other ranges are refused (False: nothing written)."""
    for ci, cols in enumerate(_cols_for(qtype)):
        X, w, xq, expect = _case(qtype, cols, tier, seed=10 + ci)
        packed = _core.repack(w, qid(qtype), W_ROWS, cols, 2, tier)
        assert packed is not None and packed.nbytes == _core.repacked_row_size(qid(qtype), cols, tier) * W_ROWS
        assert not np.shares_memory(packed, w)
        for n in N_ACT:
            xq_n = np.ascontiguousarray(xq[:n]).reshape(-1)
            for r0, r1 in ROW_RANGES:
                Y = np.full((n, W_ROWS), np.nan, np.float32)
                ran = _core.gemm_range(w, qid(qtype), W_ROWS, cols, xq_n, n, Y, r0, r1, tier, packed)
                whole = r0 % REPACK_ROW_ALIGN == 0 and (r1 % REPACK_ROW_ALIGN == 0 or r1 == W_ROWS)
                assert ran == whole, (qtype, tier, (r0, r1))
                if not ran:
                    assert np.isnan(Y).all()
                    continue
                assert np.array_equal(Y[:, r0:r1], expect[:n, r0:r1]), (qtype, tier, cols, n, (r0, r1))
                assert np.isnan(Y[:, :r0]).all() and np.isnan(Y[:, r1:]).all()


# the AVX2 tier's eight-row types, which sum in the AVX-512 VNNI tier's order (csrc/x86/avx2/quants_x8_avx2.c,
# quants_x8b_avx2.c, quants_kx8_avx2.c)
SAME_AS_VNNI = ([q for q in _core.repacked_layouts("avx2") if q in _core.repacked_layouts("avx512vnni")]
                if {"avx2", "avx512vnni"} <= set(TIERS) else [])


@pytest.mark.skipif(not SAME_AS_VNNI, reason="needs the AVX2 and AVX-512 VNNI tiers")
@pytest.mark.parametrize("qtype", SAME_AS_VNNI)
def test_the_avx2_tiers_eight_row_types_give_the_vnni_tiers_floats(qtype):
    """A type the AVX2 tier runs eight rows a register gives the very floats of the VNNI tier's sixteen rows, so
    a model's logits do not depend on which of the two tiers runs it (and the AVX-512 tier, which inherits them)."""
    for ci, cols in enumerate(_cols_for(qtype)):
        _, w, xq, expect = _case(qtype, cols, "avx2", seed=20 + ci)
        wr = w.reshape(W_ROWS, -1)
        for j in (0, 1, N_ACT_MAX - 1):
            vnni = np.array([_core.vec_dot(qid(qtype), wr[r], xq[j], cols, "avx512vnni") for r in range(W_ROWS)],
                            np.float32)
            assert np.array_equal(expect[j], vnni), (qtype, cols, j)


def test_repack_refuses_what_it_cannot_hold():
    """No layout: None; a byte count that does not match the shape: QuantError, nothing read."""
    from oxillama.errors import QuantError
    assert _core.repack(np.zeros(4 * 17, np.uint8), qid("F32"), 1, 17) is None
    if "Q8_0" in _core.repacked_layouts():
        with pytest.raises(QuantError, match="do not hold"):
            _core.repack(np.zeros(34 * 2 - 1, np.uint8), qid("Q8_0"), 2, 32)
