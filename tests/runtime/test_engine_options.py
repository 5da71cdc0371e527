"""Engine keywords of llama.cpp / llama-cpp-python: n_seq_max and type_k / type_v."""
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.errors import InvalidArgumentError

TINY = Path(__file__).parent.parent / "models" / "data" / "llama.gguf"


@pytest.mark.parametrize("kw", [dict(type_k="f32", type_v="f32"), dict(type_k=0), dict(type_v="F32")])
def test_type_k_and_type_v_choose_the_cache_type(kw):
    with InferenceEngine.from_gguf(TINY, n_ctx=64, **kw) as e:
        assert e.kv.kv_type == "f32" and e.kv.k.dtype == np.float32


@pytest.mark.parametrize("kw, match", [
    (dict(type_k="q9_9"), "kv_type must be one of"),
    (dict(type_k="f16", type_v="f32"), "differ"),
    (dict(type_k=2), "not supported yet"),
    (dict(type_k="q8_0"), "multiple of 32"),     # the tiny llama's head_dim is 16
    (dict(type_v=1.5), "type name or GGML type id"),
    (dict(n_seq_max=0), "n_seq_max"),
    (dict(n_seq_max="4"), "n_seq_max"),
])
def test_bad_engine_keywords_are_named(kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        InferenceEngine.from_gguf(TINY, n_ctx=64, **kw)


def test_n_seq_max_is_kept():
    with InferenceEngine.from_gguf(TINY, n_ctx=64, n_seq_max=6) as e:
        assert e.n_seq_max == 6
