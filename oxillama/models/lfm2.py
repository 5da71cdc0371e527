"""LFM2 (Liquid AI's LFM2 / LFM2.5 dense models): gated short-convolution layers with a few attention layers.

Every block is norm -> mixer -> residual -> norm -> SwiGLU FFN -> residual. The mixer is either
- a gated short convolution (layers/shortconv.h): [B; C; x] = in_proj(xn); y = out_proj(C * conv(B * x)),
  a causal depthwise convolution of width shortconv.l_cache whose last l_cache - 1 inputs are the layer's
  recurrent state; or
- grouped-query attention with per-head RMS-normed Q and K and NeoX RoPE.
The GGUF says which layer is which by `lfm2.attention.head_count_kv`, an array over the blocks: 0 marks a conv
layer (llama.cpp's lfm2: is_recurrent(il) = n_head_kv(il) == 0). The final norm is stored as token_embd_norm.
Where the file sets `lfm2.attention.sliding_window` > 0, every attention layer attends to the last that many
positions (itself included), as llama.cpp's lfm2 makes all its attention layers SWA then. Bidirectional files
(`lfm2.attention.causal` false: LFM2.5's embedding models) are refused: their convolution is centred, not causal;
so are files with LFM2-ColBERT's dense_2_out projection, which an embedding would have to go through.
"""
from __future__ import annotations

import numpy as np

from oxillama.errors import ModelError
from oxillama.models.base import Architecture

MAX_CONV_L = 64   # csrc/kernels.h OXL_CONV_MAX_L


class Lfm2(Architecture):
    arch_names = ("lfm2",)
    rope_mode = "neox"
    out_norm_name = "token_embd_norm"
    embd_norm_name = None

    def hp(self, key: str, default=None, *, required: bool = False):
        value = super().hp(key, default, required=required)
        if key == "attention.head_count_kv" and isinstance(value, np.ndarray):
            return self._attention_kv_heads(value)
        return value

    def _kv_heads_array(self) -> np.ndarray:
        """head_count_kv per block (a scalar in the file means every block is attention)."""
        key = f"{self.arch}.attention.head_count_kv"
        raw = self.gguf.metadata.get(key)
        n_layer = self.hp_int("block_count", required=True, lo=1)
        if raw is None:
            raise ModelError(f"{self.arch} model is missing metadata key {key!r} (0 per conv layer)")
        arr = np.asarray(raw)
        if arr.ndim == 0:
            arr = np.full(n_layer, arr)
        if arr.ndim != 1 or arr.shape[0] != n_layer or not np.issubdtype(arr.dtype, np.integer):
            raise ModelError(f"{key} must be {n_layer} integers (block_count), one per layer, got {arr!r:.80}")
        return arr.astype(np.int64)

    def _attention_kv_heads(self, arr: np.ndarray) -> int:
        """The one KV head count of the attention layers (the KV cache has one layout)."""
        key = f"{self.arch}.attention.head_count_kv"
        values = {int(v) for v in np.asarray(arr).reshape(-1) if v != 0}
        if any(v < 0 for v in values) or len(values) > 1:
            raise ModelError(f"{key} lists KV head counts {sorted(values)}; the attention layers must share one "
                             f"count >= 1 (0 marks a conv layer)")
        if not values:   # no attention layer: no KV heads are read; any valid count keeps the config whole
            return self.hp_int("attention.head_count", required=True, lo=1)
        return values.pop()

    def sliding_window(self, il: int) -> int:
        return self.hp_int("attention.sliding_window", 0, lo=0)

    def read_extra(self) -> dict:
        causal = self.hp("attention.causal", True)
        if not isinstance(causal, (bool, np.bool_)):
            raise ModelError(f"{self.arch}.attention.causal must be a bool, got {causal!r:.60}")
        if not causal:
            raise ModelError(f"{self.arch}.attention.causal is false: bidirectional LFM2 models (embedding models, "
                             f"whose short convolutions are centred) are not supported")
        if self.has("dense_2_out.weight"):   # LFM2-ColBERT: its embeddings go through this projection
            raise ModelError("dense_2_out.weight: LFM2 embedding models with an output projection (LFM2-ColBERT) are "
                             "not supported")
        kinds = ["shortconv" if v == 0 else "attention" for v in self._kv_heads_array()]
        extra = {"layer_kinds": tuple(kinds), "conv_L": 0}
        lkey = f"{self.arch}.shortconv.l_cache"
        for il, kind in enumerate(kinds):
            p = f"blk.{il}."
            has_conv, has_attn = self.has(p + "shortconv.conv.weight"), self.has(p + "attn_q.weight")
            if (kind == "shortconv") != has_conv or (kind == "attention") != has_attn:
                raise ModelError(f"{self.arch}.attention.head_count_kv marks layer {il} as {kind} "
                                 f"(head_count_kv {'0' if kind == 'shortconv' else '> 0'}), but the file has "
                                 f"{'shortconv' if has_conv else 'attention' if has_attn else 'no mixer'} tensors there")
        if "shortconv" in kinds:
            width = self.hp_int("shortconv.l_cache", required=True, lo=2, hi=MAX_CONV_L)
            first = kinds.index("shortconv")
            conv = self.tensor(f"blk.{first}.shortconv.conv.weight")
            n_embd = self.tensor("token_embd.weight").shape[1]
            if tuple(conv.shape) != (n_embd, width):
                raise ModelError(f"{lkey} = {width} but blk.{first}.shortconv.conv.weight has shape {conv.shape}; "
                                 f"expected (n_embd {n_embd}, l_cache {width})")
            extra["conv_L"] = width
        return extra

    def layer(self, il: int) -> dict:
        if self.config.extra["layer_kinds"][il] == "attention":
            return super().layer(il)
        c = self.config
        p = f"blk.{il}."
        width = c.extra["conv_L"]
        kernel = self.tensor(p + "shortconv.conv.weight")
        if tuple(kernel.shape) != (c.n_embd, width):
            raise ModelError(f"{p}shortconv.conv.weight has shape {kernel.shape}; {self.arch}.shortconv.l_cache "
                             f"{width} and n_embd {c.n_embd} give ({c.n_embd}, {width})")
        return {
            "kind": "shortconv", "act": self.act,
            "attn_norm": self.vector(p + "attn_norm.weight", optional=False),
            "conv_in": self.weight(p + "shortconv.in_proj.weight"),
            "conv_out": self.weight(p + "shortconv.out_proj.weight"),
            "conv_kernel": self.vector(p + "shortconv.conv.weight", optional=False), "conv_L": width,
            "ffn_norm": self.vector(p + "ffn_norm.weight", optional=False), **self.ffn(il),
        }

    def ffn(self, il: int) -> dict:
        """A conv block's FFN (an attention block's is Architecture.layer's): the dense SwiGLU."""
        p = f"blk.{il}."
        return {"n_ff": self.config.n_ff, "w_gate": self.weight(p + "ffn_gate.weight"),
                "w_up": self.weight(p + "ffn_up.weight"), "w_down": self.weight(p + "ffn_down.weight")}
