"""LoRA adapters: low-rank updates of a model's projections, applied in the C forward next to each product.

    adapter = LoraAdapter.from_gguf("style.gguf")      # llama.cpp's adapter format
    engine.add_lora(adapter, scale=1.0)                # stacks with others; engine.remove_lora / clear_loras
    engine.generate(prompt, lora=[(adapter, 0.5)])     # or for one call only

y = W x + sum over adapters of scale * alpha / r * B (A x): A x first (rank-r work), W never modified or
copied, so adapters are swapped between requests without reloading anything, and sequences with different
adapters (or none) share one batched step, each row with its own.

The GGUF adapter format (llama.cpp's): general.type = "adapter", adapter.type = "lora", adapter.lora.alpha,
and for each adapted base tensor `<base>.lora_a` (rank x n_in) and `<base>.lora_b` (n_out x rank), in F32,
F16, BF16 or Q8_0. `oxillama convert-lora` writes it from a Hugging Face PEFT directory (convert.py).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re

import numpy as np

from oxillama.errors import GGUFError, LoraError, OxillamaError

log = logging.getLogger("oxillama.lora")

__all__ = ["LoraAdapter", "slot_of"]

# base tensor -> the forward's projection slot (oxillama._core.LORA_SLOTS)
_SLOTS = {"attn_q": "q", "attn_qkv": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o", "ffn_gate": "gate",
          "ffn_up": "up", "ffn_down": "down"}
_BASE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.weight$")


def slot_of(base_name: str) -> tuple[int, str]:
    """(layer, slot) of a base tensor name such as 'blk.3.attn_q.weight'."""
    m = _BASE.match(base_name)
    if not m or m.group(2) not in _SLOTS:
        raise LoraError(f"tensor {base_name!r} is not a projection LoRA can adapt (attention q/k/v/output, "
                        f"ffn gate/up/down of a layer)")
    return int(m.group(1)), _SLOTS[m.group(2)]


class LoraAdapter:
    """An adapter's matrices (float32) and alpha. tensors: base tensor name -> (A (rank, n_in), B (n_out, rank)).
    sha256 identifies its content (snapshots record it)."""

    def __init__(self, tensors: dict[str, tuple[np.ndarray, np.ndarray]], *, alpha: float | None = None,
                 arch: str | None = None, name: str = "lora"):
        if not tensors:
            raise LoraError(f"adapter {name!r} has no LoRA tensors")
        ranks = set()
        for base, (a, b) in tensors.items():
            slot_of(base)
            if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1] or a.shape[0] < 1:
                raise LoraError(f"{base}: lora_a {a.shape} and lora_b {b.shape} are not (r, n_in) and (n_out, r)")
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                raise LoraError(f"{base}: the adapter holds NaN or infinite values")
            ranks.add(a.shape[0])
        if len(ranks) != 1:
            raise LoraError(f"adapter {name!r} mixes ranks {sorted(ranks)}")
        self.rank = ranks.pop()
        self.alpha = float(self.rank if alpha is None or alpha == 0 else alpha)   # llama.cpp: 0 means rank
        if not np.isfinite(self.alpha):
            raise LoraError(f"adapter {name!r}: alpha {alpha!r} is not finite")
        self.tensors = {k: (np.ascontiguousarray(a, dtype=np.float32), np.ascontiguousarray(b, dtype=np.float32))
                        for k, (a, b) in tensors.items()}
        self.arch, self.name = arch, name
        h = hashlib.sha256(f"{self.alpha!r}".encode())
        for k in sorted(self.tensors):
            a, b = self.tensors[k]
            h.update(k.encode())
            h.update(a.tobytes())
            h.update(b.tobytes())
        self.sha256 = h.hexdigest()
        self._bound: tuple | None = None   # (plan, LoraWeights) of the last model it was bound to

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "LoraAdapter":
        """Load llama.cpp's GGUF adapter format; anything else raises LoraError."""
        from oxillama.gguf import GGUFFile
        try:
            f = GGUFFile(path)
        except (GGUFError, OSError) as e:
            raise LoraError(f"cannot read LoRA adapter {os.fspath(path)!r}: {e}") from e
        with f:
            md = f.metadata
            if md.get("general.type") != "adapter" or md.get("adapter.type") != "lora":
                raise LoraError(f"{os.fspath(path)!r} is not a LoRA adapter (general.type="
                                f"{md.get('general.type')!r}, adapter.type={md.get('adapter.type')!r})")
            alpha = md.get("adapter.lora.alpha")
            if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float))):
                raise LoraError(f"adapter.lora.alpha must be a number, got {alpha!r}")
            parts: dict[str, dict[str, np.ndarray]] = {}
            for tname, t in f.tensors.items():
                for suffix in (".lora_a", ".lora_b"):
                    if tname.endswith(suffix):
                        if len(t.shape) != 2:
                            raise LoraError(f"{tname}: expected a matrix, got shape {t.shape}")
                        try:
                            arr = np.array(t.numpy(), dtype=np.float32)
                        except OxillamaError as e:
                            raise LoraError(f"{tname}: cannot read its {t.qtype} data: {e}") from e
                        parts.setdefault(tname[:-len(suffix)], {})[suffix] = arr
                        break
                else:
                    raise LoraError(f"{os.fspath(path)!r}: tensor {tname!r} is neither .lora_a nor .lora_b")
            tensors = {}
            for base, p in parts.items():
                if set(p) != {".lora_a", ".lora_b"}:
                    raise LoraError(f"{base}: has {' and '.join(sorted(p))} but not its pair")
                tensors[base] = (p[".lora_a"], p[".lora_b"])
            return cls(tensors, alpha=alpha, arch=f.architecture, name=os.path.basename(os.fspath(path)))

    def scale_for(self, scale: float) -> float:
        """The factor applied to B (A x): the user's scale * alpha / rank."""
        return float(scale) * self.alpha / self.rank

    def bind(self, engine):
        """The adapter's LoraWeights for the engine's model, checked against it (cached per model)."""
        from oxillama import _core
        plan = engine.plan
        if self._bound is not None and self._bound[0] is plan:
            return self._bound[1]
        arch = engine.config.arch
        if self.arch is not None and self.arch != arch:
            raise LoraError(f"adapter {self.name!r} is for a {self.arch!r} model, this one is {arch!r}")
        weights = {}
        # rows the architecture put in another order than the file's (Bamba's Q and K): B's rows follow them
        row_orders = getattr(getattr(getattr(engine, "model", None), "arch", None), "row_orders", {})
        for base, (a, b) in self.tensors.items():
            if base not in engine.gguf.tensors:
                raise LoraError(f"adapter {self.name!r} adapts {base!r}, which the model does not have")
            if base in row_orders:
                b = np.ascontiguousarray(b[row_orders[base]])
            weights[slot_of(base)] = (a, b)
        lw = _core.LoraWeights(plan, weights)
        self._bound = (plan, lw)
        return lw

    def __repr__(self):
        return f"LoraAdapter({self.name!r}, rank={self.rank}, alpha={self.alpha}, tensors={len(self.tensors)})"


def check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not np.isfinite(scale):
        raise LoraError(f"a LoRA scale must be a finite number, got {scale!r}")
    return float(scale)


def check_loras(loras) -> list[tuple[LoraAdapter, float]]:
    """[(adapter, scale), ...] from a list of adapters or (adapter, scale) pairs."""
    if loras is None:
        return []
    if isinstance(loras, LoraAdapter):
        loras = [loras]
    if not isinstance(loras, (list, tuple)):
        raise LoraError(f"lora must be a list of (LoraAdapter, scale) pairs, got {type(loras).__name__}")
    out = []
    for item in loras:
        if isinstance(item, LoraAdapter):
            out.append((item, 1.0))
        elif isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], LoraAdapter):
            out.append((item[0], check_scale(item[1])))
        else:
            raise LoraError(f"lora entries must be LoraAdapter or (LoraAdapter, scale), got {item!r}")
    return out


def bound(engine, loras: list[tuple[LoraAdapter, float]]) -> list | None:
    """The forward's (LoraWeights, scale) list for these adapters on the engine's model (None: no adapters)."""
    out = [(a.bind(engine), a.scale_for(s)) for a, s in loras if s != 0.0]
    return out or None
