"""GGUFWriter: every value type and every ggml type round-trips byte for byte through GGUFFile;
type inference; conversions and quantization; atomic write; refusals."""
import filecmp
import os

import numpy as np
import pytest

from oxillama.errors import GGUFError
from oxillama.gguf import GGUFFile, GGUFValueType as VT, GGUFWriter
from oxillama.quant.types import SUPPORTED_TYPES, TYPES, GGMLType

RNG_SEED = 1234


def _gguf_package():
    """llama.cpp's PyPI `gguf` package, the oracle. Without it, `import gguf` could find this test
    folder (tests/gguf, on sys.path's tests/) as a namespace package: check it is the real one."""
    gguf = pytest.importorskip("gguf")
    if not hasattr(gguf, "GGUFReader"):
        pytest.skip("the PyPI gguf package is not installed")
    return gguf

SCALARS = [
    (VT.UINT8, 255), (VT.INT8, -128), (VT.UINT16, 65535), (VT.INT16, -32768), (VT.UINT32, 2**32 - 1),
    (VT.INT32, -2**31), (VT.FLOAT32, 0.1), (VT.BOOL, True), (VT.STRING, "héllo\n✓"), (VT.UINT64, 2**64 - 1),
    (VT.INT64, -2**63), (VT.FLOAT64, 0.1), (VT.FLOAT32, float("inf")), (VT.STRING, ""), (VT.BOOL, False),
]
ARRAYS = [
    (VT.UINT8, [0, 1, 255]), (VT.INT8, [-128, 0, 127]), (VT.UINT16, [0, 65535]), (VT.INT16, [-32768, 5]),
    (VT.UINT32, [0, 2**32 - 1]), (VT.INT32, [-2**31, 2**31 - 1]), (VT.FLOAT32, [0.5, -1.25, 3e38]),
    (VT.BOOL, [True, False, True]), (VT.STRING, ["a", "", "ü", "Ġthe"]), (VT.UINT64, [2**64 - 1, 0]),
    (VT.INT64, [-2**63, 2**63 - 1]), (VT.FLOAT64, [1e-300, -0.0]), (VT.INT32, []),
]


def _roundtrip_bytes(path, tmp_path) -> bytes:
    """Read path, write every key and tensor back into a new file, return its bytes."""
    out = tmp_path / "again.gguf"
    with GGUFFile(path) as f:
        w = GGUFWriter(out)
        w.add_metadata_from(f)
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()
    return out.read_bytes()


def _random_tensor_bytes(rng, qtype: GGMLType, rows: int) -> tuple[np.ndarray, tuple[int, int]]:
    info = TYPES[qtype]
    cols = info.block_size * 2 if info.block_size > 1 else 8
    raw = rng.integers(0, 256, size=rows * info.row_bytes(cols), dtype=np.uint8)
    return raw, (rows, cols)


def test_every_value_type_round_trips(tmp_path):
    path = tmp_path / "values.gguf"
    w = GGUFWriter(path)
    for i, (vt, v) in enumerate(SCALARS):
        w.add_metadata(f"scalar.{i}.{vt.name}", v, type=vt)
    for i, (vt, v) in enumerate(ARRAYS):
        w.add_metadata(f"array.{i}.{vt.name}", v, type=vt)
    w.write()
    first = path.read_bytes()
    with GGUFFile(path) as f:
        assert f.version == 3 and not f.tensors
        for i, (vt, v) in enumerate(SCALARS):
            key = f"scalar.{i}.{vt.name}"
            got = f.metadata[key]
            assert f.metadata_types[key] == (vt, None)
            if vt == VT.FLOAT32:
                assert got == float(np.float32(v))
            else:
                assert got == v and type(got) is type(v)
        for i, (vt, v) in enumerate(ARRAYS):
            key = f"array.{i}.{vt.name}"
            got = f.metadata[key]
            assert f.metadata_types[key] == (VT.ARRAY, vt)
            if vt == VT.STRING:
                assert got == v
            else:
                assert isinstance(got, np.ndarray) and got.dtype == np.dtype(
                    {VT.BOOL: "?"}.get(vt, got.dtype)) and got.tolist() == np.array(v, dtype=got.dtype).tolist()
    assert _roundtrip_bytes(path, tmp_path) == first


def test_array_dtypes_match_value_types(tmp_path):
    path = tmp_path / "dtypes.gguf"
    w = GGUFWriter(path)
    want = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16, VT.UINT32: np.uint32,
            VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_, VT.UINT64: np.uint64,
            VT.INT64: np.int64, VT.FLOAT64: np.float64}
    for vt in want:
        w.add_metadata(f"a.{vt.name}", [1, 0, 1], type=vt)
    w.write()
    with GGUFFile(path) as f:
        for vt, dtype in want.items():
            assert f.metadata[f"a.{vt.name}"].dtype == dtype


@pytest.mark.parametrize("alignment", [1, 8, 32, 64, 4096])
def test_every_ggml_type_round_trips(tmp_path, alignment):
    rng = np.random.default_rng(RNG_SEED)
    path = tmp_path / "tensors.gguf"
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", "test")
    w.add_metadata("general.alignment", alignment)
    written = {}
    for i, qtype in enumerate(TYPES):
        raw, shape = _random_tensor_bytes(rng, qtype, rows=1 + i % 3)
        name = f"t{i}.{qtype.name}"
        w.add_tensor(name, raw, qtype=qtype.name, shape=shape)
        written[name] = (raw, shape, qtype)
    w.write()
    first = path.read_bytes()
    assert w.tobytes() == first
    with GGUFFile(path) as f:
        assert f.alignment == alignment and f.data_offset % alignment == 0
        assert list(f.tensors) == list(written)
        for name, (raw, shape, qtype) in written.items():
            t = f.tensors[name]
            assert t.qtype == qtype.name and t.shape == shape and t.offset % alignment == 0
            np.testing.assert_array_equal(t.data, raw)
    assert _roundtrip_bytes(path, tmp_path) == first


def test_real_model_rewrites_byte_identical(smollm2_path, tmp_path):
    """llama.cpp wrote this file; writing back what we read reproduces it exactly."""
    out = tmp_path / "smollm2.gguf"
    with GGUFFile(smollm2_path) as f:
        w = GGUFWriter(out)
        w.add_metadata_from(f)
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()
    assert filecmp.cmp(smollm2_path, out, shallow=False)


def test_type_inference(tmp_path):
    path = tmp_path / "infer.gguf"
    w = GGUFWriter(path)
    values = {
        "general.architecture": ("llama", (VT.STRING, None)),
        "general.alignment": (64, (VT.UINT32, None)),
        "llama.block_count": (2, (VT.UINT32, None)),                 # <arch>.* keys: converter's types
        "llama.rope.freq_base": (10000, (VT.FLOAT32, None)),
        "tokenizer.ggml.bos_token_id": (1, (VT.UINT32, None)),
        "tokenizer.ggml.scores": ([0, -1, -2], (VT.ARRAY, VT.FLOAT32)),
        "tokenizer.ggml.token_type": ([1, 2, 3], (VT.ARRAY, VT.INT32)),
        "x.int": (5, (VT.INT32, None)),
        "x.big": (2**40, (VT.INT64, None)),
        "x.huge": (2**64 - 1, (VT.UINT64, None)),
        "x.float": (1.5, (VT.FLOAT32, None)),
        "x.bool": (True, (VT.BOOL, None)),
        "x.np_u16": (np.uint16(7), (VT.UINT16, None)),
        "x.np_f64": (np.float64(0.25), (VT.FLOAT64, None)),
        "x.strs": (["a", "b"], (VT.ARRAY, VT.STRING)),
        "x.ints": ([1, 2**40], (VT.ARRAY, VT.INT64)),
        "x.floats": ([1, 2.5], (VT.ARRAY, VT.FLOAT32)),
        "x.bools": ([True, False], (VT.ARRAY, VT.BOOL)),
        "x.np_i8": (np.array([1, -1], np.int8), (VT.ARRAY, VT.INT8)),
        "x.np_str": (np.array(["q", "r"]), (VT.ARRAY, VT.STRING)),
        "x.tuple_type": ((1, 2), (VT.ARRAY, VT.INT32)),
    }
    for key, (value, _) in values.items():
        w.add_metadata(key, value)
    w.add_metadata("x.explicit_array", [1, 2], type=(VT.ARRAY, VT.UINT8))
    w.add_metadata("x.explicit_array_infer", [1, 2], type=VT.ARRAY)
    w.add_metadata("x.type_by_name", 3, type="int16")
    w.write()
    with GGUFFile(path) as f:
        for key, (value, types) in values.items():
            assert f.metadata_types[key] == types, key
        assert f.metadata_types["x.explicit_array"] == (VT.ARRAY, VT.UINT8)
        assert f.metadata_types["x.explicit_array_infer"] == (VT.ARRAY, VT.INT32)
        assert f.metadata_types["x.type_by_name"] == (VT.INT16, None)
        assert f.metadata["x.np_str"] == ["q", "r"]
        assert f.alignment == 64


def test_float_tensors_and_conversions(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    path = tmp_path / "floats.gguf"
    w = GGUFWriter(path)
    w.add_tensor("f32", x)
    w.add_tensor("f16", x.astype(np.float16))
    w.add_tensor("f32_as_f16", x, qtype="F16")
    w.add_tensor("bf16", x, qtype="BF16")
    w.add_tensor("i32", np.arange(8, dtype=np.int32))
    w.add_tensor("reshaped", x, shape=(192,))
    w.add_tensor("strided", x[:, ::2])
    w.write()
    with GGUFFile(path) as f:
        T = f.tensors
        assert (T["f32"].qtype, T["f16"].qtype, T["f32_as_f16"].qtype, T["bf16"].qtype, T["i32"].qtype) == \
            ("F32", "F16", "F16", "BF16", "I32")
        np.testing.assert_array_equal(T["f32"].numpy(), x)
        np.testing.assert_array_equal(T["f16"].numpy(), x.astype(np.float16))
        np.testing.assert_array_equal(T["f32_as_f16"].numpy(), x.astype(np.float16))
        np.testing.assert_array_equal(T["i32"].numpy(), np.arange(8))
        assert T["reshaped"].shape == (192,) and T["strided"].shape == (3, 32)
        np.testing.assert_array_equal(T["strided"].numpy(), x[:, ::2])
        # bfloat16: the top 16 bits of float32, rounded to nearest even
        bits = x.view(np.uint32).astype(np.uint64)
        want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        np.testing.assert_array_equal(T["bf16"].data.view("<u2").reshape(3, 64), want)


QUANTIZED = [t for t in SUPPORTED_TYPES if TYPES[GGMLType[t]].block_size > 1]


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_quantized_tensor_matches_quantize(tmp_path, qtype):
    """A float array with a quant qtype is stored as oxillama.quant.quantize's bytes."""
    from oxillama.errors import QuantError
    from oxillama.quant import dequantize, quantize
    rng = np.random.default_rng(RNG_SEED)
    info = TYPES[GGMLType[qtype]]
    x = rng.standard_normal((3, info.block_size * 2)).astype(np.float32)
    try:
        want = quantize(x, qtype)
    except QuantError as e:
        if "not implemented" in str(e):
            pytest.skip(f"no quantize kernel for {qtype} yet")
        raise
    path = tmp_path / "q.gguf"
    w = GGUFWriter(path)
    w.add_tensor("w", x, qtype=qtype)
    w.add_tensor("w16", x.astype(np.float16), qtype=qtype)
    w.write()
    with GGUFFile(path) as f:
        t = f.tensors["w"]
        assert t.qtype == qtype and t.shape == x.shape and t.nbytes == 3 * info.row_bytes(x.shape[1])
        np.testing.assert_array_equal(t.data, want)
        np.testing.assert_array_equal(f.tensors["w16"].data, quantize(x.astype(np.float16).astype(np.float32),
                                                                      qtype))
        np.testing.assert_array_equal(t.numpy(), dequantize(want, qtype, x.size).reshape(x.shape))


def test_q8_0_values_are_within_one_step(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    path = tmp_path / "q.gguf"
    w = GGUFWriter(path)
    w.add_tensor("w", x, qtype="Q8_0")
    w.write()
    with GGUFFile(path) as f:
        # Q8_0: one scale d = amax / 127 per block of 32, values rounded to the nearest step; d is
        # stored as fp16 (relative error <= 2^-11), which moves q * d by up to 127 * d * 2^-11.
        step = np.abs(x.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
        err = np.abs(f.tensors["w"].numpy().reshape(-1, 32) - x.reshape(-1, 32))
        assert np.all(err <= step * (0.5 + 127 * 2.0 ** -11))


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old contents")
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", "llama")

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        w.write()
    monkeypatch.undo()
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["model.gguf"]      # no temporary file left behind
    w.write()
    with GGUFFile(path) as f:
        assert f.architecture == "llama"


def test_gguf_package_reads_what_we_write(tmp_path):
    gguf = _gguf_package()
    path = tmp_path / "x.gguf"
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("general.alignment", 64)
    w.add_metadata("x.strs", ["a", "bc"])
    w.add_metadata("x.f", 0.5, type=VT.FLOAT64)
    raw = np.arange(2 * 34, dtype=np.uint8)
    w.add_tensor("q", raw, qtype="Q8_0", shape=(2, 32))
    w.add_tensor("f", np.ones((2, 3), np.float32))
    w.write()
    r = gguf.GGUFReader(path)
    assert bytes(r.fields["general.architecture"].parts[-1]) == b"llama"
    assert r.fields["x.f"].parts[-1][0] == 0.5
    assert [bytes(r.fields["x.strs"].parts[i]) for i in r.fields["x.strs"].data] == [b"a", b"bc"]
    (q, f) = r.tensors
    assert q.name == "q" and int(q.tensor_type) == 8 and list(q.shape) == [32, 2]
    np.testing.assert_array_equal(np.asarray(q.data).reshape(-1), raw)
    np.testing.assert_array_equal(f.data, np.ones((2, 3), np.float32))


def test_we_read_what_the_gguf_package_writes(tmp_path):
    gguf = _gguf_package()
    path = tmp_path / "ref.gguf"
    ref = gguf.GGUFWriter(str(path), "llama")
    ref.add_uint32("llama.block_count", 3)
    ref.add_array("x.ints", [1, 2, 3])
    ref.add_string("x.s", "hi")
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    ref.add_tensor("t", x)
    ref.write_header_to_file()
    ref.write_kv_data_to_file()
    ref.write_tensors_to_file()
    ref.close()
    with GGUFFile(path) as f:
        assert f.architecture == "llama" and f.metadata["llama.block_count"] == 3
        assert f.metadata["x.ints"].tolist() == [1, 2, 3] and f.metadata["x.s"] == "hi"
        np.testing.assert_array_equal(f.tensors["t"].numpy(), x)


@pytest.mark.parametrize("key,value,type,match", [
    ("", 1, None, "non-empty"),
    ("bad\udcff", 1, None, "not valid UTF-8"),
    ("x", object(), None, "cannot store a object"),
    ("x", 300, VT.UINT8, r"out of range for UINT8"),
    ("x", -1, VT.UINT64, "out of range"),
    ("x", 1.5, VT.INT32, "needs an integer"),
    ("x", "s", VT.FLOAT32, "needs a number"),
    ("x", 2, VT.BOOL, "needs a bool"),
    ("x", [[1]], None, "nested arrays"),
    ("x", [1], (VT.ARRAY, VT.ARRAY), "nested arrays"),
    ("x", [], None, "empty list"),
    ("x", [1, "a"], None, "mixes element types"),
    ("x", [1, 2**70], None, "does not fit in 64 bits"),
    ("x", 1, VT.ARRAY, "needs a list"),
    ("x", [1], VT.STRING, "STRING needs a str"),
    ("x", [300], VT.UINT8, "out of range"),
    ("x", 1, "no_such_type", "unknown value type"),
    ("general.alignment", 48, None, "power of two"),
    ("general.alignment", 32, VT.UINT64, "must be UINT32"),
    ("tokenizer.ggml.scores", [1, 2], VT.INT32, "must be array of FLOAT32"),
    ("general.architecture", 3, None, "STRING needs a str"),
    ("general.architecture", 3, VT.UINT32, "must be STRING"),
])
def test_bad_metadata_is_refused(key, value, type, match):
    with pytest.raises(GGUFError, match=match):
        GGUFWriter("unused.gguf").add_metadata(key, value, type)


def test_duplicate_key_is_refused():
    w = GGUFWriter("unused.gguf")
    w.add_metadata("a", 1)
    with pytest.raises(GGUFError, match="duplicate metadata key 'a'"):
        w.add_metadata("a", 2)


@pytest.mark.parametrize("args,kwargs,match", [
    (("", np.zeros(4, np.float32)), {}, "non-empty"),
    (("t\udcff", np.zeros(4, np.float32)), {}, "not valid UTF-8"),
    (("n" * 64, np.zeros(4, np.float32)), {}, "too long"),
    (("t", b"\0" * 34), {"qtype": "Q8_0"}, "need both qtype and shape"),
    (("t", b"\0" * 34), {"qtype": "Q8_0", "shape": (2, 32)}, "needs 68 bytes, got 34"),
    (("t", np.zeros((2, 48), np.float32)), {"qtype": "Q8_0"}, "not a multiple of the Q8_0 block size 32"),
    (("t", np.zeros((1, 1, 1, 1, 4), np.float32)), {}, "at most 4"),
    (("t", np.zeros(4, np.complex64)), {}, "unsupported dtype"),
    (("t", np.zeros(4, np.float32)), {"qtype": "Q9_9"}, "unknown quant type"),
    (("t", np.zeros(4, np.int32)), {"qtype": "F16"}, "can only be stored as I32"),
    (("t", np.zeros(4, np.float32)), {"shape": (3,)}, "does not match"),
    (("t", [1.0, 2.0]), {}, "numpy array or bytes"),
])
def test_bad_tensors_are_refused(args, kwargs, match):
    with pytest.raises(GGUFError, match=match):
        GGUFWriter("unused.gguf").add_tensor(*args, **kwargs)


def test_duplicate_tensor_is_refused():
    w = GGUFWriter("unused.gguf")
    w.add_tensor("t", np.zeros(4, np.float32))
    with pytest.raises(GGUFError, match="duplicate tensor name 't'"):
        w.add_tensor("t", np.zeros(4, np.float32))


def test_strings_that_are_not_utf8_survive_a_round_trip(tmp_path, caplog):
    """Some vocabularies hold byte strings that are not UTF-8: kept (surrogate-escaped), written back."""
    path = tmp_path / "bytes.gguf"
    w = GGUFWriter(path)
    w.add_metadata("x.raw", b"ok\xff\xfe")
    w.add_metadata("x.tokens", ["a", b"\xc3".decode("utf-8", "surrogateescape")], type=VT.STRING)
    w.write()
    with caplog.at_level("WARNING", logger="oxillama.gguf"):
        with GGUFFile(path) as f:
            assert f.metadata["x.raw"] == "ok\udcff\udcfe"
            assert f.metadata["x.tokens"][1].encode("utf-8", "surrogateescape") == b"\xc3"
    assert "2 metadata strings are not valid UTF-8" in caplog.text
    assert _roundtrip_bytes(path, tmp_path) == path.read_bytes()
