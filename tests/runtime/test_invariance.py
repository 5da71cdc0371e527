"""The project's invariant: the logits at a position depend only on the tokens before it, bit for bit, whatever
the shape of the call that computes them: one prefill, a prefill in chunks, one token at a time, a k-token
verify, a step beside other sequences, 1 or 2 threads. Every comparison here is exact (np.array_equal)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.runtime.batch import SequencePool

sys.path.insert(0, str(Path(__file__).parent.parent / "models"))
from tiny_hybrid import (write_tiny_lfm2, write_tiny_lfm2moe, write_tiny_qwen35, write_tiny_qwen35moe,  # noqa: E402
                         write_tiny_qwen3next)   # tests/models/tiny_hybrid.py
from tiny_moe import write_tiny_moe  # noqa: E402  tests/models/tiny_moe.py

DATA = Path(__file__).parent.parent / "models" / "data"
TINY = sorted(p.name for p in DATA.glob("*.gguf"))
# long enough to cross attention chunks (128 positions), KV pages (32) and the tiny models' sliding windows
N_TINY = 150
N_REAL = 72
CHUNK = 37   # an odd prefill chunk, so chunks start mid-page


def tokens_for(engine, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(3, engine.n_vocab, size=n).astype(np.int32)


def prefill_logits(engine, toks):
    engine.reset()
    return engine.forward(toks, all_logits=True)


def chunked_logits(engine, toks, chunk):
    engine.reset()
    return np.concatenate([engine.forward(toks[i:i + chunk], all_logits=True) for i in range(0, len(toks), chunk)])


def assert_same(a, b, what):
    assert a.shape == b.shape
    if not np.array_equal(a, b):
        rows = np.flatnonzero((a != b).any(axis=-1))
        pytest.fail(f"{what}: logits differ at {len(rows)} positions (first {rows[:5].tolist()}), "
                    f"max |diff| {np.abs(a - b).max():.3g}")


# (file, KV cache type): every architecture with f16, and a Q8_0 cache where head_dim allows it
# and the mixture-of-experts families, written at test time ("moe:<family>:<expert weights' type>")
MOE = ["moe:qwen3moe:F32", "moe:qwen2moe:Q8_0", "moe:olmoe:F32", "moe:mixtral:Q8_0", "moe:gpt-oss:MXFP4", "moe:phimoe:Q8_0"]
# and the hybrids of recurrent and attention layers ("hybrid:<family>:<weights' type>")
HYBRID = ["hybrid:lfm2:Q8_0", "hybrid:qwen3next:Q8_0", "hybrid:lfm2moe:Q8_0", "hybrid:qwen35:Q8_0",
          "hybrid:qwen35moe:Q8_0"]
HYBRID_WRITERS = {"lfm2": write_tiny_lfm2, "qwen3next": write_tiny_qwen3next, "lfm2moe": write_tiny_lfm2moe,
                  "qwen35": write_tiny_qwen35, "qwen35moe": write_tiny_qwen35moe}
CASES = ([(name, "f16") for name in TINY] + [("qwen3.gguf", "q8_0")] + [(name, "f16") for name in MOE]
         + [(name, "f16") for name in HYBRID])


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def tiny(request, tmp_path_factory):
    name, kv_type = request.param
    path = DATA / name
    if name.startswith("moe:"):
        _, family, qtype = name.split(":")
        path = write_tiny_moe(tmp_path_factory.mktemp("moe") / f"{family}.gguf", family, qtype=qtype)
    if name.startswith("hybrid:"):
        _, family, qtype = name.split(":")
        path = HYBRID_WRITERS[family](tmp_path_factory.mktemp("hybrid") / f"{family}.gguf", qtype=qtype)
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2, kv_type=kv_type) as e:
        yield e


@pytest.fixture(params=["smollm2", "gemma3"])
def real(request):
    e = request.getfixturevalue(request.param)
    e.reset()
    return e


def check_call_shapes(engine, n):
    toks = tokens_for(engine, n)
    ref = prefill_logits(engine, toks)
    assert_same(chunked_logits(engine, toks, CHUNK), ref, "prefill in chunks of 37")
    assert_same(chunked_logits(engine, toks, 1), ref, "one token at a time")
    # a k-token verify after a prefix, as speculative decoding runs it
    engine.reset()
    engine.forward(toks[:n - 5])
    assert_same(engine.forward(toks[n - 5:], all_logits=True), ref[n - 5:], "a 5-token verify")
    return toks, ref


def check_batched(engine, toks, ref):
    """The sequence alone, then beside three others whose lengths differ, in one step and token by token."""
    others = [tokens_for(engine, n, seed=s) for s, n in ((1, 3), (2, 40), (3, 97))]
    pool = SequencePool(engine, 4, n_ctx=max(len(toks), 97) + 8)
    seqs = [pool.add() for _ in range(4)]
    out = pool.step([(seqs[0], others[0], False), (seqs[1], toks, True), (seqs[2], others[1], True),
                     (seqs[3], others[2], False)])
    assert_same(out[1], ref, "prefill beside three other sequences")
    assert_same(out[2], prefill_logits(engine, others[1]), "the companion's prefill")
    # decode: every sequence one token per step, ours re-fed from a fork of its prefix
    pool.remove(seqs[0])
    if pool.recurrent is None:
        mine = pool.fork(seqs[1], len(toks) - 6)
    else:   # a recurrent state is known only at a sequence's end: the prefix again, in a step of its own
        mine = pool.add()
        pool.step([(mine, toks[:len(toks) - 6], False)])
    for i in range(len(toks) - 6, len(toks)):
        got = pool.step([(seqs[2], [i % engine.n_vocab], False), (mine, [int(toks[i])], False),
                         (seqs[3], [7], False)])
        assert_same(got[1][None], ref[i][None], f"decode of position {i} in a batch of 3")


def test_tiny_models_logits_do_not_depend_on_the_call_shape(tiny):
    toks, ref = check_call_shapes(tiny, N_TINY)
    check_batched(tiny, toks, ref)


def test_tiny_models_logits_do_not_depend_on_the_thread_count(tiny):
    toks = tokens_for(tiny, N_TINY)
    ref = prefill_logits(tiny, toks)
    with InferenceEngine.from_gguf(tiny.gguf.path, n_ctx=256, n_threads=1, kv_type=tiny.kv.kv_type) as one:
        assert_same(prefill_logits(one, toks), ref, "1 thread against 2 (prefill)")
        assert_same(chunked_logits(one, toks, 1), ref, "1 thread against 2 (decode)")


@pytest.mark.slow
def test_real_models_logits_do_not_depend_on_the_call_shape(real):
    toks, ref = check_call_shapes(real, N_REAL)
    check_batched(real, toks, ref)


@pytest.mark.slow
def test_real_models_logits_do_not_depend_on_the_thread_count(real):
    toks = tokens_for(real, N_REAL)
    # 1 thread against 2, both explicit (the default count may be 1 on a small host)
    with InferenceEngine.from_gguf(real.gguf.path, n_ctx=256, n_threads=2) as two:
        assert two.n_threads == 2
        ref = prefill_logits(two, toks)
    with InferenceEngine.from_gguf(real.gguf.path, n_ctx=256, n_threads=1) as one:
        assert_same(prefill_logits(one, toks), ref, "1 thread against 2 (prefill)")
        assert_same(chunked_logits(one, toks, 1), ref, "1 thread against 2 (decode)")
