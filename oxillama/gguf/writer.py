"""GGUF v3 writer: metadata of every value type, tensors of every ggml type, atomic write.

The layout matches llama.cpp's gguf writer (tensor data in insertion order, each tensor's offset
and the data section aligned to `general.alignment`, zero padding after every tensor), so a file
read with GGUFFile and written back with the same keys and tensors is byte-identical.
"""
from __future__ import annotations

import logging
import os
import struct
import tempfile
from collections.abc import Sequence

import numpy as np

from oxillama.errors import GGUFError, QuantError
from oxillama.gguf.constants import (ARCH_KEY_DEFAULT_TYPES, DTYPE_TO_TYPE, FLOAT_TYPES, GGML_MAX_DIMS,
                                     GGML_MAX_NAME, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_ALIGNMENT,
                                     GGUF_VERSION, INT_RANGE, INTEGER_TYPES, KNOWN_KEY_TYPES, SCALAR_DTYPE,
                                     SCALAR_FORMAT, GGUFValueType)
from oxillama.gguf.strings import StringArray
from oxillama.quant.types import GGMLType, TypeInfo, type_info

log = logging.getLogger("oxillama.gguf")

VT = GGUFValueType
_ARRAY_LIKE = (list, tuple, np.ndarray, StringArray)
# numpy dtype -> the ggml type a tensor of that dtype is stored as when no qtype is given
_DTYPE_TO_GGML = {np.dtype(np.float32): GGMLType.F32, np.dtype(np.float16): GGMLType.F16,
                  np.dtype(np.float64): GGMLType.F64, np.dtype(np.int8): GGMLType.I8,
                  np.dtype(np.int16): GGMLType.I16, np.dtype(np.int32): GGMLType.I32,
                  np.dtype(np.int64): GGMLType.I64}
_GGML_TO_DTYPE = {t: d.newbyteorder("<") for d, t in _DTYPE_TO_GGML.items()}
_COPY_CHUNK = 16 << 20   # bytes per write() call when streaming tensor data


def _type_desc(vtype: GGUFValueType, etype: GGUFValueType | None) -> str:
    return f"array of {etype.name}" if vtype == VT.ARRAY else vtype.name


def _as_value_type(t, key: str) -> GGUFValueType:
    try:
        return GGUFValueType(t) if not isinstance(t, str) else GGUFValueType[t.upper()]
    except (KeyError, ValueError):
        raise GGUFError(f"metadata {key!r}: unknown value type {t!r}") from None


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(x.reshape(bits.shape))
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


class _Tensor:
    __slots__ = ("name", "ggml_shape", "info", "data", "nbytes")

    def __init__(self, name: str, ggml_shape: tuple[int, ...], info: TypeInfo, data: np.ndarray | None,
                 nbytes: int):
        self.name, self.ggml_shape, self.info, self.data, self.nbytes = name, ggml_shape, info, data, nbytes


class GGUFWriter:
    """Collects metadata and tensors, then write() produces a GGUF v3 file atomically.

        w = GGUFWriter("out.gguf")
        w.add_metadata("general.architecture", "llama")
        w.add_metadata("llama.block_count", 2)                        # UINT32: the converter's type
        w.add_metadata("my.values", [1, 2, 3], type=GGUFValueType.INT16)   # array of INT16
        w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32), qtype="Q8_0")
        w.write()
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._kv: dict[str, tuple[GGUFValueType, GGUFValueType | None, object]] = {}
        self._tensors: dict[str, _Tensor] = {}

    # -- metadata ---------------------------------------------------------------------------------

    def add_metadata(self, key: str, value, type=None) -> None:
        """Add one key. Without `type` the type is the one the format fixes for known keys (e.g.
        UINT32 for general.alignment and `<arch>.block_count`), else inferred from the value
        (bool, int -> INT32 or INT64 if it needs it, float -> FLOAT32, str, numpy scalars and
        arrays by dtype, lists by their elements). `type` may be any GGUFValueType (or its name);
        a scalar type with a list/array value means an array of that type; `(ARRAY, elem)` also works.
        """
        if not isinstance(key, str) or not key:
            raise GGUFError(f"metadata key must be a non-empty str, got {key!r}")
        _check_utf8(key, "metadata key")
        if key in self._kv:
            raise GGUFError(f"duplicate metadata key {key!r}")
        vtype, etype = self._resolve_type(key, value, type)
        allowed = KNOWN_KEY_TYPES.get(key)
        if allowed is not None and (vtype, etype) not in allowed:
            want = " or ".join(sorted({_type_desc(*a) for a in allowed}))
            raise GGUFError(f"metadata {key!r} must be {want}, got {_type_desc(vtype, etype)}")
        if vtype == VT.ARRAY:
            norm = self._normalize_array(key, value, etype)
        else:
            norm = self._normalize_scalar(key, value, vtype)
        if key == "general.alignment" and (norm == 0 or norm & (norm - 1) or norm > GGUF_MAX_ALIGNMENT):
            raise GGUFError(f"general.alignment must be a power of two <= {GGUF_MAX_ALIGNMENT}, got {norm}")
        self._kv[key] = (vtype, etype, norm)

    def add_metadata_from(self, src, exclude: Sequence[str] = ()) -> None:
        """Copy every key of an open GGUFFile with its exact stored type (except those in exclude)."""
        skip = set(exclude)
        for key, value in src.metadata.items():
            if key in skip:
                continue
            vtype, etype = src.metadata_types[key]
            self.add_metadata(key, value, (vtype, etype) if vtype == VT.ARRAY else vtype)

    def _resolve_type(self, key: str, value, type) -> tuple[GGUFValueType, GGUFValueType | None]:
        is_array = isinstance(value, _ARRAY_LIKE)
        if type is not None:
            if isinstance(type, tuple):
                if len(type) != 2 or _as_value_type(type[0], key) != VT.ARRAY:
                    raise GGUFError(f"metadata {key!r}: a tuple type must be (ARRAY, element type), got {type!r}")
                vtype, etype = VT.ARRAY, _as_value_type(type[1], key)
            else:
                t = _as_value_type(type, key)
                if t == VT.ARRAY:
                    if not is_array:
                        raise GGUFError(f"metadata {key!r}: type ARRAY needs a list or array value, "
                                        f"got {value.__class__.__name__}")
                    return VT.ARRAY, self._infer_element_type(key, value)
                vtype, etype = (VT.ARRAY, t) if is_array else (t, None)
            if vtype == VT.ARRAY:
                if etype == VT.ARRAY:
                    raise GGUFError(f"metadata {key!r}: nested arrays are not supported")
                if not is_array:
                    raise GGUFError(f"metadata {key!r}: an array type needs a list or array value, "
                                    f"got {value.__class__.__name__}")
            elif is_array:
                raise GGUFError(f"metadata {key!r}: type {vtype.name} needs a scalar, got a sequence")
            return vtype, etype
        allowed = KNOWN_KEY_TYPES.get(key)
        if allowed is not None:
            vtype, etype = allowed[0]
            if (vtype == VT.ARRAY) == is_array:
                if vtype in INTEGER_TYPES and len(allowed) > 1:
                    return VT.UINT32, None   # token ids: what converters write
                return vtype, etype
        suffix = key.split(".", 1)[1] if "." in key else ""
        if suffix in ARCH_KEY_DEFAULT_TYPES and not is_array and not isinstance(value, (str, bool, np.bool_)):
            return ARCH_KEY_DEFAULT_TYPES[suffix], None
        if is_array:
            return VT.ARRAY, self._infer_element_type(key, value)
        return self._infer_scalar_type(key, value), None

    @staticmethod
    def _infer_scalar_type(key: str, value) -> GGUFValueType:
        if isinstance(value, (bool, np.bool_)):
            return VT.BOOL
        if isinstance(value, (str, bytes)):
            return VT.STRING
        if isinstance(value, np.generic):
            t = DTYPE_TO_TYPE.get(value.dtype.newbyteorder("="))
            if t is None:
                raise GGUFError(f"metadata {key!r}: numpy {value.dtype} has no GGUF value type")
            return t
        if isinstance(value, int):
            for t in (VT.INT32, VT.INT64, VT.UINT64):
                lo, hi = INT_RANGE[t]
                if lo <= value <= hi:
                    return t
            raise GGUFError(f"metadata {key!r}: integer {value} does not fit in 64 bits")
        if isinstance(value, float):
            return VT.FLOAT32
        raise GGUFError(f"metadata {key!r}: cannot store a {value.__class__.__name__} in GGUF")

    def _infer_element_type(self, key: str, value) -> GGUFValueType:
        if isinstance(value, np.ndarray):
            if value.dtype.kind in "US":
                return VT.STRING
            t = DTYPE_TO_TYPE.get(value.dtype.newbyteorder("="))
            if t is None:
                raise GGUFError(f"metadata {key!r}: numpy {value.dtype} arrays have no GGUF element type")
            return t
        if len(value) == 0:
            raise GGUFError(f"metadata {key!r}: cannot infer the element type of an empty list; pass type=")
        kinds = {self._infer_scalar_type(key, v) if not isinstance(v, _ARRAY_LIKE) else VT.ARRAY for v in value}
        if VT.ARRAY in kinds:
            raise GGUFError(f"metadata {key!r}: nested arrays are not supported")
        if len(kinds) == 1:
            return kinds.pop()
        if kinds <= INTEGER_TYPES:
            for t in (VT.INT64, VT.UINT64):
                lo, hi = INT_RANGE[t]
                if all(lo <= int(v) <= hi for v in value):
                    return t
            raise GGUFError(f"metadata {key!r}: integers do not fit one 64-bit type")
        if kinds <= INTEGER_TYPES | FLOAT_TYPES:
            return VT.FLOAT64 if VT.FLOAT64 in kinds else VT.FLOAT32
        raise GGUFError(f"metadata {key!r}: list mixes element types {sorted(k.name for k in kinds)}")

    @staticmethod
    def _normalize_scalar(key: str, value, vtype: GGUFValueType):
        if vtype == VT.STRING:
            if isinstance(value, str):
                return value.encode("utf-8", "surrogateescape")
            if isinstance(value, (bytes, bytearray)):
                return bytes(value)
            raise GGUFError(f"metadata {key!r}: STRING needs a str, got {value.__class__.__name__}")
        if vtype == VT.BOOL:
            if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
                return bool(value)
            raise GGUFError(f"metadata {key!r}: BOOL needs a bool, got {value!r}")
        if vtype in INTEGER_TYPES:
            if isinstance(value, (float, np.floating)) and float(value).is_integer():
                value = int(value)
            if not isinstance(value, (int, np.integer)):
                raise GGUFError(f"metadata {key!r}: {vtype.name} needs an integer, got {value!r}")
            lo, hi = INT_RANGE[vtype]
            if not lo <= int(value) <= hi:
                raise GGUFError(f"metadata {key!r}: {value} is out of range for {vtype.name} [{lo}, {hi}]")
            return int(value)
        if vtype in FLOAT_TYPES:
            if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
                raise GGUFError(f"metadata {key!r}: {vtype.name} needs a number, got {value!r}")
            return float(value)
        raise GGUFError(f"metadata {key!r}: {vtype.name} is not a scalar type")

    def _normalize_array(self, key: str, value, etype: GGUFValueType):
        if etype == VT.STRING:
            seq = value.tolist() if isinstance(value, np.ndarray) else value
            return [self._normalize_scalar(f"{key}[{i}]", v, VT.STRING) for i, v in enumerate(seq)]
        dtype = SCALAR_DTYPE[etype]
        if isinstance(value, np.ndarray):
            if value.ndim != 1:
                raise GGUFError(f"metadata {key!r}: arrays must be 1-D, got shape {value.shape}")
            src = value
        else:
            for v in value:
                if isinstance(v, _ARRAY_LIKE):
                    raise GGUFError(f"metadata {key!r}: nested arrays are not supported")
            if etype in INTEGER_TYPES or etype == VT.BOOL:
                vals = [self._normalize_scalar(key, v, etype) for v in value]
                return np.array(vals, dtype=dtype)
            src = np.array([self._normalize_scalar(key, v, etype) for v in value], dtype=np.float64)
        if etype == VT.BOOL:
            if src.dtype != np.bool_ and not np.isin(src, (0, 1)).all():
                raise GGUFError(f"metadata {key!r}: BOOL array has values other than 0 and 1")
            return src.astype(dtype)
        if etype in INTEGER_TYPES:
            if src.dtype.kind not in "iub":
                if src.dtype.kind == "f" and np.all(np.isfinite(src)) and np.all(src == np.round(src)):
                    pass
                else:
                    raise GGUFError(f"metadata {key!r}: {etype.name} array needs integers, got {src.dtype}")
            lo, hi = INT_RANGE[etype]
            if src.size and (src.min() < lo or src.max() > hi):
                raise GGUFError(f"metadata {key!r}: values out of range for {etype.name} [{lo}, {hi}]")
            return src.astype(dtype)
        if src.dtype.kind not in "iuf":
            raise GGUFError(f"metadata {key!r}: {etype.name} array needs numbers, got {src.dtype}")
        return src.astype(dtype)

    # -- tensors ----------------------------------------------------------------------------------

    def add_tensor(self, name: str, array_or_bytes, qtype: str | int | None = None,
                   shape: Sequence[int] | None = None) -> None:
        """Add a tensor. shape is row-major (numpy order); it is stored in ggml order.

        A float32/float16 array is stored as F32/F16 (float64, int8..int64 as F64, I8..I64) unless
        qtype says otherwise: then it is converted (F32, F16, BF16) or quantized with
        oxillama.quant.quantize. Raw bytes (bytes, or a uint8 array) need qtype and shape and must
        have exactly the type's byte size for that shape.
        """
        if not isinstance(name, str) or not name:
            raise GGUFError(f"tensor name must be a non-empty str, got {name!r}")
        _check_utf8(name, "tensor name")
        if len(name.encode("utf-8")) >= GGML_MAX_NAME:
            raise GGUFError(f"tensor name {name!r} is too long (at most {GGML_MAX_NAME - 1} bytes)")
        if name in self._tensors:
            raise GGUFError(f"duplicate tensor name {name!r}")
        info = None
        if qtype is not None:
            try:
                info = type_info(qtype)
            except QuantError as e:
                raise GGUFError(f"tensor {name!r}: {e}") from None
        data = array_or_bytes
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = np.frombuffer(data, dtype=np.uint8)
        if not isinstance(data, np.ndarray):
            raise GGUFError(f"tensor {name!r}: expected a numpy array or bytes, got {data.__class__.__name__}")

        if data.dtype == np.uint8:
            if info is None or shape is None:
                raise GGUFError(f"tensor {name!r}: raw bytes need both qtype and shape")
            shape = self._check_shape(name, shape)
            raw = np.ascontiguousarray(data).reshape(-1)
        else:
            if data.dtype.newbyteorder("=") not in _DTYPE_TO_GGML:
                raise GGUFError(f"tensor {name!r}: unsupported dtype {data.dtype}")
            arr = data
            if shape is not None:
                shape = self._check_shape(name, shape)
                if int(np.prod(shape, dtype=object)) != arr.size:
                    raise GGUFError(f"tensor {name!r}: shape {shape} does not match the {arr.size} values given")
                arr = arr.reshape(shape)
            shape = self._check_shape(name, arr.shape)
            native = _DTYPE_TO_GGML[arr.dtype.newbyteorder("=")]
            if info is None:
                info = type_info(native)
            if info.qtype == native:
                raw = np.ascontiguousarray(arr, dtype=_GGML_TO_DTYPE[native]).reshape(-1).view(np.uint8)
            elif data.dtype.kind != "f":
                raise GGUFError(f"tensor {name!r}: a {data.dtype} array can only be stored as {native.name}, "
                                f"not {info.name}")
            elif info.qtype in (GGMLType.F32, GGMLType.F16, GGMLType.F64):
                raw = np.ascontiguousarray(arr, dtype=_GGML_TO_DTYPE[info.qtype]).reshape(-1).view(np.uint8)
            elif info.qtype == GGMLType.BF16:
                raw = _f32_to_bf16(np.asarray(arr, dtype=np.float32)).astype("<u2").view(np.uint8)
            else:
                self._check_block(name, shape, info)
                from oxillama.quant import quantize  # the native core is only needed to quantize
                raw = quantize(np.ascontiguousarray(arr, dtype=np.float32), info.qtype)
        self._check_block(name, shape, info)
        ggml_shape = tuple(reversed(shape))
        n = 1
        for d in shape:
            n *= d
        need = n // info.block_size * info.type_size
        if raw.nbytes != need:
            raise GGUFError(f"tensor {name!r}: {info.name} of shape {list(shape)} needs {need} bytes, "
                            f"got {raw.nbytes}")
        self._tensors[name] = _Tensor(name, ggml_shape, info, raw, raw.nbytes)

    def add_tensor_info(self, name: str, shape: Sequence[int], qtype: str | int) -> None:
        """Declare a tensor whose bytes are given only when the file is written: write(stream=...)
        asks stream(name) for them (an iterable of buffers), so a tool that makes a large file
        tensor by tensor never holds it all in memory. shape is row-major, as for add_tensor."""
        if not isinstance(name, str) or not name:
            raise GGUFError(f"tensor name must be a non-empty str, got {name!r}")
        _check_utf8(name, "tensor name")
        if len(name.encode("utf-8")) >= GGML_MAX_NAME:
            raise GGUFError(f"tensor name {name!r} is too long (at most {GGML_MAX_NAME - 1} bytes)")
        if name in self._tensors:
            raise GGUFError(f"duplicate tensor name {name!r}")
        try:
            info = type_info(qtype)
        except QuantError as e:
            raise GGUFError(f"tensor {name!r}: {e}") from None
        shape = self._check_shape(name, shape)
        self._check_block(name, shape, info)
        n = 1
        for d in shape:
            n *= d
        self._tensors[name] = _Tensor(name, tuple(reversed(shape)), info, None,
                                      n // info.block_size * info.type_size)

    def add_tensor_from(self, tensor) -> None:
        """Copy a TensorInfo of an open GGUFFile (its raw bytes, type and shape)."""
        self.add_tensor(tensor.name, tensor.data, qtype=tensor.qtype_id, shape=tensor.shape)

    @staticmethod
    def _check_shape(name: str, shape) -> tuple[int, ...]:
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise GGUFError(f"tensor {name!r}: shape must be a sequence of ints, got {shape!r}") from None
        if len(shape) > GGML_MAX_DIMS:
            raise GGUFError(f"tensor {name!r}: {len(shape)} dimensions, at most {GGML_MAX_DIMS} are supported")
        if any(d < 0 for d in shape):
            raise GGUFError(f"tensor {name!r}: negative dimension in shape {shape}")
        return shape

    @staticmethod
    def _check_block(name: str, shape: tuple[int, ...], info: TypeInfo) -> None:
        ne0 = shape[-1] if shape else 1
        if ne0 % info.block_size:
            raise GGUFError(f"tensor {name!r}: last dimension {ne0} is not a multiple of the {info.name} "
                            f"block size {info.block_size}")

    # -- output -----------------------------------------------------------------------------------

    @property
    def alignment(self) -> int:
        kv = self._kv.get("general.alignment")
        return kv[2] if kv is not None else GGUF_DEFAULT_ALIGNMENT

    def _header(self) -> tuple[bytearray, list[int]]:
        align = self.alignment
        out = bytearray()
        out += GGUF_MAGIC
        out += struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv))
        for key, (vtype, etype, value) in self._kv.items():
            _put_string(out, key.encode("utf-8"))
            out += struct.pack("<I", vtype)
            if vtype == VT.ARRAY:
                out += struct.pack("<IQ", etype, len(value))
                if etype == VT.STRING:
                    for s in value:
                        _put_string(out, s)
                else:
                    out += np.ascontiguousarray(value, dtype=SCALAR_DTYPE[etype]).tobytes()
            elif vtype == VT.STRING:
                _put_string(out, value)
            else:
                out += struct.pack(SCALAR_FORMAT[vtype], value)
        offsets = []
        rel = 0
        for t in self._tensors.values():
            _put_string(out, t.name.encode("utf-8"))
            out += struct.pack(f"<I{len(t.ggml_shape)}QIQ", len(t.ggml_shape), *t.ggml_shape, t.info.qtype, rel)
            offsets.append(rel)
            rel += (t.nbytes + align - 1) // align * align
        out += b"\0" * (-len(out) % align)
        return out, offsets

    def tobytes(self) -> bytes:
        """The whole file in memory (for small files and tests)."""
        head, _ = self._header()
        align = self.alignment
        parts = [bytes(head)]
        for t in self._tensors.values():
            if t.data is None:
                raise GGUFError(f"tensor {t.name!r} was declared with add_tensor_info: use write(stream=...)")
            parts.append(t.data.tobytes())
            parts.append(b"\0" * (-t.nbytes % align))
        return b"".join(parts)

    def write(self, stream=None) -> None:
        """Write the file: to a temporary file in the same folder, then renamed over path, so a
        crash or an error never leaves a partial file under the final name. stream(name) gives
        the bytes of the tensors declared with add_tensor_info, in order, as an iterable of buffers."""
        missing = [t.name for t in self._tensors.values() if t.data is None]
        if missing and stream is None:
            raise GGUFError(f"tensor {missing[0]!r} was declared with add_tensor_info: use write(stream=...)")
        head, _ = self._header()
        align = self.alignment
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(self.path) + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(head)
                for t in self._tensors.values():
                    if t.data is None:
                        written = 0
                        for part in stream(t.name):
                            written += f.write(part)
                        if written != t.nbytes:
                            raise GGUFError(f"tensor {t.name!r}: {written} bytes given, {t.nbytes} declared")
                    else:
                        flat = t.data.reshape(-1)
                        for start in range(0, flat.nbytes, _COPY_CHUNK):
                            f.write(memoryview(flat[start:start + _COPY_CHUNK]))
                    f.write(b"\0" * (-t.nbytes % align))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a model file is meant to be shared
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        log.debug("wrote %s: %d keys, %d tensors", self.path, len(self._kv), len(self._tensors))


def _put_string(out: bytearray, raw: bytes) -> None:
    out += struct.pack("<Q", len(raw))
    out += raw


def _check_utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GGUFError(f"{what} {text!r} is not valid UTF-8 (readers reject it)") from None
