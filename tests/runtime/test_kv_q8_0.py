"""The Q8_0 KV cache (type_k / type_v = "q8_0"): half the bytes of f16, close to its logits."""
import json
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine
from oxillama.runtime.kv_cache import ContiguousKVCache

TEXT = Path(__file__).parent.parent / "data" / "fixed_text.txt"
N_TEXT = 512
CHUNK = 64
# The bar is llama.cpp's own Q8_0 cache against its F16 one on the same 512 tokens (make_llamacpp_logprobs.py,
# flash attention): mean KL 0.00375 / 0.00726, top-1 0.965 / 0.934 (SmolLM2 / Gemma 3): the format's error.
# oxillama measures KL 0.00385 / 0.00692, top-1 0.949 / 0.957 on this text. Allowed: 1.5x llama.cpp's KL and
# its top-1 less 0.03; and where f16's top two are CLEAR_MARGIN apart, every top-1 the same.
LLAMACPP_Q8_0 = json.loads((Path(__file__).parent / "data" / "llamacpp_logprobs.json").read_text())["q8_0_vs_f16"]
KL_FACTOR = 1.5
TOP1_SLACK = 0.03
CLEAR_MARGIN = 1.0


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_q8_0_cache_stays_close_to_f16_on_real_text(name, request):
    path = request.getfixturevalue(f"{name}_path")
    with InferenceEngine.from_gguf(path, n_ctx=N_TEXT) as f16, \
            InferenceEngine.from_gguf(path, n_ctx=N_TEXT, type_k="q8_0", type_v="q8_0") as q8:
        assert q8.kv.memory_bytes() < 0.6 * f16.kv.memory_bytes()
        ids = f16.tokenize(TEXT.read_text(encoding="utf-8"))[:N_TEXT]
        assert len(ids) == N_TEXT
        kls, agree, clear = [], [], []
        for start in range(0, N_TEXT, CHUNK):
            a = log_softmax(f16.forward(ids[start:start + CHUNK], all_logits=True).astype(np.float64))
            b = log_softmax(q8.forward(ids[start:start + CHUNK], all_logits=True).astype(np.float64))
            kls.append((np.exp(a) * (a - b)).sum(axis=-1))
            agree.append(a.argmax(axis=-1) == b.argmax(axis=-1))
            top2 = np.sort(a, axis=-1)[:, -2:]
            clear.append(top2[:, 1] - top2[:, 0] >= CLEAR_MARGIN)
        kl, agree, clear = np.concatenate(kls).mean(), np.concatenate(agree), np.concatenate(clear)
        top1 = agree.mean()
        bar = LLAMACPP_Q8_0[name]
        assert kl <= KL_FACTOR * bar["mean_kl"], f"mean KL {kl:.5f}, llama.cpp's {bar['mean_kl']}"
        assert top1 >= bar["top1"] - TOP1_SLACK, f"top-1 agreement {top1:.3f}, llama.cpp's {bar['top1']}"
        assert clear.sum() >= 100 and agree[clear].all(), f"top-1 differs at {(~agree[clear]).sum()} clear positions"


def test_q8_0_cache_rows_round_trip():
    """read() gives float rows, write() takes them; writing back what was read changes no stored byte, so
    snapshots and the prefix cache carry a q8_0 session exactly."""
    rng = np.random.default_rng(0)
    c = ContiguousKVCache(2, 40, 64, "q8_0", n_head_kv=2)
    k = rng.standard_normal((2, 33, 64)).astype(np.float32)
    v = rng.standard_normal((2, 33, 64)).astype(np.float32)
    c.write(k, v, 0)
    rk, rv = c.read()
    assert rk.dtype == np.float32 and rk.shape == k.shape
    np.testing.assert_allclose(rk, k, atol=np.abs(k).max() / 127)
    stored = c.k.copy(), c.v.copy()
    c.write(rk, rv, 0)
    np.testing.assert_array_equal(c.k, stored[0])
    np.testing.assert_array_equal(c.v, stored[1])
    assert c.bytes_per_token == 2 * 2 * 64 // 32 * 34
