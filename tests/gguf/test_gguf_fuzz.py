"""Hypothesis mutates real GGUF headers (SmolLM2's); the reader either opens the result with a
consistent tensor table or raises GGUFError -- never anything else."""
import os
import struct

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from oxillama.errors import GGUFError  # noqa: E402
from oxillama.gguf import GGUFFile, GGUFWriter, GGUFValueType  # noqa: E402

# Bounded time: the full header (49k tokens and merges) takes ~0.1 s to parse, the trimmed one ~2 ms.
# OXILLAMA_FUZZ_SCALE=N runs N times more examples with a random seed (a longer hunt by hand).
FUZZ_SCALE = int(os.environ.get("OXILLAMA_FUZZ_SCALE", "1"))
FULL_HEADER_EXAMPLES = 40 * FUZZ_SCALE
TRIMMED_EXAMPLES = 250 * FUZZ_SCALE
VOCAB_KEPT = 300        # vocabulary entries kept in the trimmed header
SMALL_TENSORS = 24      # real tensors (the smallest) kept with their data in the trimmed file
TAIL_AFTER_HEADER = 64 << 10

INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 32, 33, 63, 64, 255, 256, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


class _Base:
    def __init__(self, data: bytes, regions: list[tuple[int, int]]):
        self.data, self.regions = data, regions


def _regions(path) -> tuple[int, list[tuple[int, int]]]:
    with GGUFFile(path) as f:
        return f.data_offset, [(0, min(4096, f.tensor_info_offset)), (f.tensor_info_offset, f.data_offset)]


@pytest.fixture(scope="module")
def full_header(smollm2_path) -> _Base:
    data_offset, regions = _regions(smollm2_path)
    with open(smollm2_path, "rb") as fh:
        data = fh.read(data_offset + TAIL_AFTER_HEADER)
    return _Base(data, regions)


@pytest.fixture(scope="module")
def trimmed(smollm2_path, tmp_path_factory) -> _Base:
    path = tmp_path_factory.mktemp("fuzz") / "trimmed.gguf"
    with GGUFFile(smollm2_path) as f:
        w = GGUFWriter(path)
        for key, value in f.metadata.items():
            vtype, etype = f.metadata_types[key]
            if vtype == GGUFValueType.ARRAY:
                w.add_metadata(key, value[:VOCAB_KEPT], (vtype, etype))
            else:
                w.add_metadata(key, value, vtype)
        for t in sorted(f.tensors.values(), key=lambda t: t.nbytes)[:SMALL_TENSORS]:
            w.add_tensor_from(t)
        w.write()
    _, regions = _regions(path)
    return _Base(path.read_bytes(), regions)


@st.composite
def mutations(draw, base: _Base):
    data = bytearray(base.data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int", "bytes", "truncate", "insert", "delete"]))
        # positions: mostly the structure-dense parts (fixed header, small keys, tensor table)
        lo, hi = draw(st.sampled_from(base.regions + [(0, len(data))]))
        hi = max(lo + 1, min(hi, len(data)))
        pos = draw(st.integers(lo, hi - 1))
        if kind == "int":
            width = draw(st.sampled_from([1, 4, 8]))
            value = draw(st.sampled_from(INTERESTING) | st.integers(0, (1 << 64) - 1)) % (1 << (8 * width))
            data[pos:pos + width] = value.to_bytes(width, "little")
        elif kind == "bytes":
            blob = draw(st.binary(min_size=1, max_size=16))
            data[pos:pos + len(blob)] = blob
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=12))
        else:
            del data[pos:pos + draw(st.integers(1, 12))]
        if not data:
            break
    return bytes(data)


def _open_or_gguf_error(tmp_path, data: bytes) -> None:
    path = tmp_path / "mutant.gguf"
    path.write_bytes(data)
    try:
        f = GGUFFile(path)
    except GGUFError:
        return
    with f:   # it opened: the table must hold up
        end = f.data_offset
        for t in f.tensors.values():
            assert t.offset >= end and t.offset + t.nbytes <= len(data)
            assert t.data.nbytes == t.nbytes
            end = t.offset + t.nbytes
        assert struct.unpack_from("<I", data, 4)[0] in (2, 3)


_SETTINGS = dict(deadline=None, derandomize=FUZZ_SCALE == 1, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                        HealthCheck.data_too_large])


def test_fuzz_trimmed_real_header(trimmed, tmp_path):
    @settings(max_examples=TRIMMED_EXAMPLES, **_SETTINGS)
    @given(mutations(trimmed))
    def run(data):
        _open_or_gguf_error(tmp_path, data)
    run()


def test_fuzz_full_real_header(full_header, tmp_path):
    @settings(max_examples=FULL_HEADER_EXAMPLES, **_SETTINGS)
    @given(mutations(full_header))
    def run(data):
        _open_or_gguf_error(tmp_path, data)
    run()


def test_trimmed_base_is_valid(trimmed, tmp_path):
    path = tmp_path / "t.gguf"
    path.write_bytes(trimmed.data)
    with GGUFFile(path) as f:
        assert f.architecture == "llama" and len(f.tensors) == SMALL_TENSORS
        assert len(f.metadata["tokenizer.ggml.tokens"]) == VOCAB_KEPT
        assert all(np.isfinite(t.numpy()).all() for t in f.tensors.values() if t.qtype == "F32")
