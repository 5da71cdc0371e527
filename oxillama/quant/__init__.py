"""Quantization: dequantize, quantize, and QMatrix products over raw GGUF bytes.

All heavy work runs in C (csrc/), on the SIMD tier chosen at import (see oxillama.system_info()).
"""
from __future__ import annotations

import numpy as np

from oxillama import _core
from oxillama.errors import QuantError
from oxillama.quant.types import GGMLType, SUPPORTED_TYPES, TYPES, TypeInfo, supported_type, type_info

__all__ = ["GGMLType", "QMatrix", "SUPPORTED_TYPES", "TYPES", "TypeInfo", "dequantize", "quantize",
           "type_info", "row_bytes"]


def _as_bytes(data, what="data") -> np.ndarray:
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = np.frombuffer(data, dtype=np.uint8)
    if not isinstance(data, np.ndarray):
        raise QuantError(f"{what} must be a numpy uint8 array or bytes, got {type(data).__name__}")
    if data.dtype != np.uint8:
        raise QuantError(f"{what} must have dtype uint8, got {data.dtype}")
    if data.ndim != 1:
        data = data.reshape(-1) if data.flags.c_contiguous else None
        if data is None:
            raise QuantError(f"{what} must be C-contiguous")
    if not data.flags.c_contiguous:
        raise QuantError(f"{what} must be C-contiguous")
    return data


def _as_f32(x, ndim: int, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise QuantError(f"{what} must be a numpy float32 array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise QuantError(f"{what} must have dtype float32, got {x.dtype}")
    if x.ndim != ndim:
        raise QuantError(f"{what} must be {ndim}-D, got shape {x.shape}")
    if not x.flags.c_contiguous:
        raise QuantError(f"{what} must be C-contiguous")
    return x


def row_bytes(qtype: str | int, n: int) -> int:
    """Bytes that n values of qtype occupy."""
    return type_info(qtype).row_bytes(n)


def dequantize(data, qtype: str | int, n: int, *, tier: str | None = None) -> np.ndarray:
    """Dequantize n values of qtype from raw bytes into float32."""
    info = supported_type(qtype)
    data = _as_bytes(data)
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise QuantError(f"n must be a non-negative int, got {n!r}")
    out = _core.dequantize(data, int(info.qtype), int(n), tier)
    return np.frombuffer(out, dtype=np.float32)


def quantize(x, qtype: str | int, *, tier: str | None = None, reference: bool = True) -> np.ndarray:
    """Quantize float32 values to qtype; returns the raw block bytes as uint8.

    Any shape is accepted (the values are taken in C order); the element count must be a
    multiple of the type's block size.
    """
    info = supported_type(qtype)
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise QuantError(f"quantize needs a float32 numpy array, got "
                         f"{getattr(x, 'dtype', type(x).__name__)}")
    if not x.flags.c_contiguous:
        raise QuantError("quantize needs a C-contiguous array")
    flat = x.reshape(-1)
    out = _core.quantize(flat, int(info.qtype), reference, tier)
    return np.frombuffer(out, dtype=np.uint8)


class QMatrix:
    """A (rows, cols) weight matrix of quant type qtype over raw bytes, zero copy.

    `data` is a contiguous uint8 array (for example a GGUF tensor's view into the memory map);
    it is kept alive by the QMatrix. Products release the GIL and split rows across n_threads.
    """

    def __init__(self, data, qtype: str | int, rows: int, cols: int, *, n_threads: int | None = None):
        self.info = supported_type(qtype)
        self.data = _as_bytes(data)
        if rows <= 0 or cols <= 0:
            raise QuantError(f"QMatrix needs rows, cols > 0, got {rows}x{cols}")
        need = self.info.row_bytes(cols) * rows
        if self.data.nbytes != need:
            raise QuantError(f"{self.info.name} matrix {rows}x{cols} needs {need} bytes, got {self.data.nbytes}")
        self.rows, self.cols = int(rows), int(cols)
        from oxillama._system import default_threads
        self.n_threads = default_threads() if n_threads is None else int(n_threads)
        if self.n_threads < 1:
            raise QuantError(f"n_threads must be >= 1, got {n_threads}")

    @property
    def qtype(self) -> str:
        return self.info.name

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def __repr__(self) -> str:
        return f"QMatrix({self.info.name}, {self.rows}x{self.cols})"

    def matvec(self, x: np.ndarray, *, out: np.ndarray | None = None, n_threads: int | None = None,
               tier: str | None = None) -> np.ndarray:
        """y = W @ x, x of shape (cols,), y of shape (rows,)."""
        x = _as_f32(x, 1, "x")
        if x.shape[0] != self.cols:
            raise QuantError(f"x has {x.shape[0]} values, the matrix has {self.cols} columns")
        y = np.empty(self.rows, dtype=np.float32) if out is None else _as_f32(out, 1, "out")
        if y.shape[0] != self.rows:
            raise QuantError(f"out has {y.shape[0]} values, the matrix has {self.rows} rows")
        _core.matvec(self.data, int(self.info.qtype), self.rows, self.cols, x, y,
                     n_threads or self.n_threads, tier)
        return y

    def matmul(self, X: np.ndarray, *, out: np.ndarray | None = None, n_threads: int | None = None,
               tier: str | None = None) -> np.ndarray:
        """Y = X @ W.T, X of shape (n, cols), Y of shape (n, rows)."""
        X = _as_f32(X, 2, "X")
        if X.shape[1] != self.cols:
            raise QuantError(f"X has {X.shape[1]} columns, the matrix has {self.cols}")
        Y = np.empty((X.shape[0], self.rows), dtype=np.float32) if out is None else _as_f32(out, 2, "out")
        if Y.shape != (X.shape[0], self.rows):
            raise QuantError(f"out has shape {Y.shape}, want {(X.shape[0], self.rows)}")
        _core.matmul(self.data, int(self.info.qtype), self.rows, self.cols, X, Y,
                     n_threads or self.n_threads, tier)
        return Y

    def dequantize(self) -> np.ndarray:
        return dequantize(self.data, self.info.qtype, self.rows * self.cols).reshape(self.rows, self.cols)
