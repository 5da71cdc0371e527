import pytest

from oxillama.runtime import InferenceEngine


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=512) as engine:
        yield engine


@pytest.fixture(scope="session")
def gemma3(gemma3_path):
    with InferenceEngine.from_gguf(gemma3_path, n_ctx=512) as engine:
        yield engine


@pytest.fixture(params=["smollm2", "gemma3"])
def engine(request):
    e = request.getfixturevalue(request.param)
    e.reset()
    return e
