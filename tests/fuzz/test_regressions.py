"""Inputs bench/fuzz.py found, kept as regression tests."""
import numpy as np
import pytest

from oxillama.errors import TokenizerError

from .targets import tokenizer_setup


def test_decode_ids_holding_numpy_values():
    """[np.True_, 63] passed the id check (np.asarray made the bool an int) and indexed a list: TypeError."""
    tok = tokenizer_setup()
    with pytest.raises(TokenizerError, match="bools"):
        tok.decode([np.True_, 63])
    with pytest.raises(TokenizerError, match="bools"):
        tok.decode([True, 63])
    assert tok.decode([np.int64(63), 64]) == tok.decode([63, 64])
