"""GGUF/ggml tensor types: ids, names, block sizes, bytes per block.

This table is pure Python so that the GGUF reader can validate files without the native
core; tests check it against the C table (csrc/scalar/register.c).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from oxillama.errors import QuantError


class GGMLType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


@dataclass(frozen=True)
class TypeInfo:
    qtype: GGMLType
    block_size: int      # values per block
    type_size: int       # bytes per block
    supported: bool      # oxillama has kernels for it

    @property
    def name(self) -> str:
        return self.qtype.name

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.block_size

    def row_bytes(self, n: int) -> int:
        if n % self.block_size:
            raise QuantError(f"{self.name}: {n} values is not a multiple of the block size {self.block_size}")
        return n // self.block_size * self.type_size


QK_K = 256

# (block size, bytes per block, has kernels) -- sizes as in ggml's type_traits.
_SIZES = {
    GGMLType.F32: (1, 4, True),
    GGMLType.F16: (1, 2, True),
    GGMLType.BF16: (1, 2, True),
    GGMLType.Q4_0: (32, 18, True),
    GGMLType.Q4_1: (32, 20, True),
    GGMLType.Q5_0: (32, 22, True),
    GGMLType.Q5_1: (32, 24, True),
    GGMLType.Q8_0: (32, 34, True),
    GGMLType.Q8_1: (32, 36, True),
    GGMLType.Q2_K: (QK_K, 84, True),
    GGMLType.Q3_K: (QK_K, 110, True),
    GGMLType.Q4_K: (QK_K, 144, True),
    GGMLType.Q5_K: (QK_K, 176, True),
    GGMLType.Q6_K: (QK_K, 210, True),
    GGMLType.Q8_K: (QK_K, 292, True),
    GGMLType.IQ4_NL: (32, 18, True),
    GGMLType.IQ4_XS: (QK_K, 136, True),
    GGMLType.MXFP4: (32, 17, True),
    GGMLType.NVFP4: (64, 36, True),
    GGMLType.Q1_0: (128, 18, True),
    GGMLType.TQ1_0: (QK_K, 54, True),
    GGMLType.TQ2_0: (QK_K, 66, True),
    GGMLType.IQ2_XXS: (QK_K, 66, True),
    GGMLType.IQ2_XS: (QK_K, 74, True),
    GGMLType.IQ3_XXS: (QK_K, 98, True),
    GGMLType.IQ1_S: (QK_K, 50, True),
    GGMLType.IQ3_S: (QK_K, 110, True),
    GGMLType.IQ2_S: (QK_K, 82, True),
    GGMLType.IQ1_M: (QK_K, 56, True),
    # known to the file format, no kernels (integer and F64 tensors)
    GGMLType.I8: (1, 1, False),
    GGMLType.I16: (1, 2, False),
    GGMLType.I32: (1, 4, False),
    GGMLType.I64: (1, 8, False),
    GGMLType.F64: (1, 8, False),
}

TYPES: dict[GGMLType, TypeInfo] = {t: TypeInfo(t, *v) for t, v in _SIZES.items()}
SUPPORTED_TYPES = tuple(t.name for t, info in TYPES.items() if info.supported)


def type_info(qtype: str | int | GGMLType) -> TypeInfo:
    """Look a type up by name ("Q4_K", case-insensitive) or id; QuantError if unknown."""
    try:
        if isinstance(qtype, str):
            t = GGMLType[qtype.upper()]
        elif isinstance(qtype, (int, GGMLType)) and not isinstance(qtype, bool):
            t = GGMLType(int(qtype))
        else:
            raise QuantError(f"quant type must be a name or an id, got {type(qtype).__name__}")
    except (KeyError, ValueError):
        raise QuantError(f"unknown quant type {qtype!r}; supported: {', '.join(SUPPORTED_TYPES)}") from None
    return TYPES[t]


def supported_type(qtype: str | int | GGMLType) -> TypeInfo:
    """Like type_info, but QuantError if oxillama has no kernels for the type."""
    info = type_info(qtype)
    if not info.supported:
        raise QuantError(f"quant type {info.name} is not supported; supported: {', '.join(SUPPORTED_TYPES)}")
    return info
