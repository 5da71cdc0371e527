"""GGUF reader: memory-maps a file, validates every header field, exposes tensors as zero-copy views.

Nothing past the header is touched while opening: every count is checked against the bytes left
before a loop runs or a buffer is allocated, so a truncated, corrupted or hostile file ends in a
GGUFError naming the field and the byte offset where it was read.
"""
from __future__ import annotations

import logging
import mmap
import os
import stat
import struct
import time

import numpy as np

from oxillama.errors import GGUFError
from oxillama.gguf.constants import (GGML_MAX_DIMS, GGML_MAX_NAME, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC,
                                     GGUF_MAX_ALIGNMENT, INT64_MAX, KNOWN_KEY_TYPES, MIN_KV_BYTES,
                                     MIN_TENSOR_INFO_BYTES, SCALAR_DTYPE, SCALAR_FORMAT, SCALAR_SIZE,
                                     SUPPORTED_VERSIONS, GGUFValueType)
from oxillama.gguf.strings import StringArray
from oxillama.quant.types import TYPES, GGMLType, TypeInfo

log = logging.getLogger("oxillama.gguf")

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALAR_STRUCT = {t: struct.Struct(f) for t, f in SCALAR_FORMAT.items()}
_VALID_VT = frozenset(int(t) for t in GGUFValueType)
_TYPE_BY_ID: dict[int, TypeInfo] = {int(t): info for t, info in TYPES.items()}


def _type_desc(vtype: GGUFValueType, etype: GGUFValueType | None) -> str:
    return f"array of {etype.name}" if vtype == GGUFValueType.ARRAY else vtype.name


class TensorInfo:
    """One tensor of a GGUF file: its name, shapes, type and where its bytes are.

    shape is row-major (numpy order, last axis contiguous); ggml_shape is ggml's order (ne0, the
    contiguous axis, first). offset is absolute in the file; data is a uint8 view into the map.
    """

    __slots__ = ("name", "ggml_shape", "shape", "qtype_id", "offset", "nbytes", "n_elements", "_file")

    def __init__(self, name: str, ggml_shape: tuple[int, ...], qtype_id: int, offset: int, nbytes: int,
                 n_elements: int, file: "GGUFFile"):
        self.name = name
        self.ggml_shape = ggml_shape
        self.shape = tuple(reversed(ggml_shape))
        self.qtype_id = qtype_id
        self.offset = offset
        self.nbytes = nbytes
        self.n_elements = n_elements
        self._file = file

    @property
    def type_info(self) -> TypeInfo:
        return _TYPE_BY_ID[self.qtype_id]

    @property
    def qtype(self) -> str:
        return _TYPE_BY_ID[self.qtype_id].name

    @property
    def data(self) -> np.ndarray:
        """The tensor's raw bytes: a read-only uint8 view into the file's memory map (zero copy)."""
        return np.frombuffer(self._file._map_for(self.name), dtype=np.uint8, count=self.nbytes, offset=self.offset)

    def numpy(self) -> np.ndarray:
        """The values in row-major shape: a zero-copy typed view for F32/F16/F64/I8..I64, float32
        (dequantized, a copy) for every quantized type and BF16."""
        t = GGMLType(self.qtype_id)
        dtype = _PLAIN_DTYPES.get(t)
        if dtype is not None:
            return self.data.view(dtype).reshape(self.shape)
        from oxillama.quant import dequantize  # needs the native core; imported only here
        return dequantize(self.data, self.qtype, self.n_elements).reshape(self.shape)

    def __repr__(self) -> str:
        return (f"TensorInfo({self.name!r}, {self.qtype}, shape={self.shape}, offset={self.offset}, "
                f"nbytes={self.nbytes})")


_PLAIN_DTYPES = {GGMLType.F32: np.dtype("<f4"), GGMLType.F16: np.dtype("<f2"), GGMLType.F64: np.dtype("<f8"),
                 GGMLType.I8: np.dtype("i1"), GGMLType.I16: np.dtype("<i2"), GGMLType.I32: np.dtype("<i4"),
                 GGMLType.I64: np.dtype("<i8")}


class GGUFFile:
    """A GGUF file opened read-only through a memory map.

    Attributes: path, version, metadata (key -> str/int/float/bool, numpy array for arrays of
    numbers or bools, list[str] for arrays of strings), metadata_types (key -> (value type, array
    element type or None)), tensors (name -> TensorInfo, in file order), alignment, data_offset
    (start of the tensor data section), tensor_info_offset (start of the tensor table), file_size,
    architecture. Use as a context manager or call close(); tensor views taken before close()
    stay valid (they keep the map alive).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.version = 0
        self.metadata: dict[str, object] = {}
        self.metadata_types: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self.alignment = GGUF_DEFAULT_ALIGNMENT
        self.data_offset = 0
        self.tensor_info_offset = 0     # where the tensor table starts (after the metadata)
        self._map: mmap.mmap | None = None
        self._invalid_utf8 = 0
        t0 = time.perf_counter()
        try:
            # a FIFO or device would block open() or have no size: only regular files are mapped
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                raise GGUFError(f"cannot open GGUF file {self.path}: not a regular file")
            f = open(self.path, "rb")
        except OSError as e:
            raise GGUFError(f"cannot open GGUF file {self.path}: {e.strerror or e}") from e
        with f:
            self.file_size = os.fstat(f.fileno()).st_size
            if self.file_size == 0:
                raise self._error(0, "file", "the file is empty (0 bytes), not a GGUF file")
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise GGUFError(f"{self.path}: cannot memory-map the file: {e}") from e
        try:
            self._parse()
        except BaseException:
            self.close()
            raise
        if self._invalid_utf8:
            log.warning("%s: %d metadata strings are not valid UTF-8; kept with surrogate escapes",
                        self.path, self._invalid_utf8)
        log.debug("opened %s: GGUF v%d, %d keys, %d tensors in %.1f ms", self.path, self.version,
                  len(self.metadata), len(self.tensors), (time.perf_counter() - t0) * 1e3)

    # -- public helpers ---------------------------------------------------------------------------

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def hparams(self) -> dict[str, object]:
        """The architecture's hyper-parameters: `<arch>.*` keys with the prefix removed."""
        arch = self.architecture
        if not arch:
            return {}
        prefix = arch + "."
        return {k[len(prefix):]: v for k, v in self.metadata.items() if k.startswith(prefix)}

    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        """Release the memory map. Views handed out earlier keep it alive until they are dropped."""
        m, self._map = self._map, None
        if m is not None:
            try:
                m.close()
            except BufferError:
                # numpy views still export the buffer; the map closes when the last one is freed.
                pass

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.tensors)} tensors"
        return f"GGUFFile({self.path!r}, v{self.version}, {self.architecture or '?'}, {state})"

    def _map_for(self, what: str) -> mmap.mmap:
        if self._map is None:
            raise GGUFError(f"{self.path}: file is closed; cannot read tensor {what!r}")
        return self._map

    # -- parsing ----------------------------------------------------------------------------------

    def _error(self, offset: int, field: str, problem: str) -> GGUFError:
        e = GGUFError(f"{self.path}: {field} at byte offset {offset}: {problem}")
        e.offset = offset
        e.field = field
        return e

    def _need(self, pos: int, n: int, field: str) -> None:
        left = self.file_size - pos
        if n > left:
            raise self._error(pos, field, f"truncated file: needs {n} bytes, only {max(left, 0)} left")

    def _u32(self, pos: int, field: str) -> int:
        self._need(pos, 4, field)
        return _U32.unpack_from(self._map, pos)[0]

    def _u64(self, pos: int, field: str) -> int:
        self._need(pos, 8, field)
        return _U64.unpack_from(self._map, pos)[0]

    def _decode(self, raw: bytes, pos: int, field: str, strict: bool) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if strict:
                raise self._error(pos, field, "not valid UTF-8") from None
            self._invalid_utf8 += 1
            return raw.decode("utf-8", "surrogateescape")

    def _string(self, pos: int, field: str, strict: bool = False) -> tuple[str, int]:
        n = self._u64(pos, f"{field} length")
        pos += 8
        left = self.file_size - pos
        if n > left:
            raise self._error(pos - 8, f"{field} length", f"string length {n} is larger than the {left} bytes left")
        return self._decode(self._map[pos:pos + n], pos, field, strict), pos + n

    def _parse(self) -> None:
        m = self._map
        size = self.file_size
        if size < 4 or m[0:4] != GGUF_MAGIC:
            got = bytes(m[0:4])
            raise self._error(0, "magic", f"bad magic {got!r}, expected {GGUF_MAGIC!r}: not a GGUF file")
        version = self._u32(4, "version")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in SUPPORTED_VERSIONS or swapped == 1:
                raise self._error(4, "version", f"big-endian GGUF is not supported (version reads {swapped} "
                                  "byte-swapped)")
            raise self._error(4, "version", f"unsupported GGUF version {version}; supported: "
                              f"{', '.join(map(str, SUPPORTED_VERSIONS))}")
        self.version = version
        n_tensors = self._u64(8, "tensor count")
        n_kv = self._u64(16, "metadata key count")
        left = size - 24
        if n_kv > left // MIN_KV_BYTES:
            raise self._error(16, "metadata key count", f"{n_kv} keys cannot fit in the {left} bytes left "
                              f"(each takes at least {MIN_KV_BYTES})")
        if n_tensors > left // MIN_TENSOR_INFO_BYTES:
            raise self._error(8, "tensor count", f"{n_tensors} tensors cannot fit in the {left} bytes left "
                              f"(each takes at least {MIN_TENSOR_INFO_BYTES})")
        if n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES > left:
            raise self._error(8, "tensor count", f"{n_tensors} tensors and {n_kv} keys cannot fit together in "
                              f"the {left} bytes left")
        pos = 24
        for i in range(n_kv):
            pos = self._parse_kv(pos, i)
        self.tensor_info_offset = pos
        pos = self._parse_tensor_infos(pos, n_tensors)

    def _parse_kv(self, pos: int, index: int) -> int:
        key_pos = pos
        key, pos = self._string(pos, f"key of metadata entry #{index}", strict=True)
        if not key:
            raise self._error(key_pos, f"key of metadata entry #{index}", "empty key")
        if key in self.metadata_types:
            raise self._error(key_pos, f"key {key!r}", "duplicate key")
        type_pos = pos
        vt = self._u32(pos, f"value type of {key!r}")
        pos += 4
        if vt not in _VALID_VT:
            raise self._error(type_pos, f"value type of {key!r}", f"unknown value type {vt}")
        vtype = GGUFValueType(vt)
        etype = None
        if vtype == GGUFValueType.ARRAY:
            et = self._u32(pos, f"array element type of {key!r}")
            if et == GGUFValueType.ARRAY:
                raise self._error(pos, f"array element type of {key!r}", "nested arrays are not supported")
            if et not in _VALID_VT:
                raise self._error(pos, f"array element type of {key!r}", f"unknown value type {et}")
            etype = GGUFValueType(et)
            pos += 4
        allowed = KNOWN_KEY_TYPES.get(key)
        if allowed is not None and (vtype, etype) not in allowed:
            want = " or ".join(sorted({_type_desc(*a) for a in allowed}))
            raise self._error(type_pos, f"value type of {key!r}",
                              f"must be {want}, got {_type_desc(vtype, etype)}")
        if vtype == GGUFValueType.ARRAY:
            value, pos = self._array(pos, key, etype)
        elif vtype == GGUFValueType.STRING:
            value, pos = self._string(pos, f"value of {key!r}")
        else:
            value = self._scalar(pos, key, vtype)
            pos += SCALAR_SIZE[vtype]
        if key == "general.alignment":
            if value == 0 or value & (value - 1):
                raise self._error(type_pos + 4, "general.alignment", f"alignment {value} is not a power of two")
            if value > GGUF_MAX_ALIGNMENT:
                raise self._error(type_pos + 4, "general.alignment",
                                  f"alignment {value} is larger than the maximum {GGUF_MAX_ALIGNMENT}")
            self.alignment = value
        self.metadata[key] = value
        self.metadata_types[key] = (vtype, etype)
        return pos

    def _scalar(self, pos: int, key: str, vtype: GGUFValueType):
        self._need(pos, SCALAR_SIZE[vtype], f"value of {key!r}")
        if vtype == GGUFValueType.BOOL:
            b = self._map[pos]
            if b > 1:
                raise self._error(pos, f"value of {key!r}", f"bool byte is {b}, not 0 or 1")
            return bool(b)
        return _SCALAR_STRUCT[vtype].unpack_from(self._map, pos)[0]

    def _array(self, pos: int, key: str, etype: GGUFValueType):
        field = f"array length of {key!r}"
        n = self._u64(pos, field)
        pos += 8
        left = self.file_size - pos
        min_size = 8 if etype == GGUFValueType.STRING else SCALAR_SIZE[etype]
        if n > left // min_size:
            raise self._error(pos - 8, field, f"{n} elements of {etype.name} cannot fit in the {left} bytes left")
        if etype == GGUFValueType.STRING:
            return self._string_array(pos, key, n)
        nbytes = n * min_size
        if etype == GGUFValueType.BOOL:
            raw = np.frombuffer(self._map, dtype=np.uint8, count=n, offset=pos)
            if n and raw.max() > 1:
                bad = int(np.argmax(raw > 1))
                raise self._error(pos + bad, f"element {bad} of {key!r}", f"bool byte is {raw[bad]}, not 0 or 1")
            value = raw.astype(np.bool_)
        else:
            # a copy: metadata must outlive close(), and small arrays should not pin the map
            value = np.frombuffer(self._map, dtype=SCALAR_DTYPE[etype], count=n, offset=pos).copy()
        return value, pos + nbytes

    def _string_array(self, pos: int, key: str, n: int) -> tuple[StringArray, int]:
        # The hot loop of opening a model (vocabularies have up to ~260k entries): kept flat. The strings
        # stay one UTF-8 buffer (StringArray), decoded when read.
        m = self._map
        size = self.file_size
        unpack = _U64.unpack_from
        parts: list[bytes] = []
        append = parts.append
        for i in range(n):
            if size - pos < 8:
                self._need(pos, 8, f"length of string {i} of {key!r}")
            ln = unpack(m, pos)[0]
            pos += 8
            if ln > size - pos:
                raise self._error(pos - 8, f"length of string {i} of {key!r}",
                                  f"string length {ln} is larger than the {size - pos} bytes left")
            append(m[pos:pos + ln])
            pos += ln
        strings = StringArray.from_bytes(parts)
        del parts
        data, off = strings.buffer, strings.offsets.tolist()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:  # count the strings that are not UTF-8 (they decode with surrogateescape)
            for i in range(n):
                try:
                    data[off[i]:off[i + 1]].decode("utf-8")
                except UnicodeDecodeError:
                    self._invalid_utf8 += 1
        return strings, pos

    def _parse_tensor_infos(self, pos: int, n_tensors: int) -> int:
        pending = []  # (name, ne, type id, relative offset, nbytes, n_elements, offset field position)
        names: set[str] = set()
        for i in range(n_tensors):
            name_pos = pos
            name, pos = self._string(pos, f"name of tensor #{i}", strict=True)
            if not name:
                raise self._error(name_pos, f"name of tensor #{i}", "empty tensor name")
            if len(name.encode("utf-8")) >= GGML_MAX_NAME:
                raise self._error(name_pos, f"name of tensor #{i}",
                                  f"tensor name {name[:80]!r} is too long ({len(name.encode())} bytes, "
                                  f"the maximum is {GGML_MAX_NAME - 1})")
            if name in names:
                raise self._error(name_pos, f"name of tensor #{i}", f"duplicate tensor name {name!r}")
            names.add(name)
            n_dims = self._u32(pos, f"n_dims of tensor {name!r}")
            if n_dims > GGML_MAX_DIMS:
                raise self._error(pos, f"n_dims of tensor {name!r}",
                                  f"{n_dims} dimensions, at most {GGML_MAX_DIMS} are supported")
            pos += 4
            self._need(pos, 8 * n_dims, f"dimensions of tensor {name!r}")
            ne = struct.unpack_from(f"<{n_dims}Q", self._map, pos)
            for j, d in enumerate(ne):
                if d > INT64_MAX:
                    raise self._error(pos + 8 * j, f"ne[{j}] of tensor {name!r}",
                                      f"dimension {d - (1 << 64)} is negative")
            pos += 8 * n_dims
            type_pos = pos
            type_id = self._u32(pos, f"type of tensor {name!r}")
            pos += 4
            info = _TYPE_BY_ID.get(type_id)
            if info is None:
                raise self._error(type_pos, f"type of tensor {name!r}", f"unknown tensor type {type_id}")
            n_elements = 1
            for d in ne:
                n_elements *= d
            if n_elements > INT64_MAX:
                raise self._error(name_pos, f"shape of tensor {name!r}",
                                  f"element count of shape {list(ne)} overflows int64")
            ne0 = ne[0] if ne else 1
            if ne0 % info.block_size:
                raise self._error(name_pos, f"ne[0] of tensor {name!r}",
                                  f"first dimension {ne0} is not a multiple of the {info.name} block size "
                                  f"{info.block_size}")
            nbytes = n_elements // info.block_size * info.type_size
            if nbytes > INT64_MAX:
                raise self._error(name_pos, f"shape of tensor {name!r}",
                                  f"byte size of shape {list(ne)} as {info.name} overflows int64")
            span = 1    # numpy refuses even an empty array whose non-zero dimensions overflow: (2**62, 0)
            for d in ne:
                span *= d or 1
            if span > INT64_MAX // 8:
                raise self._error(name_pos, f"shape of tensor {name!r}",
                                  f"shape {list(ne)} is too large for an array (its non-zero dimensions "
                                  f"multiply to {span})")
            offset_pos = pos
            rel = self._u64(pos, f"offset of tensor {name!r}")
            pos += 8
            pending.append((name, ne, type_id, rel, nbytes, n_elements, offset_pos))

        align = self.alignment
        self.data_offset = data_offset = (pos + align - 1) // align * align
        prev_rel, prev_end, prev_name = 0, 0, None
        size = self.file_size
        for name, ne, type_id, rel, nbytes, n_elements, offset_pos in pending:
            field = f"offset of tensor {name!r}"
            if rel % align:
                raise self._error(offset_pos, field, f"offset {rel} is not a multiple of the alignment {align}")
            if rel < prev_rel:
                raise self._error(offset_pos, field, f"tensors out of order: offset {rel} comes before the "
                                  f"offset {prev_rel} of the previous tensor {prev_name!r}")
            if rel < prev_end:
                raise self._error(offset_pos, field, f"offset {rel} overlaps the previous tensor {prev_name!r} "
                                  f"(which ends at {prev_end})")
            start = data_offset + rel
            if start + nbytes > size:
                raise self._error(offset_pos, field, f"tensor data [{start}, {start + nbytes}) runs past the end "
                                  f"of the file ({size} bytes)")
            self.tensors[name] = TensorInfo(name, tuple(ne), type_id, start, nbytes, n_elements, self)
            prev_rel, prev_end, prev_name = rel, rel + nbytes, name
        return pos
