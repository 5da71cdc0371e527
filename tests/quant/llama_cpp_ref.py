"""llama.cpp's own quantizers, reached through the shared libraries llama-cpp-python ships (a second
opinion for the quantize tests, and the source of their goldens).

The libraries are found in the llama_cpp package's lib/ folder, or in OXILLAMA_LLAMA_CPP_LIB (a
folder holding libllama.so and libggml-base.so). The structs are declared here from llama.h
(llama-cpp-python 0.3.36's vendored llama.cpp) rather than taken from the binding.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np


def lib_dir() -> Path | None:
    env = os.environ.get("OXILLAMA_LLAMA_CPP_LIB")
    if env:
        return Path(env)
    try:
        import llama_cpp
    except Exception:   # not installed, or a broken install: no second opinion
        return None
    d = Path(llama_cpp.__file__).parent / "lib"
    return d if d.is_dir() else None


def available() -> bool:
    d = lib_dir()
    return d is not None and (d / "libllama.so").exists() and (d / "libggml-base.so").exists()


_libs = {}


def _lib(name: str) -> ctypes.CDLL:
    if name not in _libs:
        _libs[name] = ctypes.CDLL(str(lib_dir() / name), mode=ctypes.RTLD_GLOBAL)
    return _libs[name]


def ggml_quantize(qtype: int, x: np.ndarray, imatrix: np.ndarray | None = None) -> bytes:
    """ggml_quantize_chunk over the rows of x (rows, n_per_row), as llama-quantize calls it."""
    lib = _lib("libggml-base.so")
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, cols = x.shape
    out = np.zeros(lib.ggml_row_size(qtype, cols) * rows, dtype=np.uint8)
    w = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
    lib.ggml_quantize_chunk(qtype, x.ctypes.data, out.ctypes.data, 0, rows, cols, None if w is None else w.ctypes.data)
    return out.tobytes()


class _ImatrixData(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]


class _Params(ctypes.Structure):
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


NO_TYPE = 1000   # "no override": any value >= GGML_TYPE_COUNT


def llama_quantize(src: str, dst: str, ftype: int, *, imatrix: dict[str, np.ndarray] | None = None,
                   pure: bool = False, output_tensor_type: int | None = None,
                   token_embedding_type: int | None = None, allow_requantize: bool = False,
                   leave_output_tensor: bool = False, nthread: int = 0) -> None:
    """llama_model_quantize with llama-quantize's defaults; imatrix: name -> weights (already divided
    by the counts, as llama-quantize passes them)."""
    lib = _lib("libllama.so")
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_Params)]
    p = _Params(nthread=nthread, ftype=ftype,
                output_tensor_type=NO_TYPE if output_tensor_type is None else output_tensor_type,
                token_embedding_type=NO_TYPE if token_embedding_type is None else token_embedding_type,
                allow_requantize=allow_requantize, quantize_output_tensor=not leave_output_tensor,
                pure=pure, max_buf_size=0)
    keep = []
    if imatrix:
        arr = (_ImatrixData * (len(imatrix) + 1))()
        for i, (name, values) in enumerate(imatrix.items()):
            v = np.ascontiguousarray(values, dtype=np.float32)
            keep.append(v)
            arr[i].name = name.encode()
            arr[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = v.size
        arr[len(imatrix)].name = None
        p.imatrix = ctypes.cast(arr, ctypes.c_void_p)
        keep.append(arr)
    rc = lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc})")
