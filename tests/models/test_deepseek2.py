"""deepseek2 (DeepSeek-V2/V3): its multi-head latent attention and its compressed KV cache, beyond the transformers
parity of test_architectures.py (data/deepseek2.gguf: V3's shape) and test_moe_transformers.py (V2-Lite's and V3's,
router choices included):

- the cache keeps one latent row per token and layer (kv_lora_rank + rope dims), V sharing K's storage;
- llama.cpp (llama-cpp-python 0.3.36) agrees on the same file (its logits kept in data/deepseek2.llama_cpp.npz);
- files in llama.cpp's legacy layout (attn_kv_b unsplit) run exactly as the split ones;
- metadata that disagrees with the tensors is a ModelError naming the key;
- snapshots, the Scheduler, prompt reuse and LoRA (attention output and FFN; a clear error for q/k/v).
No torch and no llama.cpp needed."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine, Scheduler
from oxillama.convert import convert_state_dict
from oxillama.errors import LoraError, ModelError, SnapshotError
from oxillama.gguf import GGUFFile, GGUFWriter
from oxillama.lora import LoraAdapter
from oxillama.runtime.batch import SequencePool

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from prompt_reuse import fresh_and_reused  # noqa: E402  tests/runtime/prompt_reuse.py

DATA = os.path.join(os.path.dirname(__file__), "data")
PATH = os.path.join(DATA, "deepseek2.gguf")
N_HEAD, KV_LORA_RANK, D_NOPE, D_ROPE, D_V = 4, 24, 16, 8, 16   # make_tiny_models.py's deepseek2

F16_KV_TOL = 3e-3       # max |ours - llama.cpp| / std through our default F16 cache (measured 2.1e-3; llama.cpp
                        # against transformers: 2.3e-3)
LORA_MIN_CHANGE = 1e-3  # an adapter of this scale moves the logits by far more


def golden():
    g = np.load(os.path.join(DATA, "deepseek2.npz"))
    return g["tokens"].astype(np.int32), g["logits"]


def rel_err(out, ref):
    return float(np.abs(out - ref).max() / ref.std())


def rewrite(dst, *, metadata=None, drop=(), tensors=None, src=PATH):
    """A copy of src with metadata keys (without the arch prefix) set (None: removed), tensors dropped or
    replaced (name -> float32 array)."""
    metadata, tensors = metadata or {}, tensors or {}
    with GGUFFile(src) as g:
        w = GGUFWriter(dst)
        keys = {f"deepseek2.{k}": v for k, v in metadata.items()}
        w.add_metadata_from(g, exclude=list(keys))
        for k, v in keys.items():
            if v is not None:
                w.add_metadata(k, v, type="UINT32" if isinstance(v, int) else None)
        for t in g.tensors.values():
            if t.name in drop or t.name in tensors:
                continue
            w.add_tensor_from(t)
        for name, arr in tensors.items():
            w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32), qtype="F32")
        w.write()
    return str(dst)


@pytest.fixture(scope="module")
def engine():
    with InferenceEngine.from_gguf(PATH, n_ctx=256, n_threads=2, kv_type="f32") as e:
        yield e


# ---- the compressed cache ----

def test_the_cache_holds_one_latent_row_per_token(engine):
    kv = engine.kv
    assert (kv.n_head_kv, kv.head_dim) == (1, KV_LORA_RANK + D_ROPE)
    assert kv.v is kv.k and engine.plan.kv_v_is_k
    rows = kv.k.shape[2]
    assert kv.memory_bytes() == 3 * rows * (KV_LORA_RANK + D_ROPE) * 4
    # per token and layer: 32 values, where expanded keys and values would take n_head (nope + rope + v_dim) = 160
    assert kv.bytes_per_token == 3 * (KV_LORA_RANK + D_ROPE) * 4
    pool = SequencePool(engine, 2, n_ctx=128)
    assert pool.v is pool.k and pool.memory_bytes() == pool.k.nbytes


def test_v_is_never_read(engine):
    """The forward reads an MLA layer's values from its K pages: garbage in a separate V buffer changes nothing."""
    from oxillama import _core
    toks, _ = golden()
    engine.reset()
    ref = engine.forward(toks, all_logits=True)
    k = np.zeros_like(engine.kv.k)
    v = np.full_like(engine.kv.k, 1e30)
    ctx = _core.ForwardContext(engine.plan, _core.KVBuffers(k, v), 64, 2)
    out = np.zeros(len(toks) * engine.n_vocab, dtype=np.float32)
    ctx.run(toks, 0, out, all_logits=True)
    np.testing.assert_array_equal(out.reshape(len(toks), -1), ref)


def test_matches_llama_cpp():
    g = np.load(os.path.join(DATA, "deepseek2.llama_cpp.npz"))
    with InferenceEngine.from_gguf(PATH, n_ctx=64, n_threads=2) as e:
        out = e.forward(g["tokens"].astype(np.int32), all_logits=True)
    assert rel_err(out, g["logits"]) < F16_KV_TOL
    np.testing.assert_array_equal(out.argmax(1), g["logits"].argmax(1))


def test_legacy_layout_runs_as_the_split_one(tmp_path, engine):
    """llama.cpp's files from before the split keep kv_b whole, the head sizes in key_length / value_length, and
    as many KV heads as query heads; loaded, they give the same logits bit for bit."""
    with GGUFFile(PATH) as g:
        k_b = {il: g.tensors[f"blk.{il}.attn_k_b.weight"].numpy() for il in range(3)}   # (n_head, r, nope)
        v_b = {il: g.tensors[f"blk.{il}.attn_v_b.weight"].numpy() for il in range(3)}   # (n_head, v_dim, r)
    kv_b = {f"blk.{il}.attn_kv_b.weight": np.concatenate([k_b[il].transpose(0, 2, 1), v_b[il]], axis=1).reshape(
        -1, KV_LORA_RANK) for il in range(3)}
    legacy = rewrite(tmp_path / "legacy.gguf", tensors=kv_b,
                     drop=[f"blk.{il}.attn_{n}_b.weight" for il in range(3) for n in "kv"],
                     metadata={"attention.key_length": D_NOPE + D_ROPE, "attention.value_length": D_V,
                               "attention.head_count_kv": N_HEAD, "attention.key_length_mla": None,
                               "attention.value_length_mla": None})
    toks, _ = golden()
    engine.reset()
    ref = engine.forward(toks, all_logits=True)
    with InferenceEngine.from_gguf(legacy, n_ctx=256, n_threads=2, kv_type="f32") as e:
        assert e.kv.head_dim == KV_LORA_RANK + D_ROPE
        np.testing.assert_array_equal(e.forward(toks, all_logits=True), ref)


# ---- bad input ----

@pytest.mark.parametrize("metadata,drop,key", [
    ({"attention.kv_lora_rank": 20}, (), "kv_lora_rank"),
    ({"rope.dimension_count": 6}, (), "rope.dimension_count"),
    ({"rope.dimension_count": 7}, (), "rope.dimension_count"),
    ({"attention.key_length_mla": 30}, (), "key_length_mla"),
    ({"attention.value_length_mla": 8}, (), "value_length_mla"),
    ({"attention.q_lora_rank": 40}, (), "q_lora_rank"),
    ({"attention.q_lora_rank": None}, (), "q_lora_rank"),
    ({"attention.key_length": 40}, (), "key_length"),
    ({"attention.value_length": 16}, (), "value_length"),
    ({"attention.head_count": 8}, (), "head_count"),
    ({"attention.kv_lora_rank": None}, (), "kv_lora_rank"),
    ({"expert_group_count": 3}, (), "expert_group_count"),
    ({"expert_group_used_count": 5}, (), "expert_group_used_count"),
    ({"leading_dense_block_count": 0}, (), "ffn_gate_inp"),
    ({}, ("blk.0.attn_kv_a_norm.weight",), "attn_kv_a_norm"),
    ({}, ("blk.1.attn_v_b.weight",), "attn_v_b"),
])
def test_bad_metadata_is_a_model_error_naming_the_key(tmp_path, metadata, drop, key):
    path = rewrite(tmp_path / "bad.gguf", metadata=metadata, drop=drop)
    with pytest.raises(ModelError, match=key):
        InferenceEngine.from_gguf(path, n_ctx=64)


# ---- through the engine: snapshots, the Scheduler, prompt reuse, LoRA ----

def test_snapshot_resumes_token_for_token(engine, tmp_path):
    ids = golden()[0][:20].tolist()
    engine.reset()
    full = engine.generate(ids, max_tokens=16, temperature=0).tokens
    engine.reset()
    first = engine.generate(ids, max_tokens=6, temperature=0).tokens
    engine.save(tmp_path / "s.oxl")
    with InferenceEngine.resume(tmp_path / "s.oxl", PATH, n_threads=1) as r:
        assert r.kv.v is r.kv.k
        rest = r.generate(None, max_tokens=10, temperature=0).tokens
    assert first + rest == full


def test_snapshot_stores_the_latent_rows_once(engine, tmp_path):
    """The values are the K rows: a snapshot holds them once (format 4); a format-3 blob with both still loads."""
    import msgpack
    from oxillama.runtime import snapshot as snap
    ids = golden()[0][:20].tolist()
    engine.reset()
    full = engine.generate(ids, max_tokens=12, temperature=0).tokens
    engine.reset()
    first = engine.generate(ids, max_tokens=4, temperature=0).tokens
    blob = engine.snapshot()
    body = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    assert body["v"] is None and len(body["k"]) == engine.kv.n_layer * engine.kv.n_past * engine.kv.kv_dim * engine.kv.k.itemsize
    decoded = snap.decode(blob)
    assert decoded.kv.v is decoded.kv.k and decoded.kv.memory_bytes() == len(body["k"])
    body["v"] = body["k"]                                 # how format 3 wrote it: K and V both
    (tmp_path / "v3.oxl").write_bytes(snap.frame(msgpack.packb(body, use_bin_type=True), version=3))
    with InferenceEngine.resume(tmp_path / "v3.oxl", PATH, n_threads=1) as r:
        rest = r.generate(None, max_tokens=8, temperature=0).tokens
    assert first + rest == full
    body["v"] = None                                      # nil v is format 4's: a format-3 header with it is refused
    with pytest.raises(SnapshotError, match="field 'v' must be bytes"):
        snap.decode(snap.frame(msgpack.packb(body, use_bin_type=True), version=3))


def test_prompt_cache_holds_the_latent_rows_once(engine):
    """V is K's rows: the prompt cache keeps one array per edge, also after an edge is split, counts it once, and
    restores the same rows."""
    from oxillama.runtime.prefix_cache import PrefixKvCache
    ids = golden()[0][:24].tolist()
    other = ids[:10] + [3, 4, 5]
    engine.reset()
    engine.generate(ids, max_tokens=1, temperature=0)
    want, _ = engine.kv.read(0, 24)
    cache = PrefixKvCache()
    cache.insert(ids, engine.kv)
    row = engine.kv.n_layer * engine.kv.kv_dim * engine.kv.k.itemsize
    assert cache.nbytes == 24 * row
    engine.reset()
    engine.generate(other, max_tokens=1, temperature=0)
    cache.insert(other, engine.kv)                        # splits the first edge after 10 tokens
    assert cache.nbytes == (24 + 3) * row
    nodes = list(cache._nodes())
    assert len(nodes) == 3 and all(n.v is n.k for n in nodes)
    engine.reset()
    assert cache.restore(ids, engine.kv) == 24
    got_k, got_v = engine.kv.read(0, 24)
    assert np.array_equal(got_k, want) and got_v is got_k


def test_scheduler_writes_what_generate_writes(engine):
    prompts = [golden()[0][:n].tolist() for n in (5, 30, 17, 32)]
    with Scheduler(engine, n_seq_max=3) as sched:
        outs = [h.result(120) for h in [sched.submit(p, max_tokens=8, temperature=0) for p in prompts]]
    for p, out in zip(prompts, outs):
        engine.reset()
        assert out.tokens == engine.generate(p, max_tokens=8, temperature=0).tokens


def test_prompt_reuse_gives_the_fresh_text(engine):
    base = golden()[0][:24].tolist()
    prompts = [base, base + [5, 6, 7], base[:10] + [9], base + [5, 6, 7, 8]]
    want, got, reused = fresh_and_reused(engine, PATH, prompts, 10, kv_type="f32")
    assert got == want
    assert reused[1] > 0 and reused[3] > 0


def _adapter(names, rank=4, seed=0):
    rng = np.random.default_rng(seed)
    with GGUFFile(PATH) as g:
        shapes = {n: g.tensors[n].shape for n in names}
    return LoraAdapter({n: (rng.standard_normal((rank, s[1])).astype(np.float32) * 0.3,
                            rng.standard_normal((s[0], rank)).astype(np.float32) * 0.3) for n, s in shapes.items()},
                       alpha=rank, arch="deepseek2")


def test_lora_on_the_attention_output_and_ffns(engine):
    """attn_output of every layer, the dense block's FFN and a MoE block's shared expert: the logits move, and a
    sequence with the adapter beside one without gets its own, each as it would alone."""
    toks = golden()[0]
    adapter = _adapter(["blk.0.attn_output.weight", "blk.2.attn_output.weight", "blk.0.ffn_up.weight",
                        "blk.0.ffn_down.weight"])
    engine.reset()
    plain = engine.forward(toks, all_logits=True)
    engine.reset()
    adapted = engine.generate(toks.tolist(), max_tokens=1, temperature=0, lora=[(adapter, 1.0)], logprobs=None)
    engine.reset()
    engine.add_lora(adapter, 1.0)
    try:
        with_lora = engine.forward(toks, all_logits=True)
    finally:
        engine.clear_loras()
    assert rel_err(with_lora, plain) > LORA_MIN_CHANGE
    assert adapted.tokens[0] == int(with_lora[-1].argmax())


def test_lora_on_latent_attention_q_is_a_clear_error(tmp_path):
    """V2-Lite's shape has a plain attn_q: an adapter of it cannot be applied (the query is absorbed)."""
    d = os.path.join(DATA, "hf_moe")
    with open(os.path.join(d, "deepseek_v2.config.json"), encoding="utf-8") as f:
        config = json.load(f)
    path = convert_state_dict(dict(np.load(os.path.join(d, "deepseek_v2.npz"))), config, tmp_path / "v2.gguf")
    rng = np.random.default_rng(1)
    adapter = LoraAdapter({"blk.1.attn_q.weight": (rng.standard_normal((2, 64)).astype(np.float32),
                                                   rng.standard_normal((N_HEAD * (D_NOPE + D_ROPE), 2)).astype(
                                                       np.float32))}, arch="deepseek2")
    with InferenceEngine.from_gguf(path, n_ctx=64) as e:
        with pytest.raises(LoraError, match="latent attention"):
            e.add_lora(adapter)
            e.forward(golden()[0][:4])
