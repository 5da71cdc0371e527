"""Malformed files (tests/gguf/gguf_malformed.py) each end in their own GGUFError, naming the field
and the byte offset; nothing else escapes, nothing allocates more than the file holds."""
import re
import tracemalloc

import pytest

from gguf_malformed import base, cases, truncation_points, valid_variants
from oxillama.errors import GGUFError
from oxillama.gguf import GGUFFile

CASES = cases()
# Opening a file allocates Python objects for what the file holds; a bound proportional to the
# file size (plus a fixed allowance) catches any count that was trusted before it was checked.
ALLOC_PER_FILE_BYTE = 16
ALLOC_FIXED = 256 << 10


def _open(tmp_path, name: str, data: bytes) -> GGUFFile:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    return GGUFFile(path)


def test_enough_distinct_cases():
    assert len(CASES) >= 40
    assert len({name for name, _, _ in CASES}) == len(CASES)
    assert len({data for _, data, _ in CASES}) == len(CASES)


def test_base_file_is_valid(tmp_path):
    with _open(tmp_path, "base", base().tobytes()) as f:
        assert f.metadata["tokenizer.ggml.tokens"] == ["<s>", "a", "b", "ab"]
        assert f.metadata["custom.flags"].tolist() == [1, 2, 3]
        assert [(t.name, t.qtype, t.shape) for t in f.tensors.values()] == [
            ("norm.weight", "F32", (64,)), ("attn.weight", "Q8_0", (4, 64)), ("ffn.weight", "Q4_K", (2, 256))]


@pytest.mark.parametrize("name,data,pattern", CASES, ids=[c[0] for c in CASES])
def test_malformed_file_gives_its_error(tmp_path, name, data, pattern):
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError) as exc:
            _open(tmp_path, name, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(exc.value)
    assert re.search(pattern, msg), f"{name}: {msg!r} does not match {pattern!r}"
    assert re.search(r"at byte offset \d+: ", msg)
    assert exc.value.offset <= max(len(data), 0)
    assert peak < ALLOC_FIXED + ALLOC_PER_FILE_BYTE * len(data), f"{name}: peak allocation {peak} bytes"


@pytest.mark.parametrize("name,data,facts", valid_variants(), ids=[v[0] for v in valid_variants()])
def test_unusual_valid_files_open(tmp_path, name, data, facts):
    with _open(tmp_path, name, data) as f:
        for tname, (rows, cols) in facts.items():
            t = f.tensors[tname]
            assert t.shape == (rows, cols)
            assert t.data.nbytes == t.nbytes


# where a cut lands -> what the reader must say
_TRUNCATED_HEADER = r"(truncated file: needs \d+ bytes|cannot fit|is larger than the \d+ bytes left)"
_TRUNCATED_DATA = r"runs past the end of the file"


def _truncations():
    data = base().tobytes()
    header_len = len(base().header())
    for cut in truncation_points(data, header_len):
        if cut == 0:
            want = r"the file is empty"
        elif cut < 4:
            want = r"bad magic"
        elif cut < header_len:
            want = _TRUNCATED_HEADER
        else:
            want = _TRUNCATED_DATA
        yield cut, data[:cut], want


TRUNCATIONS = list(_truncations())


def test_truncation_points_cover_every_region():
    header_len = len(base().header())
    cuts = [c for c, _, _ in TRUNCATIONS]
    assert len(cuts) >= 100
    assert sum(c >= header_len for c in cuts) >= 10


@pytest.mark.parametrize("cut,data,pattern", TRUNCATIONS, ids=[f"cut{c}" for c, _, _ in TRUNCATIONS])
def test_truncated_file_gives_a_clear_error(tmp_path, cut, data, pattern):
    with pytest.raises(GGUFError) as exc:
        _open(tmp_path, f"cut{cut}", data)
    assert re.search(pattern, str(exc.value)), f"cut at {cut}: {exc.value}"
