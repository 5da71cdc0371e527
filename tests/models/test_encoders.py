"""Encoders for embeddings (bert, nomic-bert) against Hugging Face transformers, a numpy reference and llama.cpp.

bert.gguf: a tiny random transformers BertModel (2 layers, 4 heads, learned positions, 2 token types, a
hand-made WordPiece vocabulary, mean pooling declared as a sentence-transformers checkpoint) converted by
llama.cpp's convert_hf_to_gguf.py; bert.npz: transformers' last_hidden_state for three token lists;
bert.tokens.json: llama.cpp's (llama-cpp-python's) token ids for texts that reach every WordPiece rule. Made by
make_encoder_models.py; torch and llama.cpp are not needed here.
nomic-bert.gguf: random weights in llama.cpp's nomic-bert layout (fused QKV, RoPE over halves, SwiGLU, cls
pooling) with the same vocabulary; nomic-bert.npz: a float64 numpy restatement of nomic's NomicBertModel.
<name>.llama_cpp.json: llama-cpp-python's pooled embeddings of three texts (a second opinion on the layout)."""
import json
import os

import numpy as np
import pytest

from oxillama.errors import ContextOverflowError, InvalidArgumentError, ModelError
from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter
from oxillama.runtime import InferenceEngine
from oxillama.runtime.embeddings import hidden_states
from oxillama.tokenizer import Tokenizer

DATA = os.path.join(os.path.dirname(__file__), "data", "encoders")   # apart: decoder sweeps glob data/*.gguf
BERT = os.path.join(DATA, "bert.gguf")
F32_TOL = 1e-5      # max |ours - transformers| / max |transformers|, F32 KV (measured 3.3e-7)
F16_KV_TOL = 1e-3   # the default F16 KV cache rounds K and V (measured 1.9e-4)


LLAMA_CPP_TOL = 1e-3   # vs llama.cpp: its F16 K/V and tanh GELU, our F16 K/V (measured 2.9e-4)


def goldens(name="bert"):
    g = np.load(os.path.join(DATA, f"{name}.npz"))
    return [(g[f"tokens{i}"], g[f"hidden{i}"]) for i in range(3)]


def rel_err(out, ref):
    return float(np.abs(out - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", ["bert", "nomic-bert"])
@pytest.mark.parametrize("kv_type, tol", [("f32", F32_TOL), ("f16", F16_KV_TOL)])
def test_hidden_states_match_the_reference(name, kv_type, tol):
    with InferenceEngine.from_gguf(os.path.join(DATA, f"{name}.gguf"), n_threads=2, kv_type=kv_type) as e:
        assert e.config.arch == name and e.plan.non_causal
        for tokens, ref in goldens(name):
            out = hidden_states(e, tokens)
            assert out.shape == ref.shape
            assert rel_err(out, ref) < tol, (len(tokens), rel_err(out, ref))


def test_bert_attention_is_bidirectional():
    """The first token's state changes with a later token (a causal model's would not)."""
    tokens, _ = goldens()[1]
    changed = tokens.copy()
    changed[-2] = 7 if changed[-2] != 7 else 8
    with InferenceEngine.from_gguf(BERT) as e:
        a, b = hidden_states(e, tokens), hidden_states(e, changed)
    assert not np.array_equal(a[0], b[0])


@pytest.mark.parametrize("name", ["bert", "nomic-bert"])
def test_hidden_states_do_not_depend_on_threads_or_batch_size(name):
    path = os.path.join(DATA, f"{name}.gguf")
    tokens, _ = goldens(name)[2]
    with InferenceEngine.from_gguf(path, n_threads=1, n_batch=8) as one, \
            InferenceEngine.from_gguf(path, n_threads=2) as two:
        assert np.array_equal(hidden_states(one, tokens), hidden_states(two, tokens))


@pytest.mark.parametrize("name", ["bert", "nomic-bert"])
def test_pooled_embeddings_agree_with_llama_cpp(name):
    """llama-cpp-python's Llama(embedding=True).embed(text) on the same file, and oxillama's drop-in."""
    from oxillama import Llama
    llm = Llama(os.path.join(DATA, f"{name}.gguf"), embedding=True, verbose=False)
    for case in json.load(open(os.path.join(DATA, f"{name}.llama_cpp.json"), encoding="utf-8")):
        ours, ref = np.array(llm.embed(case["text"])), np.array(case["embedding"])
        assert rel_err(ours, ref) < LLAMA_CPP_TOL, (case["text"], rel_err(ours, ref))


def test_bert_pooling_is_the_declared_mean():
    tokens, ref = goldens()[1]
    with InferenceEngine.from_gguf(BERT, kv_type="f32") as e:
        assert e.metadata["bert.pooling_type"] == 1
        v = e.embed(tokens.tolist())
        raw = e.embed(tokens.tolist(), normalize=False)
        cls = e.embed(tokens.tolist(), pooling="cls", normalize=False)
        batch = e.embed_batch([tokens.tolist(), "hello world"])
    mean = ref.astype(np.float64).mean(0)
    np.testing.assert_allclose(raw, mean, rtol=0, atol=F32_TOL * np.abs(ref).max())
    np.testing.assert_allclose(v, mean / np.linalg.norm(mean), rtol=0, atol=F32_TOL)
    np.testing.assert_allclose(cls, ref[0], rtol=0, atol=F32_TOL * np.abs(ref).max())
    assert np.array_equal(batch[0], v)   # each input alone, whatever else is in the batch


def test_bert_compat_create_embedding():
    """llama-cpp-python's face: create_embedding pools as the file declares, unnormalised (as llama-cpp-python)."""
    from oxillama import Llama
    tokens, ref = goldens()[0]
    llm = Llama(BERT, embedding=True, verbose=False)
    out = llm.create_embedding(["hello world", "the cat sat"])
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert len(out["data"][0]["embedding"]) == 64
    v = np.array(llm.embed(tokens.tolist()))
    np.testing.assert_allclose(v, ref.astype(np.float64).mean(0), rtol=0, atol=F16_KV_TOL * np.abs(ref).max())


def test_bert_refuses_generation_and_long_inputs():
    with InferenceEngine.from_gguf(BERT) as e:
        with pytest.raises(ModelError, match="encoder"):
            e.generate("hello world", max_tokens=2)
        with pytest.raises(ModelError, match="encoder"):
            e.forward([2, 3])
        with pytest.raises(ContextOverflowError):      # 96 learned positions
            e.embed([5] * 97)
        from oxillama.runtime.scheduler import Scheduler
        with Scheduler(e, n_seq_max=2) as sched:
            with pytest.raises(InvalidArgumentError, match="encoder"):
                sched.submit("hello", max_tokens=2)


def test_imatrix_collection_refuses_encoders():
    from oxillama.quant.imatrix_collect import collect_imatrix
    with InferenceEngine.from_gguf(BERT) as e:
        with pytest.raises(ModelError, match="encoders"):
            collect_imatrix(e, "hello world the cat sat on the mat " * 10, n_ctx=32)


def test_wordpiece_tokenization_matches_llama_cpp():
    tok = Tokenizer.from_gguf(BERT)
    cases = json.load(open(os.path.join(DATA, "bert.tokens.json"), encoding="utf-8"))
    assert len(cases) >= 12
    for case in cases:
        assert tok.encode(case["text"]) == case["llama_cpp"], case["text"]
    # [CLS] text [SEP]; an unknown character makes its word [UNK]; continuation pieces decode without a space
    ids = tok.encode("unplayable ω")
    assert ids[0] == tok.vocab.special["bos"] and ids[-1] == tok.vocab.special["sep"]
    assert ids[-2] == tok.unk_id
    assert tok.decode(tok.encode("unplayable", add_special=False)) == " unplayable"


def _rewrite(tmp_path, drop=(), meta=None):
    src = GGUFFile(BERT)
    out = str(tmp_path / "bert-edit.gguf")
    w = GGUFWriter(out)
    for k, v in src.metadata.items():
        vtype, etype = src.metadata_types[k]
        w.add_metadata(k, (meta or {}).get(k, v), (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
    for name, t in src.tensors.items():
        if name not in drop:
            w.add_tensor(name, np.array(t.numpy()), qtype="F32")
    w.write()
    return out


def test_bert_bad_files_name_what_is_wrong(tmp_path):
    with pytest.raises(ModelError, match="attn_output_norm"):
        InferenceEngine.from_gguf(_rewrite(tmp_path, drop=("blk.1.attn_output_norm.weight",)))
    with pytest.raises(ModelError, match="position_embd"):
        InferenceEngine.from_gguf(_rewrite(tmp_path, drop=("position_embd.weight",)))
    with pytest.raises(ModelError, match="pooling_type"):
        InferenceEngine.from_gguf(_rewrite(tmp_path, meta={"bert.pooling_type": 9}))
