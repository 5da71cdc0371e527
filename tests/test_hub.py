import os

import pytest

from oxillama import hub
from oxillama.cli import main
from oxillama.errors import DownloadError


def test_pull_puts_known_models_in_cache(smollm2_path, gemma3_path):
    assert os.path.getsize(smollm2_path) == hub.KNOWN_MODELS["smollm2-135m"].size
    assert os.path.getsize(gemma3_path) == hub.KNOWN_MODELS["gemma3-270m"].size
    assert hub.is_pulled("smollm2-135m") and hub.is_pulled("gemma3-270m")
    with open(smollm2_path, "rb") as f:
        assert f.read(4) == b"GGUF"


def test_unknown_model_is_a_clear_error():
    with pytest.raises(DownloadError, match="known models"):
        hub.pull("no-such-model")
    with pytest.raises(DownloadError, match="neither a file nor a known model"):
        hub.resolve_model("/no/such/file.gguf")


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OXILLAMA_CACHE", str(tmp_path))
    assert hub.model_path("smollm2-135m") == tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert not hub.is_pulled("smollm2-135m")


def test_pull_list(capsys, smollm2_path):
    assert main(["pull", "--list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "gemma3-270m" in out
