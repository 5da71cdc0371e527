"""The invariant for models with recurrent layers (LFM2's short convolutions, with a sliding window or experts,
Qwen3-Next's and Qwen3.5's gated DeltaNet, beside attention): a position's logits are the same floats whether its prompt goes whole, in chunks or token by token,
alone or in a batched step beside other sequences, with 1 or 2 threads. The recurrent state carries exactly what a
longer call would have read, and the kernels sum in one order (csrc/layers/shortconv.h, deltanet.h). Every
comparison is exact (np.array_equal)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
import tiny_hybrid  # noqa: E402
from test_hybrid import Rig  # noqa: E402

from oxillama.errors import ModelError  # noqa: E402

N = 150
CHUNK = 37   # odd: chunks start mid-page and mid-window


def assert_same(a, b, what):
    assert a.shape == b.shape
    if not np.array_equal(a, b):
        rows = np.flatnonzero((a != b).any(axis=-1))
        pytest.fail(f"{what}: logits differ at {len(rows)} positions (first {rows[:5].tolist()}), "
                    f"max |diff| {np.abs(a - b).max():.3g}")


def write_lfm2_swa(path, qtype):
    """LFM2 whose attention layers see a sliding window of 24 positions: chunks of 37 cross its edge."""
    return tiny_hybrid.write_tiny_lfm2(path, qtype=qtype,
                                       overrides={"lfm2.attention.sliding_window": tiny_hybrid.LFM2_SWA})


WRITERS = {"lfm2": tiny_hybrid.write_tiny_lfm2, "qwen3next": tiny_hybrid.write_tiny_qwen3next,
           "lfm2swa": write_lfm2_swa, "lfm2moe": tiny_hybrid.write_tiny_lfm2moe,
           "qwen35": tiny_hybrid.write_tiny_qwen35, "qwen35moe": tiny_hybrid.write_tiny_qwen35moe}


@pytest.fixture(scope="module", params=["lfm2:F32", "lfm2:Q8_0", "lfm2swa:Q8_0", "lfm2moe:Q8_0", "qwen3next:F32",
                                                   "qwen3next:Q8_0", "qwen35:Q8_0", "qwen35moe:Q8_0"])
def path(request, tmp_path_factory):
    family, qtype = request.param.split(":")
    return WRITERS[family](tmp_path_factory.mktemp(family) / f"{family}.gguf", qtype=qtype)


@pytest.fixture(scope="module")
def toks():
    return np.random.default_rng(5).integers(3, tiny_hybrid.N_VOCAB, size=N).astype(np.int32)


@pytest.mark.parametrize("kv_dtype", [np.float16, np.float32])
def test_whole_chunks_and_tokens_agree(path, toks, kv_dtype):
    rig = Rig(path, kv_dtype=kv_dtype, n_threads=2)
    whole = rig.logits(toks)
    assert_same(whole, rig.logits(toks, chunk=CHUNK), "chunks of 37")
    assert_same(whole, rig.logits(toks, chunk=1, slot=3), "token by token")


def test_threads_do_not_change_the_floats(path, toks):
    one = Rig(path, n_threads=1).logits(toks, chunk=CHUNK)
    two = Rig(path, n_threads=2).logits(toks, chunk=CHUNK)
    assert_same(one, two, "1 vs 2 threads")


def test_a_batched_step_beside_other_sequences(path, toks):
    """Three sequences in shared steps (their own pages and slots; one prefilling while others decode) give
    each one the logits it has alone."""
    alone = Rig(path, n_ctx=512).logits(toks)
    rig = Rig(path, n_ctx=512, n_threads=2)
    others = [np.random.default_rng(s).integers(3, tiny_hybrid.N_VOCAB, size=N).astype(np.int32) for s in (1, 2)]
    seqs = [toks] + others
    pages = [np.arange(i * 3, i * 3 + 3, dtype=np.int32) for i in range(3)]   # 3 pages of 64 each
    slots = [2, 0, 3]
    # steps: sequence 0 in chunks of 37, sequence 1 token by token, sequence 2 in chunks of 10
    plans = [CHUNK, 1, 10]
    pos = [0, 0, 0]
    got = []
    while pos[0] < N:
        step = [i for i in range(3) if pos[i] < N]
        parts = [np.ascontiguousarray(seqs[i][pos[i]:pos[i] + plans[i]]) for i in step]
        out = np.zeros(sum(len(p) for p in parts) * rig.n_vocab, np.float32)
        rig.ctx.run_batch(parts, [pos[i] for i in step], [pages[i] for i in step], [True] * len(step), out,
                          state_slots=[slots[i] for i in step])
        out = out.reshape(-1, rig.n_vocab)
        got.append(out[:len(parts[0])])   # sequence 0 is first in every step
        for i, part in zip(step, parts):
            pos[i] += len(part)
    assert_same(alone, np.concatenate(got), "batched beside two other sequences")


def test_a_sequence_restarts_from_the_zero_state(path, toks):
    """pos0 = 0 on a used slot starts the sequence afresh (the forward clears its share of the slot)."""
    rig = Rig(path)
    first = rig.logits(toks[:40])
    rig.logits(toks[40:80], pos0=40)
    assert_same(first, rig.logits(toks[:40]), "the same prompt again in the same slot")


def test_two_slots_hold_two_sequences(path, toks):
    """Interleaved calls of two sequences in two slots: neither sees the other's state."""
    other = toks[::-1].copy()
    rig = Rig(path, n_ctx=512)
    ref_a, ref_b = Rig(path).logits(toks), Rig(path).logits(other)
    # a's positions live in pages 0-2 (run() reads the pages in order), b's are run through run_batch
    got_a, got_b = [], []
    for i in range(0, N, 50):
        got_a.append(rig.logits(toks[i:i + 50], pos0=i, slot=1))
        part = np.ascontiguousarray(other[i:i + 50])
        out = np.zeros(len(part) * rig.n_vocab, np.float32)
        rig.ctx.run_batch([part], [i], [np.arange(4, 8, dtype=np.int32)], [True], out, state_slots=[2])
        got_b.append(out.reshape(-1, rig.n_vocab))
    assert_same(ref_a, np.concatenate(got_a), "sequence a")
    assert_same(ref_b, np.concatenate(got_b), "sequence b")


def test_a_slot_twice_in_one_step_is_refused(path, toks):
    rig = Rig(path)
    part = np.ascontiguousarray(toks[:4])
    out = np.zeros(2 * rig.n_vocab, np.float32)
    pages = np.arange(2, dtype=np.int32)
    with pytest.raises(ModelError, match="twice"):
        rig.ctx.run_batch([part, part], [0, 0], [pages, pages + 2], [False, False], out, state_slots=[1, 1])
