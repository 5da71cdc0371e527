"""Importance matrices in llama.cpp's imatrix GGUF format.

For every weight matrix W that multiplies activations x, the file holds the sum over the tokens
seen of x_j^2 per input column j ("<name>.in_sum2", F32 of ggml shape [n_cols, n_mat]) and how
many activation rows were summed ("<name>.counts", F32 [1, n_mat]; n_mat > 1 for the experts of a
3-D tensor). A quantizer weighs the error of column j by in_sum2 / count, so the columns that
meet large activations keep more precision. Keys: general.type = "imatrix", imatrix.datasets
(list of file names), imatrix.chunk_count, imatrix.chunk_size.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import GGUFError, QuantError
from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter

_SUMS, _COUNTS = ".in_sum2", ".counts"


@dataclass
class ImportanceMatrix:
    sums: dict[str, np.ndarray] = field(default_factory=dict)     # name -> (n_mat, n_cols) float64 sums of x^2
    counts: dict[str, np.ndarray] = field(default_factory=dict)   # name -> (n_mat,) int64 rows summed
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0

    def add(self, name: str, x: np.ndarray, mat: int = 0, n_mat: int = 1) -> None:
        """Accumulate activation rows x (n_rows, n_cols) that met matrix `mat` of tensor name."""
        x = np.asarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        s = self.sums.get(name)
        if s is None:
            s = self.sums[name] = np.zeros((n_mat, x.shape[1]), dtype=np.float64)
            self.counts[name] = np.zeros(n_mat, dtype=np.int64)
        elif s.shape != (n_mat, x.shape[1]):
            raise QuantError(f"imatrix entry {name}: activations of {x.shape[1]} columns, had {s.shape[1]}")
        sq = np.einsum("ij,ij->j", x, x, dtype=np.float64)
        if not np.all(np.isfinite(sq)):
            raise QuantError(f"non-finite activations met {name}")
        s[mat] += sq
        self.counts[name][mat] += x.shape[0]

    def values(self) -> dict[str, np.ndarray]:
        """name -> float32 weights (in_sum2 / count per matrix; 1 where nothing was seen), as
        llama-quantize hands them to the quantizers."""
        out = {}
        for name, s in self.sums.items():
            s32 = s.astype(np.float32)
            c = self.counts[name].astype(np.float32)
            v = np.ones_like(s32)
            seen = c > 0
            v[seen] = s32[seen] / c[seen, None]
            out[name] = v.reshape(-1)
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write llama.cpp's imatrix GGUF (atomically), entries sorted by name as llama-imatrix does."""
        w = GGUFWriter(path)
        w.add_metadata("general.type", "imatrix")
        w.add_metadata("imatrix.datasets", list(self.datasets), (GGUFValueType.ARRAY, GGUFValueType.STRING))
        w.add_metadata("imatrix.chunk_count", int(self.chunk_count), GGUFValueType.UINT32)
        w.add_metadata("imatrix.chunk_size", int(self.chunk_size), GGUFValueType.UINT32)
        for name in sorted(self.sums):
            s = self.sums[name]
            w.add_tensor(name + _SUMS, s.astype(np.float32))
            w.add_tensor(name + _COUNTS, self.counts[name].astype(np.float32).reshape(-1, 1))
        w.write()


def load_imatrix(path: str | os.PathLike) -> ImportanceMatrix:
    """Read an imatrix GGUF written by llama-imatrix (or by ImportanceMatrix.save)."""
    path = os.fspath(path)
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        raise QuantError(f"{path} is not an imatrix GGUF file ({e}); the old .dat format is not read, "
                         f"convert it with llama-imatrix --in-file {path} -o imatrix.gguf") from None
    with f:
        if f.metadata.get("general.type") not in ("imatrix", None) or not any(n.endswith(_SUMS) for n in f.tensors):
            raise QuantError(f"{path} is a GGUF file but not an importance matrix (no *.in_sum2 tensors)")
        if "imatrix.chunk_count" not in f.metadata or "imatrix.datasets" not in f.metadata:
            raise QuantError(f"{path}: missing imatrix metadata (imatrix.chunk_count, imatrix.datasets)")
        imx = ImportanceMatrix(datasets=list(f.metadata.get("imatrix.datasets", [])),
                               chunk_count=int(f.metadata.get("imatrix.chunk_count", 0)),
                               chunk_size=int(f.metadata.get("imatrix.chunk_size", 0)))
        for tname, t in f.tensors.items():
            if not tname.endswith(_SUMS):
                continue
            name = tname[:-len(_SUMS)]
            c = f.tensors.get(name + _COUNTS)
            if c is None:
                raise QuantError(f"{path}: {tname} has no {name + _COUNTS}")
            if t.qtype != "F32" or c.qtype != "F32":
                raise QuantError(f"{path}: sums and counts of {name} must be F32")
            counts = c.numpy().reshape(-1)
            sums = t.numpy().reshape(len(counts), -1)
            # llama.cpp reads counts with lround
            imx.sums[name] = sums.astype(np.float64)
            imx.counts[name] = np.array([math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5) for v in counts],
                                        dtype=np.int64)
        return imx
