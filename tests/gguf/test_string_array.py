"""StringArray: GGUF string arrays kept as one UTF-8 buffer behave as a read-only list of str."""
import numpy as np
import pytest

from oxillama.gguf import GGUFFile, GGUFWriter, StringArray

BAD = b"\xc3".decode("utf-8", "surrogateescape")     # a lone UTF-8 lead byte, as some vocabularies hold


def test_indexing_slicing_iteration_and_equality_match_a_list():
    items = ["<s>", "", "h\u00e9llo", "\u65e5\u672c", BAD, "\U0001F600 x"]
    a = StringArray.from_strings(items)
    assert len(a) == len(items) and list(a) == items and a.tolist() == items
    assert [a[i] for i in range(-len(items), len(items))] == items + items
    assert a[1:5] == items[1:5] and a[::-2] == items[::-2]
    assert a == items and a == tuple(items) and a != items[:-1] and a != items[:-1] + ["?"]
    assert a == StringArray.from_strings(items) and a != StringArray.from_strings(items[::-1])
    assert a[4].encode("utf-8", "surrogateescape") == b"\xc3"
    assert a[np.int64(2)] == items[2]
    with pytest.raises(IndexError, match="out of range"):
        a[len(items)]
    with pytest.raises(TypeError, match="integers or slices"):
        a["0"]
    with pytest.raises(TypeError):
        hash(a)


def test_offsets_that_do_not_cover_the_data_are_refused():
    with pytest.raises(ValueError, match="offsets"):
        StringArray(b"abc", np.array([0, 2]))
    with pytest.raises(ValueError, match="offsets"):
        StringArray(b"abc", np.array([0, 2, 1, 3]))
    assert len(StringArray(b"", np.array([0]))) == 0


def _write_vocabulary(path, tokens) -> str:
    w = GGUFWriter(str(path))
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("tokenizer.ggml.tokens", tokens)
    w.write()
    return str(path)


def test_a_read_vocabulary_is_compact_and_writes_back_unchanged(tmp_path):
    tokens = [f"tok{i}" for i in range(5000)] + ["\u00e9t\u00e9", BAD, ""]
    with GGUFFile(_write_vocabulary(tmp_path / "a.gguf", tokens)) as f:
        read = f.metadata["tokenizer.ggml.tokens"]
        assert isinstance(read, StringArray) and read == tokens
        assert read.nbytes < 16 * len(tokens)          # buffer + offsets, not one Python str per token
        copy = _write_vocabulary(tmp_path / "b.gguf", read)
    with GGUFFile(copy) as f:
        assert f.metadata["tokenizer.ggml.tokens"] == tokens
