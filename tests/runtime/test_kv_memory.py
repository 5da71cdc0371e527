"""A KV cache that cannot fit in memory is an OxillamaError saying what it needs and what n_ctx fits;
n_ctx above the model's trained context logs a warning."""
import logging

import pytest

from oxillama import InferenceEngine
from oxillama.cli import main
from oxillama.errors import InsufficientMemoryError, OxillamaError
from oxillama.runtime.kv_cache import ContiguousKVCache, kv_memory_bytes

HUGE_N_CTX = 10**9      # ~ 1,000 GiB of f16 K/V for SmolLM2: more than any test machine has free


def test_cache_too_big_for_the_memory_says_what_fits(monkeypatch):
    monkeypatch.setattr("oxillama._system.available_memory", lambda: 64 * 2**20)
    per_token = kv_memory_bytes(30, 1, 192, "f16")
    with pytest.raises(InsufficientMemoryError) as err:
        ContiguousKVCache(30, 100_000, 192, "f16", n_head_kv=3)
    msg = str(err.value)
    assert "n_ctx=100000" in msg and "GiB" in msg and "64.0 MiB" in msg
    fit = int(msg.split("n_ctx (-c) ")[1].split()[0])
    assert 0 < fit * per_token <= 64 * 2**20
    ContiguousKVCache(30, fit, 192, "f16", n_head_kv=3)     # the suggestion does fit
    assert isinstance(err.value, OxillamaError) and isinstance(err.value, MemoryError)


def test_engine_with_an_impossible_context(smollm2_path, caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"), pytest.raises(InsufficientMemoryError, match="-c"):
        InferenceEngine.from_gguf(smollm2_path, n_ctx=HUGE_N_CTX)
    assert any("trained on" in r.getMessage() for r in caplog.records)


def test_n_ctx_above_trained_context_warns(smollm2_path, caplog):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=64) as e:
        trained = e.config.n_ctx_train
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        with InferenceEngine.from_gguf(smollm2_path, n_ctx=trained + 256) as e:
            assert e.n_ctx == trained + 256
    assert any(f"above the {trained} positions" in r.getMessage() for r in caplog.records)


def test_cli_reports_the_memory_error_without_a_traceback(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "-c", str(HUGE_N_CTX), "-n", "1", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("oxillama: error: a KV cache of n_ctx=") and "would fit" in err
    assert "Traceback" not in err
