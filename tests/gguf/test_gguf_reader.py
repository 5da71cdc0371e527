"""GGUFFile on the two real models: header values, tensor table, zero-copy views, lifetime.

llama.cpp's own reader (the PyPI `gguf` package) is the oracle, through goldens made by make_goldens.py.
"""
import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np
import pytest

from oxillama.errors import GGUFError, OxillamaError
from oxillama.gguf import GGUFFile, GGUFValueType, TensorInfo
from oxillama.quant.types import TYPES, type_info

GOLDENS = os.path.join(os.path.dirname(__file__), "goldens")


def _check_tensor_table(f: GGUFFile):
    """Every tensor's bytes agree with its shape and type, lie inside the file, in order, aligned."""
    end = f.data_offset
    for t in f.tensors.values():
        info = type_info(t.qtype)
        assert t.type_info is info and info.qtype == t.qtype_id
        assert t.shape == tuple(reversed(t.ggml_shape))
        n = int(np.prod(t.shape, dtype=np.int64))
        assert t.n_elements == n
        assert t.ggml_shape[0] % info.block_size == 0
        rows = n // t.ggml_shape[0]
        assert t.nbytes == info.row_bytes(t.ggml_shape[0]) * rows
        assert (t.offset - f.data_offset) % f.alignment == 0
        assert t.offset >= end
        end = t.offset + t.nbytes
        assert t.data.nbytes == t.nbytes and t.data.dtype == np.uint8
    assert end <= f.file_size


def test_smollm2_header(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        assert f.version == 3
        assert f.architecture == "llama"
        assert f.alignment == 32 and f.data_offset % 32 == 0
        md = f.metadata
        assert md["llama.block_count"] == 30 and type(md["llama.block_count"]) is int
        assert md["llama.embedding_length"] == 576
        assert md["llama.attention.head_count"] == 9 and md["llama.attention.head_count_kv"] == 3
        assert md["llama.rope.freq_base"] == 100000.0
        assert isinstance(md["llama.attention.layer_norm_rms_epsilon"], float)
        assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "smollm"
        tokens = md["tokenizer.ggml.tokens"]
        assert isinstance(tokens, Sequence) and len(tokens) == 49152 and tokens[:3] == ["<|endoftext|>", "<|im_start|>",
                                                                                     "<|im_end|>"]
        assert md["tokenizer.ggml.merges"][0] == "Ġ t"
        tt = md["tokenizer.ggml.token_type"]
        assert isinstance(tt, np.ndarray) and tt.dtype == np.int32 and tt.shape == (49152,)
        assert md["tokenizer.ggml.add_bos_token"] is False
        assert md["tokenizer.ggml.bos_token_id"] == 1 and md["tokenizer.ggml.eos_token_id"] == 2
        assert f.metadata_types["tokenizer.ggml.merges"] == (GGUFValueType.ARRAY, GGUFValueType.STRING)
        assert f.metadata_types["llama.block_count"] == (GGUFValueType.UINT32, None)
        assert f.hparams["block_count"] == 30 and "tokenizer.ggml.model" not in f.hparams
        assert len(f.tensors) == 272
        emb = f.tensors["token_embd.weight"]
        assert isinstance(emb, TensorInfo)
        assert emb.qtype == "Q8_0" and emb.shape == (49152, 576) and emb.ggml_shape == (576, 49152)
        assert f.tensors["blk.0.ffn_down.weight"].qtype == "Q4_1"
        assert f.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
        assert {t.qtype for t in f.tensors.values()} == {"F32", "Q4_1", "Q8_0"}
        _check_tensor_table(f)


def test_gemma3_header(gemma3_path):
    with GGUFFile(gemma3_path) as f:
        assert f.architecture == "gemma3"
        assert f.metadata["gemma3.attention.sliding_window"] == 512
        assert f.metadata["gemma3.attention.key_length"] == 256
        tokens = f.metadata["tokenizer.ggml.tokens"]
        assert len(tokens) == 262144 and tokens[:3] == ["<pad>", "<eos>", "<bos>"]
        scores = f.metadata["tokenizer.ggml.scores"]
        assert scores.dtype == np.float32 and scores.shape == (262144,)
        assert f.metadata["tokenizer.ggml.model"] == "llama"
        assert f.metadata["tokenizer.ggml.add_bos_token"] is True
        assert {t.qtype for t in f.tensors.values()} >= {"Q5_0", "Q4_K", "Q6_K", "Q8_0", "F32"}
        assert f.tensors["token_embd.weight"].shape == (262144, 640)
        _check_tensor_table(f)


def _digest_strings(strings) -> str:
    h = hashlib.sha256()
    for s in strings:
        raw = s.encode("utf-8", "surrogateescape")
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


@pytest.mark.parametrize("which,golden", [("smollm2_path", "smollm2.json"), ("gemma3_path", "gemma3.json")])
def test_agrees_with_llama_cpp_reader(which, golden, request):
    """Everything llama.cpp's reader (PyPI gguf, see make_goldens.py) saw in the file, we see too."""
    with open(os.path.join(GOLDENS, golden)) as fh:
        want = json.load(fh)
    path = request.getfixturevalue(which)
    with GGUFFile(path) as f:
        assert f.file_size == want["file_size"] and f.data_offset == want["data_offset"]
        assert [t.name for t in f.tensors.values()] == [t["name"] for t in want["tensors"]]
        for wt in want["tensors"]:
            t = f.tensors[wt["name"]]
            assert (t.qtype_id, list(t.ggml_shape), t.offset, t.nbytes) == \
                (wt["type"], wt["ggml_shape"], wt["offset"], wt["nbytes"]), t.name
        assert list(f.metadata) == list(want["metadata"])
        for key, w in want["metadata"].items():
            got = f.metadata[key]
            vtype, etype = f.metadata_types[key]
            assert vtype == w["type"], key
            if vtype == GGUFValueType.ARRAY:
                assert etype == w["element_type"] and len(got) == w["length"], key
                if etype == GGUFValueType.STRING:
                    assert _digest_strings(got) == w["sha256"], key
                else:
                    assert hashlib.sha256(got.tobytes()).hexdigest() == w["sha256"], key
            else:
                assert got == w["value"], key


def test_tensor_data_is_a_zero_copy_view(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        t = f.tensors["output_norm.weight"]
        view = t.data
        assert not view.flags.owndata and not view.flags.writeable
        with open(smollm2_path, "rb") as raw:
            raw.seek(t.offset)
            assert raw.read(t.nbytes) == view.tobytes()
        w = t.numpy()
        assert w.dtype == np.float32 and w.shape == (576,) and np.shares_memory(w, view)
        assert np.all(np.isfinite(w)) and 0.01 < np.abs(w).mean() < 100   # an RMSNorm weight, not noise


def test_views_outlive_close_and_data_after_close_raises(smollm2_path):
    f = GGUFFile(smollm2_path)
    t = f.tensors["output_norm.weight"]
    view = t.data
    before = view.tobytes()
    f.close()
    assert f.closed
    assert view.tobytes() == before        # the view keeps the map alive
    with pytest.raises(GGUFError, match="closed"):
        t.data
    assert f.metadata["llama.block_count"] == 30   # metadata is plain Python, copied out of the map
    f.close()                                      # idempotent


def test_context_manager_closes(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        assert not f.closed
    assert f.closed


def test_missing_file_is_a_gguf_error(tmp_path):
    with pytest.raises(GGUFError, match="cannot open.*No such file"):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="not a regular file"):
        GGUFFile(tmp_path)
    fifo = tmp_path / "fifo.gguf"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        with pytest.raises(GGUFError, match="not a regular file"):   # and no blocking open()
            GGUFFile(fifo)
    assert issubclass(GGUFError, OxillamaError)


def test_every_type_in_the_table_is_readable():
    # the reader takes sizes from oxillama.quant.types; a type missing there would be "unknown"
    from oxillama.gguf.reader import _TYPE_BY_ID
    assert set(_TYPE_BY_ID) == {int(t) for t in TYPES}
