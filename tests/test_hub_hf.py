"""Models from Hugging Face: hf://ORG/REPO[:QUANT] in pull / run / list / rm and Llama.from_pretrained,
through huggingface_hub and its cache, against a stand-in Hub on loopback (HF_ENDPOINT), never the
internet."""
from __future__ import annotations

from pathlib import Path

import pytest

from oxillama import hub
from oxillama.cli import main
from oxillama.errors import DownloadError

huggingface_hub = pytest.importorskip("huggingface_hub")
hf_constants = pytest.importorskip("huggingface_hub.constants")

from hf_standin import StandInHub  # noqa: E402

TINY = Path(__file__).resolve().parent / "models" / "data" / "llama.gguf"
REPO = "test-org/tiny-GGUF"
TOKEN = "hf_standin_token"


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in Hub with one GGUF repository in two 'quants', and a fresh Hugging Face and oxillama
    cache under tmp_path."""
    data = TINY.read_bytes()
    repos = {REPO: {"README.md": b"# tiny\n", "tiny-Q8_0.gguf": data, "tiny-F16.gguf": data}}
    with StandInHub(repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("OXILLAMA_CACHE", str(tmp_path / "oxillama"))
        monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
        yield server


def test_pull_run_list_and_rm_a_hugging_face_model(standin, capsys):
    ref = f"hf://{REPO}:Q8_0"
    assert main(["pull", ref]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.read_bytes() == TINY.read_bytes()
    assert str(path).startswith(str(hf_constants.HF_HUB_CACHE))     # huggingface_hub's cache
    assert standin.downloads() == [f"/{REPO}/resolve/main/tiny-Q8_0.gguf"]
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in standin.requests)     # HF_TOKEN was sent

    assert main(["run", "-m", ref, "--raw", "--temp", "0", "-n", "3", "-c", "64", "hello"]) == 0
    assert len(standin.downloads()) == 1                                           # from the cache

    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert f"hf://{REPO}:tiny-Q8_0.gguf" in listed and str(path) in listed
    assert main(["rm", ref]) == 0
    assert "deleted" in capsys.readouterr().out and not path.exists()
    assert main(["list"]) == 0
    assert REPO not in capsys.readouterr().out
    assert main(["rm", ref]) == 1
    assert "not in the cache" in capsys.readouterr().err


def test_a_cached_model_runs_when_the_hub_is_gone(standin, capsys):
    ref = f"hf://{REPO}:F16"
    path = hub.resolve_model(ref)
    standin.close()
    assert hub.resolve_model(ref) == path


@pytest.mark.parametrize("ref, message", [
    ("hf://test-org/missing", "no such repository"),
    (f"hf://{REPO}:Q5_0", "no GGUF file for 'Q5_0'; it has: F16, Q8_0"),
    (f"hf://{REPO}:nothere.gguf", "no such file"),
    ("hf://just-a-name", "hf://ORG/REPO or hf://ORG/REPO:QUANT"),
])
def test_bad_references_are_one_line_errors(standin, capsys, ref, message):
    assert main(["pull", ref]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_from_pretrained_takes_a_file_name_pattern(standin, tmp_path):
    from oxillama import Llama
    llm = Llama.from_pretrained(REPO, "*Q8_0.gguf", cache_dir=str(tmp_path / "elsewhere"), n_ctx=64, verbose=False)
    try:
        assert llm.model_path.startswith(str(tmp_path / "elsewhere"))
        assert llm.tokenize(b"hello")
    finally:
        llm.close()
    with pytest.raises(DownloadError, match="matches 2 files"):
        Llama.from_pretrained(REPO, "*.gguf")
    with pytest.raises(DownloadError, match="no file"):
        Llama.from_pretrained(REPO, "*Q2_K*.gguf")


@pytest.mark.parametrize("quant, picked", [
    (None, "m-Q4_K_M.gguf"), ("q8_0", "m-Q8_0.gguf"), ("IQ4_XS", "m-IQ4_XS.gguf"), ("m-Q4_K_S.gguf", "m-Q4_K_S.gguf"),
])
def test_which_file_a_quant_picks(quant, picked):
    files = ["README.md", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "m-IQ4_XS.gguf", "mmproj-m-f16.gguf"]
    assert hub.hf_pick_file("o/r", files, quant) == picked
    with pytest.raises(DownloadError, match="no GGUF file for 'Q4_K'"):      # Q4_K is not Q4_K_M
        hub.hf_pick_file("o/r", files, "Q4_K")
    assert hub.hf_pick_file("o/r", ["README.md", "only-F16.gguf"], None) == "only-F16.gguf"
    with pytest.raises(DownloadError, match=r"has 2 GGUF files: pick one with hf://o/r:QUANT \(F16, Q6_K\)"):
        hub.hf_pick_file("o/r", ["m-F16.gguf", "m-Q6_K.gguf"], None)


def test_a_download_in_a_terminal_shows_a_progress_bar(standin, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    import os
    import sys
    import oxillama
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"),
               PYTHONPATH=str(Path(oxillama.__file__).resolve().parents[1]))     # the package under test
    out = pexpect.run(f"{sys.executable} -m oxillama pull hf://{REPO}:F16", env=env, encoding="utf-8", timeout=120,
                      cwd=str(tmp_path))
    assert "tiny-F16.gguf: 100%" in out, out
    assert out.rstrip().endswith("tiny-F16.gguf")
