"""GGUF open time on the real models (target: well under a second each).

    python -m pytest bench/bench_gguf.py --benchmark-only
"""
import pytest

from oxillama.gguf import GGUFFile, GGUFWriter


def _pulled(name: str) -> str:
    # bench/ does not see tests/conftest.py; same fixtures, same skip rule
    from oxillama import hub
    from oxillama.errors import DownloadError
    try:
        return str(hub.pull(name, progress=False))
    except DownloadError as e:
        pytest.skip(f"model {name} unavailable: {e}")


@pytest.fixture(scope="module")
def smollm2_path() -> str:
    return _pulled("smollm2-135m")


@pytest.fixture(scope="module")
def gemma3_path() -> str:
    return _pulled("gemma3-270m")


def _open_and_touch(path):
    with GGUFFile(path) as f:
        # what a loader does next: look at every tensor's view
        for t in f.tensors.values():
            t.data
        return f


@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_open(benchmark, which, request):
    path = request.getfixturevalue(which)
    f = benchmark.pedantic(_open_and_touch, args=(path,), rounds=5, iterations=1, warmup_rounds=1)
    assert f.tensors


def test_rewrite_smollm2(benchmark, smollm2_path, tmp_path):
    """Copy every key and tensor into a new file (the quantize/LoRA tools' path)."""
    def rewrite():
        with GGUFFile(smollm2_path) as f:
            w = GGUFWriter(tmp_path / "copy.gguf")
            w.add_metadata_from(f)
            for t in f.tensors.values():
                w.add_tensor_from(t)
            w.write()
    benchmark.pedantic(rewrite, rounds=3, iterations=1)
