"""Fixtures for the tokenizer tests: the two real models' tokenizers (built once per session) and goldens."""
import pytest

from .helpers import load_golden


def _metadata(path: str) -> dict:
    from oxillama.gguf import GGUFFile

    with GGUFFile(path) as f:
        return dict(f.metadata)


@pytest.fixture(scope="session")
def smollm2_metadata(smollm2_path) -> dict:
    return _metadata(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_metadata(gemma3_path) -> dict:
    return _metadata(gemma3_path)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_metadata):
    from oxillama.tokenizer import Tokenizer

    return Tokenizer.from_metadata(smollm2_metadata)


@pytest.fixture(scope="session")
def gemma3_tokenizer(gemma3_metadata):
    from oxillama.tokenizer import Tokenizer

    return Tokenizer.from_metadata(gemma3_metadata)


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def real_model(request):
    """(name, tokenizer, goldens) for each real model."""
    name = request.param
    tok = request.getfixturevalue(f"{name}_tokenizer")
    return name, tok, load_golden(f"goldens_{name}.json")
