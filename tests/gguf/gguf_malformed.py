"""Generator of malformed GGUF files, each paired with the error the reader must give.

GGUFWriter refuses to write bad files, so files here are assembled from raw fields: a RawGGUF
holds every field as plain values (and raw bytes where a field itself must be malformed), and
each case edits one field of a small valid file.

    python tests/gguf/gguf_malformed.py OUT_DIR   # writes every case as OUT_DIR/<name>.gguf
"""
from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field

# value type ids (GGUF spec)
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B", U64: "<Q",
        I64: "<q", F64: "<d"}
# ggml type ids used here: (id, block size, bytes per block)
GGML_F32, GGML_Q8_0, GGML_Q4_K = (0, 1, 4), (8, 32, 34), (12, 256, 144)


def enc_str(s: str | bytes, length: int | None = None) -> bytes:
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def enc_value(vtype: int, value) -> bytes:
    if vtype == STRING:
        return enc_str(value)
    if vtype == ARRAY:
        etype, items = value
        body = b"".join(enc_value(etype, v) for v in items)
        return struct.pack("<IQ", etype, len(items)) + body
    return struct.pack(_FMT[vtype], value)


@dataclass
class KV:
    key: str | bytes
    vtype: int
    value: object = None
    raw_value: bytes | None = None     # used instead of encoding value
    key_length: int | None = None      # overrides the encoded key length

    def encode(self) -> bytes:
        body = self.raw_value if self.raw_value is not None else enc_value(self.vtype, self.value)
        return enc_str(self.key, self.key_length) + struct.pack("<I", self.vtype) + body


@dataclass
class Tensor:
    name: str | bytes
    ne: list[int]                      # ggml order
    ggml_type: int
    offset: int | None = None          # relative to the data section; None: packed after the previous
    n_dims: int | None = None          # overrides len(ne)
    name_length: int | None = None
    nbytes: int = 0                    # data bytes to emit (filled by RawGGUF.layout)

    def encode(self) -> bytes:
        n_dims = len(self.ne) if self.n_dims is None else self.n_dims
        return (enc_str(self.name, self.name_length) + struct.pack("<I", n_dims)
                + b"".join(struct.pack("<Q", d) for d in self.ne) + struct.pack("<IQ", self.ggml_type, self.offset))


@dataclass
class RawGGUF:
    kvs: list[KV] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    magic: bytes = b"GGUF"
    version_bytes: bytes = struct.pack("<I", 3)
    n_tensors: int | None = None
    n_kv: int | None = None
    alignment: int = 32
    truncate_data: int = 0             # bytes cut from the end of the file

    def layout(self) -> None:
        rel = 0
        for t in self.tensors:
            if t.offset is None:
                t.offset = rel
            rel = t.offset + t.nbytes
            rel += -rel % self.alignment

    def header(self) -> bytes:
        self.layout()
        out = self.magic + self.version_bytes
        out += struct.pack("<QQ", len(self.tensors) if self.n_tensors is None else self.n_tensors,
                           len(self.kvs) if self.n_kv is None else self.n_kv)
        out += b"".join(kv.encode() for kv in self.kvs)
        out += b"".join(t.encode() for t in self.tensors)
        return out

    def tobytes(self) -> bytes:
        out = bytearray(self.header())
        out += b"\0" * (-len(out) % self.alignment)
        data_start = len(out)
        # data for every tensor placed within the first MiB (a hostile offset gets none)
        end = data_start + max((t.offset + t.nbytes for t in self.tensors if t.offset < 1 << 20), default=0)
        # deterministic non-zero data so a misread shows
        out += bytes((i * 7 + 3) & 0xFF for i in range(end - data_start))
        if self.truncate_data:
            del out[len(out) - self.truncate_data:]
        return bytes(out)


def tensor_nbytes(ne: list[int], t: tuple[int, int, int]) -> int:
    n = 1
    for d in ne:
        n *= d
    return n // t[1] * t[2]


def base() -> RawGGUF:
    """A small valid file: every metadata kind the validation touches and three tensor types."""
    g = RawGGUF()
    g.kvs = [
        KV("general.architecture", STRING, "llama"),
        KV("general.alignment", U32, 32),
        KV("llama.block_count", U32, 1),
        KV("llama.rope.freq_base", F32, 10000.0),
        KV("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "a", "b", "ab"])),
        KV("tokenizer.ggml.scores", ARRAY, (F32, [0.0, -1.0, -2.0, -3.0])),
        KV("tokenizer.ggml.token_type", ARRAY, (I32, [3, 1, 1, 1])),
        KV("tokenizer.ggml.add_bos_token", BOOL, 1),
        KV("custom.flags", ARRAY, (U8, [1, 2, 3])),
    ]
    for name, ne, t in (("norm.weight", [64], GGML_F32), ("attn.weight", [64, 4], GGML_Q8_0),
                        ("ffn.weight", [256, 2], GGML_Q4_K)):
        g.tensors.append(Tensor(name, ne, t[0], nbytes=tensor_nbytes(ne, t)))
    return g


def _kv(g: RawGGUF, key: str) -> KV:
    return next(kv for kv in g.kvs if kv.key == key)


def _case(edit) -> bytes:
    g = base()
    edit(g)
    return g.tobytes()


def cases() -> list[tuple[str, bytes, str]]:
    """(name, file bytes, regex the GGUFError message must match), one per malformed field."""
    out: list[tuple[str, bytes, str]] = []

    def add(name, data, pattern):
        out.append((name, data, pattern))

    def edit(name, pattern):
        def deco(fn):
            add(name, _case(fn), pattern)
            return fn
        return deco

    good = base().tobytes()
    add("empty_file", b"", r"file at byte offset 0: the file is empty")
    add("one_byte", b"G", r"magic at byte offset 0: bad magic")
    add("bad_magic", b"GGML" + good[4:], r"magic at byte offset 0: bad magic b'GGML'")
    add("lowercase_magic", b"gguf" + good[4:], r"bad magic b'gguf'")
    add("version_1", good[:4] + struct.pack("<I", 1) + good[8:],
        r"version at byte offset 4: unsupported GGUF version 1")
    add("version_0", good[:4] + struct.pack("<I", 0) + good[8:], r"unsupported GGUF version 0")
    add("version_4", good[:4] + struct.pack("<I", 4) + good[8:], r"unsupported GGUF version 4")
    add("big_endian", good[:4] + struct.pack(">I", 3) + good[8:], r"version at byte offset 4: big-endian GGUF")
    add("big_endian_v2", good[:4] + struct.pack(">I", 2) + good[8:], r"big-endian GGUF is not supported")
    add("tensor_count_huge", good[:8] + struct.pack("<Q", 1 << 62) + good[16:],
        r"tensor count at byte offset 8: \d+ tensors cannot fit")
    add("key_count_huge", good[:16] + struct.pack("<Q", (1 << 64) - 1) + good[24:],
        r"metadata key count at byte offset 16: \d+ keys cannot fit")
    n = len(good) - 24
    add("counts_together_too_big", good[:8] + struct.pack("<QQ", n // 2 // 25 + 2, n // 2 // 14 + 2) + good[24:],
        r"cannot fit together")
    add("key_count_one_too_many", good[:16] + struct.pack("<Q", 10) + good[24:],
        r"name of tensor #0 at byte offset \d+: empty tensor name")  # key #9 swallowed the first tensor info

    @edit("key_length_huge", r"key of metadata entry #0 length at byte offset 24: string length \d+ is larger than")
    def _(g):
        g.kvs[0].key_length = 1 << 40

    @edit("empty_key", r"key of metadata entry #2 at byte offset \d+: empty key")
    def _(g):
        g.kvs[2].key = ""

    @edit("duplicate_key", r"key 'llama.block_count' at byte offset \d+: duplicate key")
    def _(g):
        g.kvs.append(KV("llama.block_count", U32, 2))

    @edit("key_not_utf8", r"key of metadata entry #2 at byte offset \d+: not valid UTF-8")
    def _(g):
        g.kvs[2].key = b"llama.\xff\xfe"

    @edit("unknown_value_type", r"value type of 'llama.block_count' at byte offset \d+: unknown value type 13")
    def _(g):
        kv = _kv(g, "llama.block_count")
        kv.raw_value, kv.vtype = struct.pack("<I", 1), 13

    @edit("unknown_value_type_huge", r"unknown value type 4294967295")
    def _(g):
        kv = _kv(g, "llama.block_count")
        kv.raw_value, kv.vtype = struct.pack("<I", 1), 0xFFFFFFFF

    @edit("unknown_array_element_type",
          r"array element type of 'custom.flags' at byte offset \d+: unknown value type 77")
    def _(g):
        _kv(g, "custom.flags").raw_value = struct.pack("<IQ", 77, 1) + b"\0"

    @edit("nested_array", r"array element type of 'custom.flags' at byte offset \d+: nested arrays")
    def _(g):
        _kv(g, "custom.flags").raw_value = struct.pack("<IQ", ARRAY, 1) + enc_value(ARRAY, (U8, [1]))

    @edit("array_length_huge", r"array length of 'custom.flags' at byte offset \d+: \d+ elements of UINT8 cannot fit")
    def _(g):
        _kv(g, "custom.flags").raw_value = struct.pack("<IQ", U8, 1 << 50) + b"\1\2\3"

    @edit("float_array_length_past_end", r"array length of 'tokenizer.ggml.scores'.*elements of FLOAT32 cannot fit")
    def _(g):
        kv = _kv(g, "tokenizer.ggml.scores")
        kv.raw_value = struct.pack("<IQ", F32, 100000) + struct.pack("<4f", 0, 0, 0, 0)

    @edit("string_array_length_huge", r"array length of 'tokenizer.ggml.tokens'.*elements of STRING cannot fit")
    def _(g):
        kv = _kv(g, "tokenizer.ggml.tokens")
        kv.raw_value = struct.pack("<IQ", STRING, (1 << 64) - 1)

    @edit("string_in_array_too_long", r"length of string 1 of 'tokenizer.ggml.tokens' at byte offset \d+: "
                                      r"string length \d+ is larger than")
    def _(g):
        kv = _kv(g, "tokenizer.ggml.tokens")
        kv.raw_value = struct.pack("<IQ", STRING, 2) + enc_str("<s>") + enc_str("a", 1 << 33)

    @edit("string_value_too_long", r"value of 'general.architecture' length at byte offset \d+: string length")
    def _(g):
        _kv(g, "general.architecture").raw_value = enc_str("llama", 10 ** 12)

    @edit("bool_not_0_or_1", r"value of 'tokenizer.ggml.add_bos_token' at byte offset \d+: bool byte is 2")
    def _(g):
        _kv(g, "tokenizer.ggml.add_bos_token").value = 2

    @edit("bool_array_bad_byte", r"element 1 of 'custom.bools' at byte offset \d+: bool byte is 7")
    def _(g):
        g.kvs.append(KV("custom.bools", ARRAY, (U8, [1, 7, 0])))
        g.kvs[-1].raw_value = struct.pack("<IQ", BOOL, 3) + b"\1\7\0"

    @edit("alignment_not_power_of_two", r"general.alignment at byte offset \d+: alignment 48 is not a power of two")
    def _(g):
        _kv(g, "general.alignment").value = 48

    @edit("alignment_zero", r"general.alignment at byte offset \d+: alignment 0 is not a power of two")
    def _(g):
        _kv(g, "general.alignment").value = 0

    @edit("alignment_too_large", r"alignment 16777216 is larger than the maximum")
    def _(g):
        _kv(g, "general.alignment").value = 1 << 24

    @edit("alignment_u64", r"value type of 'general.alignment' at byte offset \d+: must be UINT32, got UINT64")
    def _(g):
        kv = _kv(g, "general.alignment")
        kv.vtype = U64

    @edit("alignment_i32", r"value type of 'general.alignment'.*must be UINT32, got INT32")
    def _(g):
        _kv(g, "general.alignment").vtype = I32

    @edit("scores_not_float32", r"value type of 'tokenizer.ggml.scores'.*must be array of FLOAT32, got array of INT32")
    def _(g):
        _kv(g, "tokenizer.ggml.scores").value = (I32, [0, -1, -2, -3])

    @edit("scores_float64", r"'tokenizer.ggml.scores'.*must be array of FLOAT32, got array of FLOAT64")
    def _(g):
        _kv(g, "tokenizer.ggml.scores").value = (F64, [0, -1, -2, -3])

    @edit("tokens_not_strings", r"'tokenizer.ggml.tokens'.*must be array of STRING, got array of INT32")
    def _(g):
        _kv(g, "tokenizer.ggml.tokens").value = (I32, [1, 2, 3, 4])

    @edit("token_type_not_int32", r"'tokenizer.ggml.token_type'.*must be array of INT32, got array of FLOAT32")
    def _(g):
        _kv(g, "tokenizer.ggml.token_type").value = (F32, [3, 1, 1, 1])

    @edit("architecture_not_string", r"'general.architecture'.*must be STRING, got UINT32")
    def _(g):
        kv = _kv(g, "general.architecture")
        kv.vtype, kv.value = U32, 7

    @edit("tokens_scalar_not_array", r"'tokenizer.ggml.tokens'.*must be array of STRING, got STRING")
    def _(g):
        kv = _kv(g, "tokenizer.ggml.tokens")
        kv.vtype, kv.value = STRING, "abc"

    @edit("empty_tensor_name", r"name of tensor #1 at byte offset \d+: empty tensor name")
    def _(g):
        g.tensors[1].name = ""

    @edit("tensor_name_too_long", r"name of tensor #0 at byte offset \d+: tensor name .* is too long \(64 bytes")
    def _(g):
        g.tensors[0].name = "n" * 64

    @edit("tensor_name_length_huge", r"name of tensor #2 length at byte offset \d+: string length \d+ is larger")
    def _(g):
        g.tensors[2].name_length = 1 << 60

    @edit("tensor_name_not_utf8", r"name of tensor #0 at byte offset \d+: not valid UTF-8")
    def _(g):
        g.tensors[0].name = b"\xc3\x28"

    @edit("duplicate_tensor_name", r"name of tensor #2 at byte offset \d+: duplicate tensor name 'attn.weight'")
    def _(g):
        g.tensors[2].name = "attn.weight"

    @edit("five_dims", r"n_dims of tensor 'attn.weight' at byte offset \d+: 5 dimensions, at most 4")
    def _(g):
        g.tensors[1].ne = [64, 1, 1, 1, 4]

    @edit("n_dims_huge", r"n_dims of tensor 'norm.weight'.*4294967295 dimensions")
    def _(g):
        g.tensors[0].n_dims = 0xFFFFFFFF

    @edit("negative_dimension", r"ne\[1\] of tensor 'attn.weight' at byte offset \d+: dimension -1 is negative")
    def _(g):
        g.tensors[1].ne = [64, (1 << 64) - 1]

    @edit("element_count_overflow",
          r"shape of tensor 'norm.weight' at byte offset \d+: element count .* overflows int64")
    def _(g):
        g.tensors[0].ne = [1 << 32, 1 << 32]
        g.tensors[0].nbytes = 0

    @edit("byte_size_overflow", r"shape of tensor 'norm.weight'.*byte size .* as F32 overflows int64")
    def _(g):
        g.tensors[0].ne = [1 << 31, 1 << 31]
        g.tensors[0].nbytes = 0

    @edit("unknown_tensor_type_removed_q4_2", r"type of tensor 'attn.weight' at byte offset \d+: unknown tensor type 4")
    def _(g):
        g.tensors[1].ggml_type = 4

    @edit("unknown_tensor_type_huge", r"unknown tensor type 1000")
    def _(g):
        g.tensors[1].ggml_type = 1000

    @edit("ne0_not_block_multiple", r"ne\[0\] of tensor 'attn.weight' at byte offset \d+: first dimension 48 is "
                                    r"not a multiple of the Q8_0 block size 32")
    def _(g):
        g.tensors[1].ne = [48, 4]
        g.tensors[1].nbytes = 0

    @edit("k_quant_ne0_not_block_multiple", r"first dimension 128 is not a multiple of the Q4_K block size 256")
    def _(g):
        g.tensors[2].ne = [128, 2]
        g.tensors[2].nbytes = 144

    @edit("misaligned_offset", r"offset of tensor 'attn.weight' at byte offset \d+: offset 272 is not a multiple "
                               r"of the alignment 32")
    def _(g):
        g.tensors[1].offset = 256 + 16

    @edit("offsets_out_of_order", r"offset of tensor 'ffn.weight' at byte offset \d+: tensors out of order")
    def _(g):
        g.layout()
        g.tensors[2].offset = 0

    @edit("offsets_overlap", r"offset of tensor 'ffn.weight' at byte offset \d+: offset 288 overlaps the previous "
                             r"tensor 'attn.weight'")
    def _(g):
        g.layout()
        g.tensors[2].offset = g.tensors[1].offset + 32

    @edit("data_past_end", r"offset of tensor 'ffn.weight' at byte offset \d+: tensor data .* runs past the end")
    def _(g):
        g.truncate_data = 1

    @edit("offset_huge", r"offset of tensor 'ffn.weight'.*runs past the end of the file")
    def _(g):
        g.layout()
        g.tensors[2].offset = (1 << 64) - 32

    @edit("tensor_too_big_for_file", r"offset of tensor 'norm.weight'.*runs past the end of the file")
    def _(g):
        g.tensors[0].ne = [1 << 40]
        g.tensors[0].nbytes = 0
        g.layout()
        g.tensors[0].nbytes = 256  # only this much is actually emitted

    @edit("alignment_changes_layout", r"offset of tensor 'ffn.weight'.*not a multiple of the alignment 64")
    def _(g):
        _kv(g, "general.alignment").value = 64    # offsets were laid out for 32

    return out


def valid_variants() -> list[tuple[str, bytes, dict]]:
    """Unusual but valid files: (name, bytes, facts the reader must report)."""
    out = []
    g = base()
    g.tensors.insert(1, Tensor("empty.weight", [0, 4], GGML_Q8_0[0], nbytes=0))
    out.append(("zero_dimension", g.tobytes(), {"empty.weight": (4, 0), "attn.weight": (4, 64)}))
    g = base()
    g.tensors = []
    out.append(("no_tensors", g.tobytes(), {}))
    g = base()
    _kv(g, "general.alignment").value = 4096
    g.alignment = 4096
    out.append(("alignment_4096", g.tobytes(), {"attn.weight": (4, 64)}))
    g = base()
    g.version_bytes = struct.pack("<I", 2)
    out.append(("version_2", g.tobytes(), {"attn.weight": (4, 64)}))
    return out


def truncation_points(data: bytes, header_len: int) -> list[int]:
    """Cut points: every byte of the fixed header, every 3rd byte of metadata and tensor table,
    and a spread through the data section."""
    pts = set(range(0, 24))
    pts.update(range(24, header_len, 3))
    pts.update(range(header_len, len(data), max(1, (len(data) - header_len) // 16)))
    pts.add(len(data) - 1)
    return sorted(p for p in pts if p < len(data))


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "malformed_gguf"
    os.makedirs(out_dir, exist_ok=True)
    for name, data, pattern in cases():
        with open(os.path.join(out_dir, f"{name}.gguf"), "wb") as f:
            f.write(data)
    print(f"wrote {len(cases())} files to {out_dir}")
