"""GGUF file-format constants: magic, versions, metadata value types, limits, known key types.

Layout of a GGUF v2/v3 file (all little-endian):
    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key | u32 value type | value)
    n_tensors x (string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset)
    padding to `general.alignment` | tensor data (each tensor at data_offset + offset)
A string is u64 length + UTF-8 bytes (no NUL); an array is u32 element type + u64 count + elements.
"""
from __future__ import annotations

import enum

import numpy as np

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
GGUF_VERSION = 3                # what the writer produces
GGUF_DEFAULT_ALIGNMENT = 32
# Largest general.alignment accepted: a power of two no file has a reason to exceed (64 KiB pages
# are the largest in common use); it bounds the padding a hostile file can make us skip.
GGUF_MAX_ALIGNMENT = 1 << 20
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64              # ggml's name buffer, NUL included: names have at most 63 bytes
INT64_MAX = (1 << 63) - 1


class GGUFValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


VT = GGUFValueType

# struct format and numpy dtype of each fixed-size value type
SCALAR_FORMAT: dict[GGUFValueType, str] = {
    VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
    VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d",
}
SCALAR_DTYPE: dict[GGUFValueType, np.dtype] = {
    VT.UINT8: np.dtype("<u1"), VT.INT8: np.dtype("<i1"), VT.UINT16: np.dtype("<u2"), VT.INT16: np.dtype("<i2"),
    VT.UINT32: np.dtype("<u4"), VT.INT32: np.dtype("<i4"), VT.FLOAT32: np.dtype("<f4"), VT.BOOL: np.dtype("?"),
    VT.UINT64: np.dtype("<u8"), VT.INT64: np.dtype("<i8"), VT.FLOAT64: np.dtype("<f8"),
}
SCALAR_SIZE: dict[GGUFValueType, int] = {t: d.itemsize for t, d in SCALAR_DTYPE.items()}
INT_RANGE: dict[GGUFValueType, tuple[int, int]] = {
    VT.UINT8: (0, 255), VT.INT8: (-128, 127), VT.UINT16: (0, 65535), VT.INT16: (-32768, 32767),
    VT.UINT32: (0, (1 << 32) - 1), VT.INT32: (-(1 << 31), (1 << 31) - 1),
    VT.UINT64: (0, (1 << 64) - 1), VT.INT64: (-(1 << 63), (1 << 63) - 1),
}
INTEGER_TYPES = frozenset(INT_RANGE)
FLOAT_TYPES = frozenset((VT.FLOAT32, VT.FLOAT64))
# numpy dtype -> value type, for the writer's inference on numpy arrays and scalars
DTYPE_TO_TYPE: dict[np.dtype, GGUFValueType] = {d.newbyteorder("="): t for t, d in SCALAR_DTYPE.items()}

# Smallest encodings, used to reject counts the remaining bytes cannot hold before looping:
# a key-value pair is a >=1-byte key (8 + 1), a u32 type and a >=1-byte value.
MIN_KV_BYTES = 8 + 1 + 4 + 1
# a tensor info is a >=1-byte name (8 + 1), u32 n_dims, no dims at least, u32 type, u64 offset.
MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 4 + 8

# Keys whose type the format fixes (llama.cpp reads them with a type check). Value: the allowed
# (value type, array element type or None) pairs. Used by the reader to validate and by the writer
# to pick the type when none is given.
KNOWN_KEY_TYPES: dict[str, tuple[tuple[GGUFValueType, GGUFValueType | None], ...]] = {
    "general.alignment": ((VT.UINT32, None),),
    "general.architecture": ((VT.STRING, None),),
    "general.name": ((VT.STRING, None),),
    "general.file_type": ((VT.UINT32, None),),
    "general.quantization_version": ((VT.UINT32, None),),
    "tokenizer.ggml.model": ((VT.STRING, None),),
    "tokenizer.ggml.pre": ((VT.STRING, None),),
    "tokenizer.ggml.tokens": ((VT.ARRAY, VT.STRING),),
    "tokenizer.ggml.merges": ((VT.ARRAY, VT.STRING),),
    "tokenizer.ggml.scores": ((VT.ARRAY, VT.FLOAT32),),
    "tokenizer.ggml.token_type": ((VT.ARRAY, VT.INT32),),
    "tokenizer.chat_template": ((VT.STRING, None),),
}
# Token-id keys: any integer type is tolerated by readers, UINT32 is what converters write.
for _name in ("bos", "eos", "eot", "eom", "unknown", "separator", "padding", "cls", "mask"):
    KNOWN_KEY_TYPES[f"tokenizer.ggml.{_name}_token_id"] = tuple((t, None) for t in INTEGER_TYPES)
for _name in ("add_bos_token", "add_eos_token", "add_space_prefix"):
    KNOWN_KEY_TYPES[f"tokenizer.ggml.{_name}"] = ((VT.BOOL, None),)

# Default types for the writer when a key is `<arch>.<suffix>` (what llama.cpp's converter writes).
# Not enforced by the reader: some architectures store per-layer arrays under these keys.
ARCH_KEY_DEFAULT_TYPES: dict[str, GGUFValueType] = {
    "context_length": VT.UINT32, "embedding_length": VT.UINT32, "block_count": VT.UINT32,
    "feed_forward_length": VT.UINT32, "vocab_size": VT.UINT32,
    "attention.head_count": VT.UINT32, "attention.head_count_kv": VT.UINT32,
    "attention.key_length": VT.UINT32, "attention.value_length": VT.UINT32,
    "attention.sliding_window": VT.UINT32, "rope.dimension_count": VT.UINT32,
    "expert_count": VT.UINT32, "expert_used_count": VT.UINT32,
    "attention.layer_norm_rms_epsilon": VT.FLOAT32, "attention.layer_norm_epsilon": VT.FLOAT32,
    "rope.freq_base": VT.FLOAT32, "rope.scaling.factor": VT.FLOAT32,
    "attn_logit_softcapping": VT.FLOAT32, "final_logit_softcapping": VT.FLOAT32,
}
