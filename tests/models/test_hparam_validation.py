"""Hostile hyper-parameters (issue 22): a model file whose metadata is out of range, inconsistent or of
the wrong type is refused with a ModelError before a plan is built -- never an OverflowError from the
C plan or a ZeroDivisionError."""
import os

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import GGUFError, ModelError, OxillamaError
from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter

DATA = os.path.join(os.path.dirname(__file__), "data")


def rewrite(src: str, dst, changes: dict, types: dict | None = None) -> str:
    """A copy of the GGUF file `src` with metadata values replaced (value None: key removed)."""
    types = types or {}
    with GGUFFile(src) as f:
        w = GGUFWriter(dst)
        arch = f.architecture
        for key, value in f.metadata.items():
            short = key[len(arch) + 1:] if key.startswith(arch + ".") else key
            if short in changes:
                continue
            vtype, etype = f.metadata_types[key]
            w.add_metadata(key, value, (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
        for short, value in changes.items():
            if value is not None:
                w.add_metadata(f"{arch}.{short}", value, types.get(short, GGUFValueType.UINT32))
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()
    return str(dst)


U32 = GGUFValueType.UINT32
F32 = GGUFValueType.FLOAT32
CASES = [  # (model, {key: value}, {key: type}, words the error must contain)
    ("llama", {"feed_forward_length": 2**31}, {}, "feed_forward_length"),
    ("llama", {"rope.dimension_count": 2**31}, {}, "rope.dimension_count"),
    ("llama", {"attention.key_length": 2**31}, {}, "attention.key_length"),
    ("llama", {"embedding_length": 2**31}, {}, "embedding_length"),
    ("llama", {"embedding_length": 7}, {}, "embedding_length"),
    ("mistral", {"attention.sliding_window": 2**31}, {}, "attention.sliding_window"),
    ("llama", {"attention.key_length": 0}, {}, "attention.key_length"),
    ("llama", {"attention.head_count": 0}, {}, "attention.head_count"),
    ("llama", {"attention.head_count_kv": 0}, {}, "attention.head_count_kv"),
    ("llama", {"attention.head_count_kv": 3}, {}, "head_count"),
    ("llama", {"block_count": 0}, {}, "block_count"),
    ("llama", {"block_count": 2**32 - 1}, {}, "block_count"),
    ("llama", {"feed_forward_length": 5}, {}, "feed_forward_length"),
    ("llama", {"rope.dimension_count": 3}, {}, "rope.dimension_count"),
    ("llama", {"context_length": 0}, {}, "context_length"),
    ("llama", {"rope.freq_base": float("inf")}, {"rope.freq_base": F32}, "rope.freq_base"),
    ("llama", {"rope.freq_base": float("nan")}, {"rope.freq_base": F32}, "rope.freq_base"),
    ("llama", {"attention.layer_norm_rms_epsilon": -1.0}, {"attention.layer_norm_rms_epsilon": F32}, "epsilon"),
    ("llama", {"attention.head_count": "eight"}, {"attention.head_count": GGUFValueType.STRING}, "head_count"),
    ("llama", {"rope.scaling.type": "yarn", "rope.scaling.factor": float("inf")},
     {"rope.scaling.type": GGUFValueType.STRING, "rope.scaling.factor": F32}, "rope.scaling.factor"),
    ("gemma2", {"attention.sliding_window_pattern": 2**31}, {}, "sliding_window_pattern"),
    ("gemma2", {"final_logit_softcapping": float("nan")}, {"final_logit_softcapping": F32}, "softcapping"),
    ("gemma2", {"attention.scale": -1.0}, {"attention.scale": F32}, "attention.scale"),
    ("command-r", {"logit_scale": float("inf")}, {"logit_scale": F32}, "logit_scale"),
]


@pytest.mark.parametrize("model, changes, types, word", CASES, ids=[f"{c[0]}-{next(iter(c[1]))}-{i}"
                                                                  for i, c in enumerate(CASES)])
def test_bad_hyper_parameters_are_model_errors(tmp_path, model, changes, types, word):
    path = rewrite(os.path.join(DATA, f"{model}.gguf"), tmp_path / "m.gguf", changes, types)
    with pytest.raises(ModelError, match=word.replace(".", r"\.")):
        InferenceEngine.from_gguf(path, n_ctx=32)


def test_unchanged_copy_still_loads(tmp_path):
    path = rewrite(os.path.join(DATA, "llama.gguf"), tmp_path / "m.gguf", {})
    with InferenceEngine.from_gguf(path, n_ctx=32) as e:
        assert e.forward([1, 2]).shape == (e.n_vocab,)


def test_empty_tensor_with_a_huge_dimension(tmp_path):
    """A 0-element tensor of shape (2**62, 0) opened, then TensorInfo.numpy() raised a bare ValueError."""
    w = GGUFWriter(tmp_path / "e.gguf")
    w.add_metadata("general.architecture", "llama", GGUFValueType.STRING)
    w.add_tensor("ok", np.zeros((2, 4), np.float32))
    w.write()
    raw = bytearray((tmp_path / "e.gguf").read_bytes())
    with GGUFFile(tmp_path / "e.gguf") as f:
        pos = f.tensor_info_offset + 8 + len("ok") + 4       # name length, name, n_dims
    raw[pos:pos + 16] = (0).to_bytes(8, "little") + (1 << 62).to_bytes(8, "little")
    (tmp_path / "bad.gguf").write_bytes(bytes(raw))
    try:
        with GGUFFile(tmp_path / "bad.gguf") as f:
            f.tensors["ok"].numpy()
    except OxillamaError as e:
        assert isinstance(e, GGUFError) and "too large" in str(e)
    else:
        pytest.fail("opened a (2**62, 0) tensor")
