"""Recurrent models' per-sequence state (runtime/recurrent_state.py) in every place a session's memory goes:
the state pool's slots, going back (truncate, a new prompt) through checkpoints, snapshots validated by value,
many sequences of a Scheduler, /metrics. Logits are compared exactly (the invariant)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine, Scheduler
from oxillama.errors import BatchError, InvalidArgumentError, SnapshotError
from oxillama.runtime import snapshot as snap
from oxillama.runtime.batch import SequencePool
from oxillama.runtime.recurrent_state import RecurrentStatePool, StateCheckpoints

sys.path.insert(0, str(Path(__file__).parent))
from prompt_reuse import fresh_and_reused  # noqa: E402  tests/runtime/prompt_reuse.py

DATA = Path(__file__).parents[1] / "models" / "data"
MAMBA2 = DATA / "mamba2.gguf"


@pytest.fixture(scope="module")
def mamba2():
    with InferenceEngine.from_gguf(MAMBA2, n_ctx=256, n_threads=2, n_batch=32) as e:
        yield e


def toks(n, seed=0):
    return np.random.default_rng(seed).integers(0, 286, n).astype(np.int32)


def fresh_logits(engine, ids):
    engine.reset()
    return engine.forward(ids, all_logits=True)


def test_state_pool_slots(mamba2):
    pool = RecurrentStatePool(mamba2.plan, 3)
    assert pool.slot_floats == mamba2.plan.state_floats and pool.memory_bytes() == 3 * 4 * pool.slot_floats
    a, b, c = pool.alloc(), pool.alloc(), pool.alloc()
    assert sorted((a, b, c)) == [0, 1, 2] and pool.n_free == 0
    with pytest.raises(BatchError, match="slots"):
        pool.alloc()
    pool.data[a] = np.arange(pool.slot_floats, dtype=np.float32)
    pool.copy(a, b)
    np.testing.assert_array_equal(pool.read(b), pool.read(a))
    views = pool.views(b)
    assert set(views) == {(il, name) for il in range(3) for name in ("conv", "ssm")}
    assert views[(0, "ssm")].shape == (8, 16, 16)       # (n_head, d_state, head_dim)
    with pytest.raises(InvalidArgumentError, match="NaN"):
        pool.write(c, np.full(pool.slot_floats, np.nan, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="float32"):
        pool.write(c, np.zeros(5, dtype=np.float32))
    pool.free(b)
    with pytest.raises(InvalidArgumentError, match="already free"):
        pool.free(b)
    assert pool.alloc() == b


def test_truncate_goes_back_through_checkpoints(mamba2):
    """A recurrent state cannot be cut: truncate() resumes from a checkpoint (or position 0) and runs the tokens
    after it; the logits after it are those of a fresh run, bit for bit."""
    ids = toks(90)
    ref = fresh_logits(mamba2, ids)
    mamba2.reset()
    mamba2.forward(ids[:40])
    mamba2.checkpoint()
    mamba2.forward(ids[40:90])
    for n in (70, 40, 25):
        mamba2.truncate(n)
        assert mamba2.n_past == n
        np.testing.assert_array_equal(mamba2.forward(ids[n:n + 3], all_logits=True), ref[n:n + 3])
        mamba2.truncate(n)


def test_prompt_reuse_gives_the_fresh_text(mamba2):
    """generate() on prompts that share prefixes with the session (checkpoints at the end of each prompt, the
    session's own end) writes what a fresh engine writes, and runs fewer tokens."""
    base = toks(50, seed=3).tolist()
    prompts = [base, base, base + [5, 6, 7], base[:30] + [9], base + [5, 6, 7, 8]]
    want, got, reused = fresh_and_reused(mamba2, MAMBA2, prompts, 12)
    assert got == want
    assert reused[1] == len(base) - 1          # the checkpoint before the last prompt token
    assert reused[2] == len(base) - 1          # the session had run past the shared 50: the checkpoint
    assert reused[3] == 0                      # shares 30 tokens, no checkpoint within them


def test_checkpoints_key_on_tokens_and_adapters():
    cps = StateCheckpoints(capacity=2)
    s1, s2, s3 = (np.full(4, v, dtype=np.float32) for v in (1, 2, 3))
    cps.save([1, 2, 3], s1)
    cps.save([1, 2, 3, 4, 5], s2, key=("lora", 1.0))
    assert cps.best([1, 2, 3, 4, 5, 6])[0] == 3
    assert cps.best([1, 2, 3, 4, 5, 6], key=("lora", 1.0))[0] == 5
    assert cps.best([1, 2, 9, 4]) == (0, None)
    assert cps.best([1, 2, 3, 4], limit=2) == (0, None)
    cps.save([7], s3)      # capacity 2: the oldest goes
    assert cps.best([1, 2, 3]) == (0, None) and len(cps) == 2


def test_rollback_checkpoints_replace_each_other_and_keep_the_prompts():
    """Speculative decoding's round-start checkpoints (rollback=True): each replaces the last, copied into its
    array, and never evicts the prompts' checkpoints that prefix reuse resumes from."""
    cps = StateCheckpoints(capacity=2)
    prompt = np.full(4, 1, dtype=np.float32)
    cps.save([1, 2, 3], prompt)
    first = np.full(4, 2, dtype=np.float32)
    cps.save([1, 2, 3, 4], first, rollback=True)
    assert cps.best([1, 2, 3, 4, 5])[0] == 4
    for n in range(5, 12):   # more rounds than the capacity
        buf = cps.take_rollback()
        assert buf is first   # the last round's array, for the copy
        buf[:] = n
        cps.save(list(range(1, n + 1)), buf, rollback=True)
    assert len(cps) == 2
    assert cps.best([1, 2, 3, 9]) == (3, prompt)        # the prompt's checkpoint survived every round
    n, state = cps.best(list(range(1, 20)))
    assert n == 11 and state[0] == 11
    cps.save([5, 6], np.zeros(4, np.float32))            # an ordinary checkpoint past capacity: the oldest goes,
    assert cps.best(list(range(1, 20)))[0] == 11         # not the rollback point
    assert cps.best([1, 2, 3, 9]) == (0, None)


def test_pool_read_into_a_buffer(mamba2):
    pool = mamba2.session.recurrent
    mamba2.reset()
    mamba2.forward(toks(5, seed=2).tolist())
    buf = np.empty(pool.slot_floats, np.float32)
    assert pool.read(0, out=buf) is buf
    np.testing.assert_array_equal(buf, pool.data[0])
    assert pool.read(0, out=np.empty(3, np.float32)) is not buf   # the wrong size: a new array


def test_snapshot_resume_continues_token_for_token(mamba2, tmp_path):
    ids = toks(40, seed=5).tolist()
    mamba2.reset()
    full = mamba2.generate(ids, max_tokens=16, temperature=0).tokens
    mamba2.reset()
    first = mamba2.generate(ids, max_tokens=6, temperature=0).tokens
    path = tmp_path / "s.oxl"
    mamba2.save(path)
    with InferenceEngine.resume(path, MAMBA2, n_threads=1) as r:
        rest = r.generate(None, max_tokens=10, temperature=0).tokens
    assert first + rest == full


def _reframed(blob, edit):
    """The snapshot blob with its body edited and a valid header: what reaches validation by value."""
    import msgpack
    body = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    edit(body)
    return snap.frame(msgpack.packb(body, use_bin_type=True))


@pytest.mark.parametrize("edit,words", [
    (lambda b: b.pop("state"), "missing"),
    (lambda b: b.update(state=b["state"][:-4]), "float32"),
    (lambda b: b.update(state=np.full(len(b["state"]) // 4, np.inf, "<f4").tobytes()), "NaN or infinite"),
    (lambda b: b.update(state=b"\0\0"), "whole number"),
])
def test_snapshot_recurrent_state_is_validated_by_value(mamba2, edit, words):
    mamba2.reset()
    mamba2.generate(toks(20, seed=6).tolist(), max_tokens=3, temperature=0)
    blob = _reframed(mamba2.snapshot(), edit)
    with pytest.raises(SnapshotError, match=words):
        mamba2.load_snapshot(blob)


def test_snapshot_of_an_attention_model_with_a_state_is_refused(mamba2):
    with InferenceEngine.from_gguf(DATA / "llama.gguf", n_ctx=64, n_threads=1) as llama:
        llama.generate([1, 2, 3], max_tokens=2, temperature=0)
        blob = _reframed(llama.snapshot(), lambda b: b.update(state=np.zeros(4, "<f4").tobytes()))
        with pytest.raises(SnapshotError, match="recurrent"):
            llama.load_snapshot(blob)


def test_pool_forks_and_truncates_only_where_the_state_is_known(mamba2):
    ids = toks(30, seed=7)
    ref = fresh_logits(mamba2, ids)
    pool = SequencePool(mamba2, 3, n_ctx=64)
    a = pool.add()
    pool.step([(a, ids[:20], False)])
    assert pool.resumable(a, 12) == 0 and pool.resumable(a, 20) == 20
    with pytest.raises(InvalidArgumentError, match="recurrent"):
        pool.fork(a, 12)
    with pytest.raises(InvalidArgumentError, match="recurrent"):
        pool.truncate(a, 12)
    b = pool.fork(a)
    out = pool.step([(a, ids[20:25], True), (b, ids[20:30], True)])
    np.testing.assert_array_equal(out[0], ref[20:25])
    np.testing.assert_array_equal(out[1], ref[20:30])
    pool.truncate(a, 0)   # back to the start: the next step starts from the zero state
    np.testing.assert_array_equal(pool.step([(a, ids[:4], True)])[0], ref[:4])
    assert pool.free_state_slots == 1
    pool.remove(b)
    assert pool.free_state_slots == 2


def test_scheduler_reports_state_slots(mamba2):
    prompts = [toks(n, seed=n).tolist() for n in (5, 40, 17, 64)]
    with Scheduler(mamba2, n_seq_max=3) as sched:
        handles = [sched.submit(p, max_tokens=8, temperature=0) for p in prompts]
        outs = [h.result(120) for h in handles]
        m = sched.metrics()
    assert m["recurrent_state_usage_perc"] == 0.0 and m["recurrent_state_bytes"] == 0
    for p, out in zip(prompts, outs):
        mamba2.reset()
        assert out.tokens == mamba2.generate(p, max_tokens=8, temperature=0).tokens


@pytest.mark.parametrize("draft_kind", ["oracle", "layers"])
def test_greedy_speculative_decoding_equals_plain_decoding(draft_kind):
    """The target verifies from the checkpoint taken at the start of each round and, after a rejection, goes
    back to it and runs the kept tokens again: the same greedy tokens as plain decoding. The oracle drafter
    proposes plain decoding's own tokens with every other round's third one wrong, so rounds both keep all
    their drafts and reject mid-way; the layer draft (the first 2 of 3 layers) is whatever it is."""
    from oxillama.runtime.speculative import NGramDrafter, SpeculativeEngine, layer_draft
    prompt = toks(30, seed=9).tolist()

    class Oracle(NGramDrafter):
        rounds = 0

        def propose(self, seq, k, sampler=None):
            i = len(seq) - len(prompt)
            drafts = list(plain[i:i + k])
            Oracle.rounds += 1
            if Oracle.rounds % 2 and len(drafts) > 2:
                drafts[2] = (drafts[2] + 1) % 286
            return drafts, None

    with InferenceEngine.from_gguf(MAMBA2, n_ctx=256, n_threads=2) as e:
        plain = e.generate(prompt, max_tokens=40, temperature=0).tokens
        draft = Oracle() if draft_kind == "oracle" else layer_draft(e, 2)
        e.reset()
        try:
            spec = SpeculativeEngine(e, draft, k=4, adaptive=False)
            spec.generate(prompt, max_tokens=40, temperature=0)
        finally:
            if draft_kind != "oracle":
                draft.close()
        got = list(e.tokens)[len(prompt):]
        st = spec.stats
    n = min(len(got), len(plain))
    assert n >= 20 and got[:n] == plain[:n]
    if draft_kind == "oracle":
        assert st.accepted > 0 and st.rejected > 0 and st.rounds < st.emitted


def test_scheduler_prompt_cache_resumes_recurrent_states_from_checkpoints(mamba2):
    """With a prompt cache, a recurrent model's state is kept before each prompt's last token and at each
    request's end: the same prompt again runs only its last token, a conversation's next turn only its new
    tokens; the texts are a cold run's."""
    from oxillama.runtime import PrefixKvCache
    prompt = toks(60, seed=11).tolist()
    other = toks(45, seed=12).tolist()

    def cold(p):
        mamba2.reset()
        return mamba2.generate(p, max_tokens=10, temperature=0).tokens

    cache = PrefixKvCache(max_bytes=64 << 20)
    with Scheduler(mamba2, n_seq_max=2, prompt_cache=cache) as sched:
        first = sched.submit(prompt, max_tokens=10, temperature=0).result(120)
        again = sched.submit(prompt, max_tokens=10, temperature=0)
        out_again = again.result(120)
        turn2 = prompt + first.tokens + other[:7]
        h2 = sched.submit(turn2, max_tokens=10, temperature=0)
        out2 = h2.result(120)
        miss = sched.submit(other, max_tokens=10, temperature=0)
        out_miss = miss.result(120)
    assert first.tokens == cold(prompt) and out_again.tokens == first.tokens
    assert again.stats["n_cached_prompt_tokens"] == len(prompt) - 1
    # the first request's end: its prompt and all but its last token (sampled, never run)
    assert h2.stats["n_cached_prompt_tokens"] == len(prompt) + len(first.tokens) - 1
    assert out2.tokens == cold(turn2)
    assert miss.stats["n_cached_prompt_tokens"] == 0 and out_miss.tokens == cold(other)


def test_a_format_2_short_conv_state_is_refused(tmp_path):
    """Format 3 stores LFM2's / Qwen3-Next's conv tails in token rows; a format 2 snapshot of such a model holds
    them in channel rows and would restore a wrong state: it is refused, naming why. (Mamba-2's layout did not
    change: its format 2 snapshots still load.)"""
    sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
    import tiny_hybrid
    path = tiny_hybrid.write_tiny_lfm2(tmp_path / "lfm2.gguf")
    with InferenceEngine.from_gguf(path, n_ctx=64) as e:
        e.generate([5, 6, 7, 8], max_tokens=2)
        blob = e.snapshot()
    hdr = snap._HEADER.size
    assert snap.decode(blob).kv.state is not None
    with pytest.raises(SnapshotError, match="format version 2 .*lfm2.*run the prompt again"):
        snap.decode(snap.frame(blob[hdr:], version=2))
