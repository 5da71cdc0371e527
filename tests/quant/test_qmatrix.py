"""QMatrix products (matvec, matmul) over the float and 32-value block types, on every usable tier
and several thread counts, against dequantize-then-@; bad input; and the real models' tensors."""
import numpy as np
import pytest

from oxillama.errors import QuantError
from oxillama.gguf import GGUFFile
from oxillama.quant import QMatrix, dequantize, quantize

from .helpers import ACT_TYPE, FLOAT_TYPES, LEGACY_TYPES, act_halfstep, rng_rows, usable_tiers

ALL_TYPES = LEGACY_TYPES + FLOAT_TYPES
# a product vs float64 (dequantized W) @ x: bounded by the activation quantization step, plus
# float32 accumulation and the fp16 rounding of Q8_1's s term, relative to |W| @ |x|
PRODUCT_RTOL = 1e-5
# the same product on two tiers or thread counts: only the summation order differs
TIER_VS_SCALAR_RTOL = 2e-6



def _matrix(qtype, rows, cols, seed=0):
    W = rng_rows(np.random.default_rng(seed), rows, cols)
    m = QMatrix(quantize(W, qtype), qtype, rows, cols, n_threads=1)
    return m, m.dequantize().astype(np.float64)


def _bound(Wd, X, qtype):
    """Largest |product - Wd @ X| the activation quantization and float32 sums allow. X (n, cols)."""
    Xd = X.astype(np.float64)
    return (act_halfstep(Xd, ACT_TYPE[qtype]) @ np.abs(Wd).T) + PRODUCT_RTOL * (np.abs(Xd) @ np.abs(Wd).T)


@pytest.mark.parametrize("qtype", ALL_TYPES)
@pytest.mark.parametrize("rows,cols", [(1, 32), (37, 96), (64, 576), (130, 640)])
def test_matvec_every_tier_and_thread_count(qtype, rows, cols):
    m, Wd = _matrix(qtype, rows, cols, seed=rows)
    x = np.random.default_rng(1).standard_normal(cols).astype(np.float32)
    want = Wd @ x.astype(np.float64)
    bound = _bound(Wd, x[None, :], qtype)[0]
    base = m.matvec(x, tier="scalar")
    scale = np.abs(Wd) @ np.abs(x.astype(np.float64))
    for tier in usable_tiers():
        for n_threads in (1, 2, 3):
            y = m.matvec(x, tier=tier, n_threads=n_threads)
            assert y.shape == (rows,) and y.dtype == np.float32
            assert np.all(np.abs(y - want) <= bound), (tier, n_threads)
            assert np.all(np.abs(y - base) <= TIER_VS_SCALAR_RTOL * scale), (tier, n_threads)


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_matmul_every_tier_rows_1_to_65(qtype):
    rows, cols = 45, 160     # 45 = 11 tiles of 4 rows + 1 tail row
    m, Wd = _matrix(qtype, rows, cols, seed=3)
    X = np.random.default_rng(2).standard_normal((65, cols)).astype(np.float32)
    for n in (*range(1, 10), 16, 31, 32, 33, 63, 64, 65):
        Xn = X[:n]
        want = Xn.astype(np.float64) @ Wd.T
        bound = _bound(Wd, Xn, qtype)
        scale = np.abs(Xn.astype(np.float64)) @ np.abs(Wd).T
        base = m.matmul(Xn, tier="scalar")
        for tier in usable_tiers():
            for n_threads in (1, 2):
                Y = m.matmul(Xn, tier=tier, n_threads=n_threads)
                assert Y.shape == (n, rows)
                assert np.all(np.abs(Y - want) <= bound), (tier, n, n_threads)
                assert np.all(np.abs(Y - base) <= TIER_VS_SCALAR_RTOL * scale), (tier, n, n_threads)
        # each matmul row is the matvec of that row
        for j in (0, n - 1):
            np.testing.assert_allclose(Y[j], m.matvec(Xn[j]), rtol=0, atol=TIER_VS_SCALAR_RTOL * scale[j].max())


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL"])
def test_matmul_rows_longer_than_one_decoded_panel(qtype):
    """Prefill tiles decode 64 blocks of weights at a time and reuse them for every activation row:
    rows of 65 and 130 blocks (a panel boundary, a one-block last panel) give the float result."""
    for cols in (65 * 32, 130 * 32):
        m, Wd = _matrix(qtype, 12, cols, seed=5)
        X = np.random.default_rng(6).standard_normal((7, cols)).astype(np.float32)
        want = X.astype(np.float64) @ Wd.T
        bound = _bound(Wd, X, qtype)
        scale = np.abs(X.astype(np.float64)) @ np.abs(Wd).T
        base = m.matmul(X, tier="scalar")
        for tier in usable_tiers():
            Y = m.matmul(X, tier=tier, n_threads=2)
            assert np.all(np.abs(Y - want) <= bound), (tier, cols)
            assert np.all(np.abs(Y - base) <= TIER_VS_SCALAR_RTOL * scale), (tier, cols)


def test_matmul_writes_into_out():
    m, Wd = _matrix("Q4_0", 16, 64)
    X = np.ones((3, 64), np.float32)
    out = np.full((3, 16), np.nan, np.float32)
    assert m.matmul(X, out=out) is out
    assert np.isfinite(out).all()


@pytest.mark.parametrize("bad", [
    lambda: QMatrix(np.zeros(17, np.uint8), "Q4_0", 1, 32),                   # wrong byte length
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 16),                   # cols not a block multiple
    lambda: QMatrix(np.zeros(18, np.uint8), "Q9_9", 1, 32),                   # unknown type
    lambda: QMatrix(np.zeros(18, np.uint8), 77, 1, 32),                       # unknown type id
    lambda: QMatrix(np.zeros(36, np.uint8)[::2], "Q4_0", 1, 32),              # non-contiguous
    lambda: QMatrix(np.zeros(18, np.int8), "Q4_0", 1, 32),                    # wrong dtype
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 0, 32),                   # empty
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32, n_threads=0),      # no threads
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matvec(np.zeros(33, np.float32)),
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matvec(np.zeros(32, np.float64)),
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matvec(np.zeros(64, np.float32)[::2]),
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matmul(np.zeros((2, 31), np.float32)),
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matmul(np.zeros(32, np.float32)),
    lambda: QMatrix(np.zeros(18, np.uint8), "Q4_0", 1, 32).matmul(np.zeros((2, 32), np.float32),
                                                                  out=np.zeros((2, 2), np.float32)),
])
def test_bad_input_raises_quant_error(bad):
    with pytest.raises(QuantError):
        bad()


# ---- the real models ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        yield f


@pytest.fixture(scope="module")
def gemma3(gemma3_path):
    with GGUFFile(gemma3_path) as f:
        yield f


def test_smollm2_tensors_dequantize_bit_exact(smollm2):
    """Every Q4_1/Q8_0/F32 tensor of SmolLM2-135M, against gguf.quants."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    seen = set()
    for name, t in smollm2.tensors.items():
        assert t.qtype in ("Q4_1", "Q8_0", "F32"), (name, t.qtype)
        seen.add(t.qtype)
        raw = np.ascontiguousarray(t.data)
        ours = dequantize(raw, t.qtype, t.n_elements)
        want = gguf_quants.dequantize(raw, GGMLQuantizationType[t.qtype]).reshape(-1).astype(np.float32)
        np.testing.assert_array_equal(ours.view(np.uint32), want.view(np.uint32), err_msg=name)
    assert seen == {"Q4_1", "Q8_0", "F32"}


def test_gemma3_legacy_tensors_dequantize_bit_exact(gemma3):
    """Gemma-3-270m's Q5_0 and Q8_0 tensors (the embedding: its first 8192 rows), against gguf.quants."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    n_checked = 0
    for name, t in gemma3.tensors.items():
        if t.qtype not in ("Q5_0", "Q8_0"):
            continue
        row_bytes = t.type_info.row_bytes(t.ggml_shape[0])
        raw = np.ascontiguousarray(t.data[:8192 * row_bytes])
        ours = dequantize(raw, t.qtype, raw.nbytes // row_bytes * t.ggml_shape[0])
        want = gguf_quants.dequantize(raw, GGMLQuantizationType[t.qtype]).reshape(-1).astype(np.float32)
        np.testing.assert_array_equal(ours.view(np.uint32), want.view(np.uint32), err_msg=name)
        n_checked += 1
    assert n_checked == 91


@pytest.mark.parametrize("name,n,step", [("token_embd.weight", 1, 16), ("blk.0.ffn_up.weight", 7, 1),
                                         ("blk.0.ffn_down.weight", 3, 1)])
def test_smollm2_matrices(smollm2, name, n, step):
    """The largest legacy matrix of SmolLM2 (token_embd 49152 x 576, Q8_0; every 16th row checked) and
    the ffn matrices (1536 x 576 and 576 x 1536, Q4_1), as the output projection and prefill use them."""
    t = smollm2.tensors[name]
    rows, cols = t.shape
    raw = t.data
    m = QMatrix(raw, t.qtype, rows, cols, n_threads=2)
    X = np.random.default_rng(0).standard_normal((n, cols)).astype(np.float32)
    Y = m.matmul(X) if n > 1 else m.matvec(X[0])[None, :]
    sub = np.ascontiguousarray(raw.reshape(rows, -1)[::step])
    Wd = dequantize(sub, t.qtype, sub.shape[0] * cols).reshape(-1, cols).astype(np.float64)
    err = np.abs(Y[:, ::step] - X.astype(np.float64) @ Wd.T)
    assert np.all(err <= _bound(Wd, X, t.qtype)), name
