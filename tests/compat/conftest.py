import pytest


@pytest.fixture(scope="module")
def llm(smollm2_path):
    from oxillama import Llama
    with Llama(model_path=smollm2_path, n_ctx=1024, seed=1234, verbose=False) as model:
        yield model
