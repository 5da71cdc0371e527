"""Session snapshots: save, resume in a new process, continue token for token; kv_snapshot/kv_restore."""
import json
import os

import numpy as np
import pytest

import oxillama
from oxillama.errors import InvalidArgumentError, SnapshotError
from oxillama.runtime import InferenceEngine, KVState
from oxillama.runtime import snapshot as snap

PROMPT = "Once upon a time, in a land far away,"
SAMPLING = dict(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.1)
SEED = 1234
# lower-case letters and spaces only: a free story soon has a capital, a comma or a full stop
GRAMMAR = 'root ::= [a-z ]+'
# the model's own per-token KV bytes, plus headers: the blob must not carry much beyond the KV rows
MAX_OVERHEAD_BYTES = 64 * 1024


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(oxillama.__file__)))


def test_resume_in_a_new_process_continues_token_for_token(smollm2, smollm2_path, tmp_path, python_runner):
    """40 sampled tokens in one go equal 20, a snapshot, a new process, and 20 more: without and with
    a grammar (whose matcher state travels in the snapshot)."""
    from oxillama.grammar import Grammar
    e = smollm2
    n_prompt = len(e.tokenize(PROMPT))
    # end-of-generation banned, so both reference runs are 40 tokens whatever the sampled story
    no_eog = {"banned_tokens": tuple(sorted(e.tokenizer.eog_ids))}
    variants = {"plain": dict(no_eog), "grammar": {"grammar": Grammar.from_string(GRAMMAR), **no_eog}}
    full, paths = {}, {}
    for name, extra in variants.items():
        e.reset()
        e.generate(PROMPT, max_tokens=40, seed=SEED, **SAMPLING, **extra)
        full[name] = e.tokens
        assert len(full[name]) == n_prompt + 40, f"{name}: the reference run stopped early"
        e.reset()
        e.generate(PROMPT, max_tokens=20, seed=SEED, **SAMPLING, **extra)
        assert e.tokens == full[name][:n_prompt + 20]
        paths[name] = str(tmp_path / f"{name}.oxs")
        e.save(paths[name])
    assert full["plain"] != full["grammar"]       # the grammar did constrain the run

    code = f"""
import json
from oxillama.runtime import InferenceEngine
out = {{}}
for name, path in {paths!r}.items():
    with InferenceEngine.resume(path, {smollm2_path!r}, n_threads={e.n_threads}) as r:
        r.generate(None, max_tokens=20)
        out[name] = r.tokens
print(json.dumps(out))
"""
    env = dict(os.environ, PYTHONPATH=_package_root() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = python_runner(code, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resumed == full


def test_snapshot_round_trip_in_process_keeps_mirostat_mu_and_rng(smollm2, smollm2_path):
    e = smollm2
    e.reset()
    e.generate(PROMPT, max_tokens=6, seed=7, mirostat=2, mirostat_tau=4.0)
    blob = e.snapshot()
    mu = e.session.sampler.mirostat_mu
    assert mu is not None and mu != 8.0        # moved away from 2 * tau
    with InferenceEngine.resume(blob, smollm2_path, n_threads=e.n_threads) as r:
        assert r.tokens == e.tokens and r.n_past == e.n_past
        for a, b in zip(r.kv.read(), e.kv.read()):
            np.testing.assert_array_equal(a, b)
        assert r.session.sampler.mirostat_mu == mu
        assert r.session.sampler.get_state() == e.session.sampler.get_state()
        assert r.n_ctx == e.n_ctx and r.seed == e.seed
        assert r.generate(None, max_tokens=6) == e.generate(None, max_tokens=6)
        assert r.tokens == e.tokens


def test_snapshot_size_is_the_kv_rows_plus_a_small_header(smollm2):
    e = smollm2
    e.reset()
    e.generate(PROMPT, max_tokens=3, seed=1, **SAMPLING)
    blob = e.snapshot()
    kv_bytes = e.kv.bytes_per_token * e.n_past
    assert kv_bytes < len(blob) < kv_bytes + MAX_OVERHEAD_BYTES
    decoded = snap.decode(blob)
    assert decoded.kv.n_past == e.n_past and decoded.kv.pending == e.tokens[-1]
    assert decoded.kv.logits is None          # the pending token will produce them
    assert decoded.grammar is None


def test_load_snapshot_replaces_the_session(smollm2):
    e = smollm2
    e.reset()
    e.generate(PROMPT, max_tokens=3, seed=3, **SAMPLING)
    blob, tokens = e.snapshot(), e.tokens
    e.generate("Something else entirely", max_tokens=2, seed=4)
    e.load_snapshot(blob)
    assert e.tokens == tokens
    after_load = e.generate(None, max_tokens=3)
    e.load_snapshot(blob)
    assert e.generate(None, max_tokens=3) == after_load


def test_kv_snapshot_restore_with_logits_and_no_pending_token(smollm2):
    e = smollm2
    e.reset()
    ids = e.tokenize(PROMPT)
    logits = e.forward(ids)
    state = e.kv_snapshot()
    assert isinstance(state, KVState) and state.pending is None and state.n_past == len(ids)
    np.testing.assert_array_equal(state.logits, logits)
    greedy = e.generate(None, max_tokens=5, temperature=0)
    e.generate("A different story:", max_tokens=4, temperature=0)
    e.kv_restore(state)
    assert e.tokens == list(ids)
    assert e.generate(None, max_tokens=5, temperature=0) == greedy
    # and through a blob: the logits travel with it
    e.kv_restore(state)
    e.session.sampler = None
    blob = e.snapshot()
    assert snap.decode(blob).kv.logits is not None
    e.reset()
    e.load_snapshot(blob)
    assert e.generate(None, max_tokens=5, temperature=0) == greedy


def test_kv_restore_refuses_states_that_do_not_fit(smollm2):
    e = smollm2
    e.reset()
    e.forward(e.tokenize("Hello"))
    st = e.kv_snapshot()
    with pytest.raises(InvalidArgumentError):
        e.kv_restore({"tokens": st.tokens})
    with pytest.raises(InvalidArgumentError, match="shape"):
        e.kv_restore(KVState(st.tokens, st.k[:, :-1], st.v[:, :-1]))
    with pytest.raises(InvalidArgumentError, match="shape"):
        e.kv_restore(KVState(st.tokens, st.k[:-1], st.v[:-1]))
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        e.kv_restore(KVState(st.tokens, st.k, st.v, pending=e.n_vocab))
    with pytest.raises(InvalidArgumentError, match="dtype"):
        e.kv_restore(KVState(st.tokens, st.k.astype(np.float32), st.v.astype(np.float32)))
    assert e.tokens == list(st.tokens)       # untouched by the refusals


def test_save_is_atomic_and_replaces(smollm2, tmp_path):
    e = smollm2
    e.reset()
    e.generate(PROMPT, max_tokens=2, seed=5)
    path = tmp_path / "s.oxs"
    path.write_bytes(b"old contents")
    e.save(path)
    assert path.read_bytes() == e.snapshot()
    assert os.listdir(tmp_path) == ["s.oxs"]           # no temporary file left behind
    with pytest.raises(OSError):
        e.save(tmp_path / "missing-folder" / "s.oxs")
    assert os.listdir(tmp_path) == ["s.oxs"]


def test_resume_checks_the_model_before_loading_it(smollm2, tmp_path):
    e = smollm2
    e.reset()
    e.generate(PROMPT, max_tokens=2, seed=5)
    blob = e.snapshot()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(1000))
    with pytest.raises(SnapshotError, match="another model"):
        InferenceEngine.resume(blob, other)
    with pytest.raises(InvalidArgumentError, match="cannot read model"):
        InferenceEngine.resume(blob, tmp_path / "absent.gguf")
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        InferenceEngine.resume(tmp_path / "absent.oxs", other)


def test_resume_refuses_another_real_model(smollm2, gemma3_path):
    smollm2.reset()
    smollm2.generate(PROMPT, max_tokens=2, seed=5)
    with pytest.raises(SnapshotError, match="another model"):
        InferenceEngine.resume(smollm2.snapshot(), gemma3_path)


def test_fingerprint_is_constant_time_and_tells_files_apart(tmp_path):
    a = tmp_path / "a.bin"
    data = bytearray(np.random.default_rng(0).integers(0, 256, 3 * snap.FINGERPRINT_SPAN, dtype=np.uint8))
    a.write_bytes(data)
    fa = snap.model_fingerprint(a)
    assert fa["size"] == len(data) and len(fa["head"]) == len(fa["tail"]) == 32
    data[-1] ^= 1                      # a change in the tail
    a.write_bytes(data)
    assert snap.model_fingerprint(a) != fa
    data[-1] ^= 1
    data[5] ^= 1                        # a change in the header
    a.write_bytes(data)
    assert snap.model_fingerprint(a)["head"] != fa["head"]
