"""StringArray: a GGUF array of strings kept as one UTF-8 buffer and offsets.

A 262k-token vocabulary as a list of str costs ~22 MB of Python objects for as long as the model is
open; as a buffer and an offset table it costs ~5 MB, and items are decoded when they are read.
It behaves as a read-only sequence of str and compares equal to a list or tuple with the same items.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


class StringArray(Sequence):
    """Read-only sequence of str over `data` (UTF-8 bytes) cut at `offsets` ((n + 1,) int64, rising).

    Invalid UTF-8 decodes with surrogateescape, so the bytes round-trip through `str.encode(...,
    "surrogateescape")` as they did in the file.
    """

    __slots__ = ("_data", "_offsets")

    def __init__(self, data: bytes, offsets: np.ndarray):
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != len(data) \
                or (offsets.size > 1 and np.any(np.diff(offsets) < 0)):
            raise ValueError("StringArray offsets must rise from 0 to the length of the data")
        self._data = bytes(data)
        self._offsets = offsets

    @classmethod
    def from_bytes(cls, items: list) -> "StringArray":
        """From each string's UTF-8 bytes (bytes or memoryview slices)."""
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in items], out=offsets[1:])
        return cls(b"".join(items), offsets)

    @classmethod
    def from_strings(cls, items) -> "StringArray":
        return cls.from_bytes([s.encode("utf-8", "surrogateescape") for s in items])

    def __len__(self) -> int:
        return self._offsets.size - 1

    def _item(self, i: int) -> str:
        return _decode(self._data[self._offsets[i]:self._offsets[i + 1]])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        try:
            i = index.__index__()
        except AttributeError:
            raise TypeError(f"StringArray indices must be integers or slices, not {type(index).__name__}") from None
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"StringArray index {index} out of range for {n} strings")
        return self._item(i)

    def __iter__(self):
        data, off = self._data, self._offsets.tolist()
        for i in range(len(off) - 1):
            yield _decode(data[off[i]:off[i + 1]])

    def tolist(self) -> list[str]:
        return list(self)

    def __eq__(self, other):
        if isinstance(other, StringArray):
            return self._data == other._data and np.array_equal(self._offsets, other._offsets)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # a sequence that equals lists is not hashable, like a list

    def __repr__(self) -> str:
        n = len(self)
        head = ", ".join(repr(s) for s in self[:3])
        return f"StringArray([{head}{', ...' if n > 3 else ''}], n={n})"

    @property
    def buffer(self) -> bytes:
        """All strings' UTF-8 bytes, back to back."""
        return self._data

    @property
    def offsets(self) -> np.ndarray:
        """(n + 1,) int64: string i is buffer[offsets[i]:offsets[i + 1]] (do not modify)."""
        return self._offsets

    @property
    def nbytes(self) -> int:
        return len(self._data) + self._offsets.nbytes
