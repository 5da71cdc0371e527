"""Quantize a whole GGUF model file, as llama-quantize does.

    report = quantize_file("model-f16.gguf", "model-q4_k_m.gguf", "Q4_K_M", imatrix="imatrix.gguf")

The recipe (which tensor gets which type) is oxillama.quant.recipes; the blocks come from the C
quantizers, which reproduce ggml's bit for bit (with an importance matrix: ggml's weighted
quantizers). Tensor by tensor, in chunks of whole rows spread over n_threads (the C code releases
the GIL); at most two chunks per thread are in flight, so memory stays bounded whatever the model
size. The output is written under a temporary name and renamed at the end: an error, Ctrl-C or a
full disk leaves no partial file behind.
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import GGUFError, OxillamaError, QuantError
from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter
from oxillama.quant import recipes
from oxillama.quant.types import GGMLType, type_info

log = logging.getLogger("oxillama")

GGML_QNT_VERSION = 2
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
_CHUNK_VALUES = 1 << 18        # values per work item (whole rows; at least one row)
_COPY_BYTES = 16 << 20         # bytes per slab when a tensor is copied unchanged
_FLOAT_TYPES = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)


@dataclass
class TensorReport:
    name: str
    shape: tuple[int, ...]      # ggml order (ne0 first)
    src_type: str
    dst_type: str
    src_bytes: int
    dst_bytes: int
    used_imatrix: bool


@dataclass
class QuantizeReport:
    path: str
    file_type: str
    tensors: list[TensorReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def src_bytes(self) -> int:
        return sum(t.src_bytes for t in self.tensors)

    @property
    def dst_bytes(self) -> int:
        return sum(t.dst_bytes for t in self.tensors)

    def type_table(self) -> dict[str, str]:
        return {t.name: t.dst_type for t in self.tensors}


def _check_quantizable(qtype: GGMLType, with_imatrix: bool) -> None:
    from oxillama import _core
    if not _core.can_quantize(int(qtype), with_imatrix):
        raise QuantError(f"oxillama cannot quantize to {qtype.name} yet")


def _check_dequantizable(qtype: GGMLType, name: str) -> None:
    from oxillama import _core
    if not _core.can_dequantize(int(qtype)):
        raise QuantError(f"{name}: oxillama cannot read tensors of type {qtype.name}")


def quantize_file(src: str | os.PathLike, dst: str | os.PathLike, file_type: str | int, *,
                  imatrix: str | os.PathLike | dict | None = None, pure: bool = False,
                  output_tensor_type: str | None = None, token_embedding_type: str | None = None,
                  leave_output_tensor: bool = False, allow_requantize: bool = False,
                  tensor_types: list[tuple[str, str]] = (), n_threads: int | None = None,
                  force: bool = False, progress=None) -> QuantizeReport:
    """Quantize the GGUF model at src into dst with llama.cpp's file type and recipe.

    imatrix: an importance matrix (the path of llama.cpp's imatrix GGUF, or name -> values);
    pure: every quantizable tensor gets the file type's base type; output_tensor_type /
    token_embedding_type: fixed types for output.weight / token_embd.weight; leave_output_tensor:
    keep output.weight as it is; allow_requantize: accept already quantized inputs (they are
    dequantized first, losing precision twice); tensor_types: (regex, type) overrides, first match
    wins; progress(line): called once per tensor with a llama-quantize-like line.
    """
    t0 = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    ft = recipes.file_type(file_type)
    if os.path.exists(dst) and not force:
        raise OxillamaError(f"{dst} exists (use --force to overwrite it)")
    if os.path.isdir(dst):
        raise OxillamaError(f"{dst} is a directory")
    from oxillama._system import resolve_threads
    n_threads = resolve_threads(n_threads)

    from oxillama.quant.imatrix import load_imatrix
    imx = None
    imx_meta = {}
    if imatrix is not None:
        if isinstance(imatrix, dict):
            imx = {k: np.ascontiguousarray(v, dtype=np.float32).reshape(-1) for k, v in imatrix.items()}
        else:
            loaded = load_imatrix(imatrix)
            imx = loaded.values()
            imx_meta = {"quantize.imatrix.file": os.fspath(imatrix)}
            if loaded.datasets:
                imx_meta["quantize.imatrix.dataset"] = loaded.datasets[0]
            imx_meta["quantize.imatrix.entries_count"] = len(imx)
            imx_meta["quantize.imatrix.chunks_count"] = loaded.chunk_count

    opts = recipes.Options(
        pure=pure, quantize_output=not leave_output_tensor, has_imatrix=imx is not None,
        output_tensor_type=type_info(output_tensor_type).qtype if output_tensor_type else None,
        token_embedding_type=type_info(token_embedding_type).qtype if token_embedding_type else None,
        tensor_types=[(p, type_info(t).qtype) for p, t in tensor_types])

    with GGUFFile(src) as f:
        facts = recipes.ModelFacts.from_metadata(f.metadata)
        plans = recipes.plan_types(((t.name, t.ggml_shape, t.qtype_id) for t in f.tensors.values()), ft, facts, opts)

        # every check before the first byte is written
        weights = {}
        for p in plans:
            if p.dst_type == p.src_type:
                continue
            t = f.tensors[p.name]
            block = type_info(p.dst_type).block_size
            if t.ggml_shape[0] % block:   # a type asked for by name (the recipe's own fall back)
                raise QuantError(f"{p.name}: rows of {t.ggml_shape[0]} values do not fit {p.dst_type.name} "
                                 f"blocks of {block}")
            if p.src_type not in _FLOAT_TYPES and not allow_requantize:
                raise QuantError(f"{p.name} is already quantized ({p.src_type.name}); requantizing loses "
                                 f"precision twice (use --allow-requantize to do it anyway)")
            _check_dequantizable(p.src_type, p.name)
            w = imx.get(p.name) if imx is not None else None
            if w is not None:
                ne0 = t.ggml_shape[0]
                ne2 = t.ggml_shape[2] if len(t.ggml_shape) > 2 else 1
                if w.size != ne0 * ne2:
                    if recipes.category(p.name) != "token_embd":
                        raise QuantError(f"the importance matrix is for another model: {p.name} has {ne0 * ne2} "
                                         f"columns, the imatrix entry has {w.size} values")
                    w = None
                elif not np.all(np.isfinite(w)):
                    raise QuantError(f"the importance matrix has non-finite values for {p.name}")
            if w is None and p.requires_imatrix:
                raise QuantError(f"{p.name}: {p.dst_type.name} in a {ft.name} file needs an importance "
                                 f"matrix (--imatrix)")
            _check_quantizable(p.dst_type, w is not None and p.dst_type not in _FLOAT_TYPES)
            if w is not None:
                weights[p.name] = w
        if imx is not None and not weights and any(p.dst_type != p.src_type for p in plans):
            raise QuantError("the importance matrix has no entry for any tensor of this model "
                             "(is it for another model?)")

        writer = GGUFWriter(dst)
        for key in f.metadata:
            if key in _SPLIT_KEYS or key in ("general.quantization_version", "general.file_type"):
                continue
            vtype, etype = f.metadata_types[key]
            writer.add_metadata(key, f.metadata[key], (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
        writer.add_metadata("general.quantization_version", GGML_QNT_VERSION, GGUFValueType.UINT32)
        writer.add_metadata("general.file_type", ft.ftype, GGUFValueType.UINT32)
        for key, value in imx_meta.items():
            writer.add_metadata(key, value, GGUFValueType.STRING if isinstance(value, str) else GGUFValueType.UINT32)
        for p in plans:
            t = f.tensors[p.name]
            writer.add_tensor_info(p.name, t.shape, int(p.dst_type))

        report = QuantizeReport(dst, ft.name)
        by_name = {p.name: p for p in plans}
        with ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="oxillama-quantize") as pool:
            def stream(name):
                p, t = by_name[name], f.tensors[name]
                i = len(report.tensors) + 1
                w = weights.get(name)
                size = 0
                t1 = time.perf_counter()
                for part in _tensor_bytes(pool, n_threads, t, p.dst_type, w):
                    size += len(part)
                    yield part
                report.tensors.append(TensorReport(name, t.ggml_shape, p.src_type.name, p.dst_type.name,
                                                   t.nbytes, size, w is not None))
                if progress is not None:
                    shape = ", ".join(f"{d:5d}" for d in (list(t.ggml_shape) + [1] * 4)[:4])
                    what = (f"converting to {p.dst_type.name.lower()} .. size = {t.nbytes / 2**20:8.2f} MiB -> "
                            f"{size / 2**20:8.2f} MiB" if p.dst_type != p.src_type else
                            f"size = {t.nbytes / 2**20:8.3f} MiB")
                    progress(f"[{i:4d}/{len(plans):4d}] {name:<36s} - [{shape}], type = {p.src_type.name.lower():>6s}, "
                             f"{what} ({time.perf_counter() - t1:.2f} s)")
            try:
                writer.write(stream=stream)
            except OSError as e:
                raise OxillamaError(f"cannot write {dst}: {e.strerror or e}") from e
    report.seconds = time.perf_counter() - t0
    log.info("quantized %s -> %s (%s): %.2f MiB -> %.2f MiB in %.1f s", src, dst, ft.name,
             report.src_bytes / 2**20, report.dst_bytes / 2**20, report.seconds)
    return report


def _tensor_bytes(pool, n_threads: int, t, dst: GGMLType, weights: np.ndarray | None):
    """The bytes of tensor t converted to dst, in order, computed on the pool."""
    raw = t.data
    if dst == t.type_info.qtype:
        for start in range(0, raw.nbytes, _COPY_BYTES):
            yield memoryview(raw[start:start + _COPY_BYTES])
        return
    ne0 = t.ggml_shape[0]
    rows_per_mat = t.ggml_shape[1] if len(t.ggml_shape) > 1 else 1
    n_rows = t.n_elements // ne0
    src_row = t.type_info.row_bytes(ne0)
    chunk_rows = max(1, min(_CHUNK_VALUES // ne0, -(-rows_per_mat // n_threads)))
    work = []
    for r0 in range(0, n_rows, rows_per_mat):    # chunks never cross a matrix (an expert) of a 3-D tensor
        m_end = min(n_rows, r0 + rows_per_mat)
        w = None if weights is None else weights[(r0 // rows_per_mat) * ne0:(r0 // rows_per_mat + 1) * ne0]
        for a in range(r0, m_end, chunk_rows):
            work.append((a, min(m_end, a + chunk_rows), w))
    src_type, dst_id = int(t.type_info.qtype), int(dst)

    def job(a, b, w):
        from oxillama import _core
        x = _core.dequantize(raw[a * src_row:b * src_row], src_type, (b - a) * ne0, None)
        x = np.frombuffer(x, dtype=np.float32)
        return _core.quantize_rows(x, dst_id, b - a, ne0, w)

    pending = deque()
    it = iter(work)
    for a, b, w in it:
        pending.append(pool.submit(job, a, b, w))
        if len(pending) >= 2 * n_threads:
            break
    while pending:
        out = pending.popleft().result()
        nxt = next(it, None)
        if nxt is not None:
            pending.append(pool.submit(job, *nxt))
        yield out
