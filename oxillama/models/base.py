"""What every architecture shares: hyper-parameters from GGUF metadata, weight lookup, and the
transformer block description that the C forward pass (csrc/forward.c) runs.

A family module subclasses `Architecture` and states only what differs (its norm, activation,
RoPE layout, per-layer attention window, extra scales). `build()` turns the GGUF file into a plan
spec: a dict of hyper-parameters, weights as (bytes, type id, rows, cols) and float32 vectors.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
import math
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import ModelError
from oxillama.gguf import GGUFFile, TensorInfo

log = logging.getLogger("oxillama.models")

INT32_MAX = 2**31 - 1
MAX_LAYERS = 4096           # the largest models have ~130
MAX_HEAD_DIM = 4096         # real models: 64..256


@dataclass(frozen=True)
class RopeScaling:
    kind: str = "none"            # none | linear | yarn
    factor: float = 1.0
    n_ctx_orig: int = 0           # the context the model was trained with before scaling
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    ext_factor: float | None = None


@dataclass(frozen=True)
class Experts:
    """A sparse mixture-of-experts FFN: `n_expert` experts of FFN width `n_ff_exp`, `n_used` chosen per token by
    a router (`gating`: softmax over all then top-k | sigmoid then top-k | softmax_weight: top-k logits then
    softmax over them | sparsemixer: Phi-3.5-MoE's top-2 with `router_eps`), the chosen weights renormalised to
    sum 1 if `norm_topk`, times `scale`; optionally a
    shared expert of width `n_ff_shared` that every token runs, gated by a sigmoid where the family has one."""
    n_expert: int
    n_used: int
    n_ff_exp: int
    gating: str = "softmax"
    norm_topk: bool = False
    scale: float = 1.0
    n_ff_shared: int = 0
    router_eps: float = 0.0


# llama.cpp's expert_gating_func values
GATING_FUNCS = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}
MAX_EXPERTS = 512   # the C forward's OXL_MAX_EXPERTS


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    norm_eps: float
    rope_base: float
    n_rot: int
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    extra: dict = field(default_factory=dict)   # family-specific values
    experts: Experts | None = None              # None: a dense FFN

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def yarn_corr_dims(n_rot: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float,
                   truncate: bool = True) -> tuple[float, float]:
    """The rotation-pair range YaRN blends over, as ggml computes it (truncate: widened to whole pairs, as
    ggml always and transformers unless the config says `truncate: false`, as gpt-oss's does)."""
    def corr_dim(n_rotations: float) -> float:
        return n_rot * math.log(n_ctx_orig / (n_rotations * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    return float(max(0, lo)), float(min(n_rot - 1, hi))


class _ReadTensors(Mapping):
    """The file's tensors, remembering which ones the architecture read (get / []), so that a file with tensors
    the forward never runs is reported instead of silently giving other numbers than llama.cpp would."""

    def __init__(self, tensors: Mapping):
        self._tensors = tensors
        self.read: set[str] = set()

    def __getitem__(self, name):
        t = self._tensors[name]
        self.read.add(name)
        return t

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)

    def __contains__(self, name):
        return name in self._tensors

    def unread(self) -> list[str]:
        return sorted(n for n in self._tensors if n not in self.read)


class Architecture:
    """The llama-style decoder block; families override the class attributes and hooks below."""

    arch_names: tuple[str, ...] = ()
    norm_type = "rms"           # rms | layer
    act = "silu"                # silu | gelu_tanh | gelu_erf
    rope_mode = "norm"          # norm (adjacent pairs) | neox (halves)
    gated_ffn = True            # down(act(gate(x)) * up(x)); False: down(act(up(x)))
    parallel_residual = False
    norm_eps_key = "attention.layer_norm_rms_epsilon"
    qk_norm_full = False        # q/k norms over all heads at once (olmoe), not per head
    qk_norm_type = "rms"        # rms | layer (LayerNorm without bias, stablelm)
    pre_norms = True            # False: attention and FFN read x itself, normed only after (olmo2)
    # the router where the file does not say (expert_gating_func, expert_weights_norm): llama.cpp's per family
    expert_gating = "softmax"
    expert_norm_topk = False
    shared_expert_gate = False  # the shared expert's output times sigmoid(ffn_gate_inp_shexp . x) (qwen2moe)
    out_norm_name = "output_norm"   # the final norm's tensor (lfm2: token_embd_norm)
    embd_norm_name = "token_embd_norm"   # a norm of the embeddings where the file has one (bloom), or None (lfm2,
                                         # whose token_embd_norm is its final norm)
    attn_q_rows_per_head = 1        # attn_q's rows per head, in head_dim (qwen3next: 2, [q | gate])
    is_encoder = False          # bidirectional, embeddings only (bert): no logits, no generation
    ffn_norm_tensor = "ffn_norm"   # the FFN's input norm (gpt-oss names it post_attention_norm)
    router_eps = 0.0            # the sparsemixer router's jitter epsilon (phimoe)
    yarn_truncate = True        # YaRN's blend range widened to whole pairs (see yarn_corr_dims)

    def __init__(self, gguf: GGUFFile):
        self.gguf = gguf
        self.arch = gguf.architecture
        self.tensors = _ReadTensors(gguf.tensors)
        self.config = self.read_config()
        self.n_ctx = 0   # the context the model will run with (Model sets it before build()); 0: not known

    def long_rope(self, n_ctx: int) -> bool | None:
        """Whether a context of n_ctx positions runs LongRoPE's long factors (Phi-3.5 / Phi-4-mini files carry
        rope_factors_long and rope_factors_short): as llama.cpp, the long ones once the context exceeds the
        trained original context. None: the file has no such pair."""
        if "rope_factors_long.weight" not in self.tensors:
            return None
        return n_ctx > self.hp_int("rope.scaling.original_context_length", self.config.n_ctx_train, lo=1)

    # ---- metadata ----

    def hp(self, key: str, default=None, *, required: bool = False):
        """`<arch>.<key>` from the metadata."""
        full = f"{self.arch}.{key}"
        if full in self.gguf.metadata:
            value = self.gguf.metadata[full]
            if isinstance(value, np.ndarray):   # per-layer arrays: families that need them read them
                return value
            return value
        if required:
            raise ModelError(f"{self.arch} model is missing metadata key {full!r}")
        return default

    def hp_int(self, key: str, default=None, *, required: bool = False, lo: int = 0, hi: int = INT32_MAX) -> int:
        """An integer hyper-parameter within [lo, hi] (the C plan holds int32s), else ModelError."""
        value = self.hp(key, default, required=required)
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{self.arch}.{key} must be an integer, got {type(value).__name__} {_short(value)}")
        if not lo <= value <= hi:
            raise ModelError(f"{self.arch}.{key} = {value} is out of range [{lo}, {hi}]")
        return value

    def hp_float(self, key: str, default=None, *, required: bool = False, lo: float = -math.inf,
                 hi: float = math.inf, lo_open: bool = False) -> float:
        """A finite float hyper-parameter within [lo, hi] (or (lo, hi]), else ModelError."""
        value = self.hp(key, default, required=required)
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"{self.arch}.{key} must be a number, got {type(value).__name__} {_short(value)}")
        try:
            f = float(value)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f) or f < lo or f > hi or (lo_open and f == lo):
            raise ModelError(f"{self.arch}.{key} = {value} is out of range {'(' if lo_open else '['}{lo}, {hi}]")
        return f

    def read_config(self) -> ModelConfig:
        emb = self.tensor("token_embd.weight")
        if len(emb.shape) != 2 or min(emb.shape) < 1 or max(emb.shape) > INT32_MAX:
            raise ModelError(f"token_embd.weight has shape {emb.shape}; expected (n_vocab, n_embd), each in "
                             f"[1, {INT32_MAX}]")
        n_vocab, n_embd = (int(d) for d in emb.shape)
        n_head = self.hp_int("attention.head_count", required=True, lo=1, hi=n_embd)
        n_head_kv = self.hp_int("attention.head_count_kv", n_head, lo=1, hi=n_head)
        head_dim = self.hp_int("attention.key_length", n_embd // n_head, lo=1, hi=MAX_HEAD_DIM)
        eps_key = self.norm_eps_key if self.hp(self.norm_eps_key) is not None else "attention.layer_norm_epsilon"
        config = ModelConfig(
            arch=self.arch, n_vocab=n_vocab, n_embd=self.hp_int("embedding_length", n_embd, lo=1),
            n_layer=self.hp_int("block_count", required=True, lo=1, hi=MAX_LAYERS), n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, n_ff=self.hp_int("feed_forward_length", required=True, lo=1),
            n_ctx_train=self.hp_int("context_length", 2048, lo=1),
            norm_eps=self.hp_float(eps_key, 1e-5, lo=0.0, hi=1.0),
            rope_base=self.hp_float("rope.freq_base", 10000.0, lo=0.0, lo_open=True),
            n_rot=self.hp_int("rope.dimension_count", head_dim, lo=0, hi=head_dim),
            rope_scaling=self.read_rope_scaling(), extra=self.read_extra(), experts=self.read_experts())
        self.validate(config)
        return config

    def read_experts(self) -> Experts | None:
        """The mixture-of-experts hyper-parameters, checked against the first block's tensors (before any weight
        is read); None for a dense model."""
        n_expert = self.hp_int("expert_count", 0, lo=0, hi=MAX_EXPERTS)
        b = f"blk.{self.first_moe_block()}."
        has_tensors = self.has(b + "ffn_gate_inp.weight") or self.has(b + "ffn_up_exps.weight")
        if n_expert == 0:
            if has_tensors:
                raise ModelError(f"{self.arch} model has expert tensors ({b}ffn_gate_inp / ffn_up_exps) but "
                                 f"{self.arch}.expert_count is missing or 0")
            return None
        if n_expert < 1:
            raise ModelError(f"{self.arch}.expert_count = {n_expert} must be >= 1")
        n_used = self.hp_int("expert_used_count", required=True, lo=0, hi=INT32_MAX)
        if not 1 <= n_used <= n_expert:
            raise ModelError(f"{self.arch}.expert_used_count = {n_used} must be in [1, expert_count {n_expert}]")
        gating_id = self.hp("expert_gating_func")
        if gating_id is None:
            gating = self.expert_gating
        else:
            gating_id = self.hp_int("expert_gating_func")
            if gating_id not in GATING_FUNCS:
                raise ModelError(f"{self.arch}.expert_gating_func = {gating_id} is not a gating function this "
                                 f"code knows ({', '.join(f'{k}: {v}' for k, v in GATING_FUNCS.items())})")
            gating = GATING_FUNCS[gating_id]
        norm = self.hp("expert_weights_norm", self.expert_norm_topk)
        if not isinstance(norm, (bool, np.bool_)):
            raise ModelError(f"{self.arch}.expert_weights_norm must be a bool, got {_short(norm)}")
        scale = self.hp_float("expert_weights_scale", 1.0, lo=0.0, lo_open=True)
        n_embd = self.tensor("token_embd.weight").shape[1]
        router = self.tensor(b + "ffn_gate_inp.weight")
        if router.shape != (n_expert, n_embd):
            raise ModelError(f"{b}ffn_gate_inp.weight (the router) has shape {router.shape}; "
                             f"{self.arch}.expert_count {n_expert} and n_embd {n_embd} give ({n_expert}, {n_embd})")
        up = self.tensor(b + "ffn_up_exps.weight")
        if len(up.shape) != 3 or up.shape[0] != n_expert or up.shape[2] != n_embd:
            raise ModelError(f"{b}ffn_up_exps.weight has shape {up.shape}; {self.arch}.expert_count {n_expert} "
                             f"gives ({n_expert}, n_ff_exp, {n_embd})")
        n_ff_exp = self.hp_int("expert_feed_forward_length", up.shape[1], lo=1)
        if up.shape[1] != n_ff_exp:
            raise ModelError(f"{b}ffn_up_exps.weight has {up.shape[1]} rows per expert but "
                             f"{self.arch}.expert_feed_forward_length is {n_ff_exp}")
        n_ff_shared = 0
        if self.has(b + "ffn_up_shexp.weight"):
            n_ff_shared = self.hp_int("expert_shared_feed_forward_length",
                                      self.tensor(b + "ffn_up_shexp.weight").shape[0], lo=1)
        if gating == "sparsemixer" and n_used != 2:
            raise ModelError(f"{self.arch}.expert_used_count = {n_used}: the sparsemixer router picks 2 experts")
        return Experts(n_expert=n_expert, n_used=n_used, n_ff_exp=n_ff_exp, gating=gating, norm_topk=bool(norm),
                       scale=scale, n_ff_shared=n_ff_shared, router_eps=self.router_eps)

    def first_moe_block(self) -> int:
        """The first block with experts, whose tensors the expert keys are checked against (lfm2moe: after its
        leading dense blocks)."""
        return 0

    def validate(self, c: ModelConfig) -> None:
        """What the hyper-parameters must satisfy together, and with the tensors' shapes, before a
        plan is built (one place: the C plan then sees only consistent values)."""
        if c.n_embd != self.tensor("token_embd.weight").shape[1]:
            raise ModelError(f"{self.arch}.embedding_length = {c.n_embd} but token_embd.weight has "
                             f"{self.tensor('token_embd.weight').shape[1]} columns")
        if c.n_head % c.n_head_kv:
            raise ModelError(f"attention.head_count {c.n_head} is not a multiple of attention.head_count_kv "
                             f"{c.n_head_kv}")
        if c.n_rot % 2 or (c.n_rot == 0 and self.rope_mode != "none"):
            raise ModelError(f"{self.arch}.rope.dimension_count = {c.n_rot} must be even, in [2, head_dim "
                             f"{c.head_dim}]")
        if c.q_dim > INT32_MAX or c.n_ff * 2 > INT32_MAX:
            raise ModelError(f"n_head * head_dim = {c.q_dim} or 2 * n_ff = {2 * c.n_ff} overflows int32")
        sc = c.rope_scaling
        if sc.kind == "yarn" and c.rope_base <= 1.0:
            raise ModelError(f"YaRN needs rope.freq_base > 1, got {c.rope_base}")
        # the first block's matrices against the hyper-parameters (the plan checks every block)
        expect = {"attn_q.weight": c.q_dim * self.attn_q_rows_per_head, "attn_k.weight": c.kv_dim,
                  "attn_v.weight": c.kv_dim,
                  "ffn_down.weight": c.n_embd}
        for name, rows in expect.items():
            t = self.tensors.get(f"blk.0.{name}")
            if t is not None and (len(t.shape) != 2 or t.shape[0] != rows):
                raise ModelError(f"blk.0.{name} has shape {t.shape}, but the hyper-parameters give {rows} rows "
                                 f"(n_head {c.n_head}, n_head_kv {c.n_head_kv}, head_dim {c.head_dim}, "
                                 f"n_embd {c.n_embd})")
        t = self.tensors.get("blk.0.ffn_down.weight")
        if t is not None and len(t.shape) == 2 and t.shape[1] != c.n_ff:
            raise ModelError(f"blk.0.ffn_down.weight has {t.shape[1]} columns but feed_forward_length is {c.n_ff}")

    def read_rope_scaling(self) -> RopeScaling:
        kind = self.hp("rope.scaling.type", "none")
        if kind is not None and not isinstance(kind, str):
            raise ModelError(f"{self.arch}.rope.scaling.type must be a string, got {_short(kind)}")
        factor = self.hp_float("rope.scaling.factor", 0.0, lo=0.0)
        linear = self.hp_float("rope.scale_linear", 0.0, lo=0.0)          # older files
        if kind == "none" and linear:
            kind, factor = "linear", linear
        if kind in ("none", None) or factor in (0.0, 1.0) and kind != "yarn":
            return RopeScaling()
        if kind not in ("linear", "yarn"):
            raise ModelError(f"RoPE scaling type {kind!r} is not supported (supported: linear, yarn)")
        ext = self.hp("rope.scaling.yarn_ext_factor")
        return RopeScaling(
            kind=kind, factor=factor or 1.0,
            n_ctx_orig=self.hp_int("rope.scaling.original_context_length", self.hp_int("context_length", 2048, lo=1),
                                   lo=1),
            attn_factor=self.hp_float("rope.scaling.attn_factor", 1.0) or 1.0,
            beta_fast=self.hp_float("rope.scaling.yarn_beta_fast", 32.0, lo=0.0, lo_open=True),
            beta_slow=self.hp_float("rope.scaling.yarn_beta_slow", 1.0, lo=0.0, lo_open=True),
            ext_factor=None if ext is None else self.hp_float("rope.scaling.yarn_ext_factor"))

    def read_extra(self) -> dict:
        return {}

    # ---- tensors ----

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"{self.arch} model is missing tensor {name!r}") from None

    def weight(self, name: str, *, optional: bool = False):
        """A 2-D matrix as (bytes, type id, rows, cols), rows = outputs; None if optional and absent."""
        if optional and name not in self.tensors:
            return None
        t = self.tensor(name)
        if len(t.shape) != 2:
            raise ModelError(f"tensor {name!r} should be 2-D, has shape {t.shape}")
        return (t.data, t.qtype_id, t.shape[0], t.shape[1])

    def experts_weight(self, name: str, n_expert: int):
        """A stacked (n_expert, rows, cols) expert tensor as one (bytes, type id, n_expert * rows, cols) matrix."""
        t = self.tensor(name)
        if len(t.shape) != 3 or t.shape[0] != n_expert:
            raise ModelError(f"tensor {name!r} should be (n_expert {n_expert}, rows, cols), has shape {t.shape}")
        return (t.data, t.qtype_id, t.shape[0] * t.shape[1], t.shape[2])

    def vector(self, name: str, *, optional: bool = True):
        """A 1-D float32 vector (norm weights, biases); None if optional and absent."""
        if optional and name not in self.tensors:
            return None
        t = self.tensor(name)
        v = np.ascontiguousarray(t.numpy(), dtype=np.float32).reshape(-1)
        return v

    # ---- the block description ----

    def attn_scale(self, il: int) -> float:
        return 1.0 / math.sqrt(self.config.head_dim)

    def sliding_window(self, il: int) -> int:
        return 0

    def rope(self, il: int) -> dict:
        c = self.config
        sc = c.rope_scaling
        spec = {"mode": self.rope_mode, "base": c.rope_base, "n_rot": c.n_rot,
                "freq_factors": self.vector("rope_freqs.weight")}
        long = self.long_rope(self.n_ctx)
        if long is not None and spec["freq_factors"] is None:
            # LongRoPE: per-pair frequency divisors for the context, and a magnitude on Q and K (the cos/sin
            # scaled, as transformers' attention_factor; the converter stores sqrt(1 + ln s / ln n_orig))
            for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
                if name not in self.tensors:
                    raise ModelError(f"{name!r} is missing: LongRoPE files carry both rope_factors_long and "
                                     f"rope_factors_short")
            # both read: both checked, neither reported unused
            factors = {k: self.vector(f"rope_factors_{k}.weight") for k in ("long", "short")}
            spec["freq_factors"] = factors["long" if long else "short"]
            spec["attn_factor"] = self.hp_float("rope.scaling.attn_factor", 1.0, lo=0.0, lo_open=True)
        if sc.kind == "linear":
            spec["freq_scale"] = 1.0 / sc.factor
        elif sc.kind == "yarn":
            spec["freq_scale"] = 1.0 / sc.factor
            spec["ext_factor"] = 1.0 if sc.ext_factor is None or sc.ext_factor < 0 else float(sc.ext_factor)
            spec["attn_factor"] = sc.attn_factor
            spec["corr_dims"] = yarn_corr_dims(c.n_rot, sc.n_ctx_orig, c.rope_base, sc.beta_fast, sc.beta_slow,
                                               self.yarn_truncate)
        return spec

    def qkv_biases(self, il: int) -> tuple:
        """(bq, bk, bv): separate, or the slices of a fused QKV's bias (attn_qkv.bias, [Q; K; V])."""
        c, p = self.config, f"blk.{il}."
        fused = self.vector(p + "attn_qkv.bias")
        if fused is None:
            return self.vector(p + "attn_q.bias"), self.vector(p + "attn_k.bias"), self.vector(p + "attn_v.bias")
        if fused.shape[0] != c.q_dim + 2 * c.kv_dim:
            raise ModelError(f"{p}attn_qkv.bias has {fused.shape[0]} values; expected q_dim + 2 kv_dim = "
                             f"{c.q_dim + 2 * c.kv_dim}")
        return fused[:c.q_dim].copy(), fused[c.q_dim:c.q_dim + c.kv_dim].copy(), fused[c.q_dim + c.kv_dim:].copy()

    def layer(self, il: int) -> dict:
        c = self.config
        p = f"blk.{il}."
        fused_qkv = self.has(p + "attn_qkv.weight")
        bq, bk, bv = self.qkv_biases(il)
        d = {
            "n_head": c.n_head, "n_head_kv": c.n_head_kv, "head_dim": c.head_dim, "n_ff": c.n_ff,
            "attn_norm": self.vector(p + "attn_norm.weight", optional=not self.pre_norms),
            "attn_norm_b": self.vector(p + "attn_norm.bias"),
            "wq": self.weight(p + ("attn_qkv.weight" if fused_qkv else "attn_q.weight")),
            "wk": None if fused_qkv else self.weight(p + "attn_k.weight"),
            "wv": None if fused_qkv else self.weight(p + "attn_v.weight"),
            "wo": self.weight(p + "attn_output.weight"),
            "bq": bq, "bk": bk, "bv": bv, "bo": self.vector(p + "attn_output.bias"),
            "q_norm": self.vector(p + "attn_q_norm.weight"), "k_norm": self.vector(p + "attn_k_norm.weight"),
            "post_attn_norm": (self.vector(p + "post_attention_norm.weight")
                               if self.ffn_norm_tensor != "post_attention_norm" else None),
            # parallel blocks: the FFN's own norm where the file has one (gptneox), else attention's (command-r)
            "ffn_norm": self.vector(p + f"{self.ffn_norm_tensor}.weight",
                                    optional=self.parallel_residual or not self.pre_norms),
            "ffn_norm_b": self.vector(p + "ffn_norm.bias"),
            "w_gate": (self.weight(p + "ffn_gate.weight", optional=True)
                       if self.gated_ffn and c.experts is None else None),
            "w_up": self.weight(p + "ffn_up.weight") if c.experts is None else None,
            "w_down": self.weight(p + "ffn_down.weight") if c.experts is None else None,
            "qk_norm_full": self.qk_norm_full, "qk_norm_type": self.qk_norm_type,
            "b_up": self.vector(p + "ffn_up.bias"), "b_gate": self.vector(p + "ffn_gate.bias"),
            "b_down": self.vector(p + "ffn_down.bias"),
            "post_ffn_norm": self.vector(p + "post_ffw_norm.weight"),
            "act": self.act, "parallel_residual": self.parallel_residual,
            "attn_scale": self.attn_scale(il), "sliding_window": self.sliding_window(il),
            "attn_sinks": self.vector(p + "attn_sinks.weight"),
            "rope": self.rope(il),
        }
        if c.experts is not None:
            d.update(self.moe_ffn(il))
        elif self.gated_ffn and d["w_gate"] is None:
            # gate and up fused in one matrix of 2 n_ff rows: [gate; up] (phi3)
            if d["w_up"][2] != 2 * c.n_ff:
                raise ModelError(f"{p}ffn_gate.weight is missing and ffn_up is not a fused gate|up matrix")
            d["fused_gate_up"] = True
        return d

    def moe_ffn(self, il: int) -> dict:
        """The FFN of a mixture-of-experts block: the router, the stacked experts and the shared expert if any
        (as the dense w_gate / w_up / w_down, which the C forward runs beside the experts)."""
        e = self.config.experts
        p = f"blk.{il}."
        d = {"n_expert": e.n_expert, "n_expert_used": e.n_used, "n_ff_exp": e.n_ff_exp, "gating": e.gating,
             "norm_topk": e.norm_topk, "expert_scale": e.scale, "router_eps": e.router_eps,
             "router": self.weight(p + "ffn_gate_inp.weight"),
             "exp_gate": self.experts_weight(p + "ffn_gate_exps.weight", e.n_expert),
             "exp_up": self.experts_weight(p + "ffn_up_exps.weight", e.n_expert),
             "exp_down": self.experts_weight(p + "ffn_down_exps.weight", e.n_expert),
             # biases where the family has them (gpt-oss): the router's (n_expert), each expert's (n_expert, rows)
             "router_b": self.vector(p + "ffn_gate_inp.bias"), "exp_gate_b": self.vector(p + "ffn_gate_exps.bias"),
             "exp_up_b": self.vector(p + "ffn_up_exps.bias"), "exp_down_b": self.vector(p + "ffn_down_exps.bias")}
        if d["router"][2:] != (e.n_expert, self.config.n_embd):
            raise ModelError(f"{p}ffn_gate_inp.weight has shape {d['router'][2:]}; expected "
                             f"(expert_count {e.n_expert}, n_embd {self.config.n_embd})")
        if e.n_ff_shared:
            d.update({"n_ff": e.n_ff_shared, "w_gate": self.weight(p + "ffn_gate_shexp.weight"),
                      "w_up": self.weight(p + "ffn_up_shexp.weight"),
                      "w_down": self.weight(p + "ffn_down_shexp.weight"),
                      "shexp_gate": self.vector(p + "ffn_gate_inp_shexp.weight") if self.shared_expert_gate else None})
        return d

    def build(self) -> dict:
        c = self.config
        emb = self.weight("token_embd.weight")
        output = self.weight("output.weight", optional=True) or emb
        pos = self.weight("position_embd.weight", optional=True)
        if pos is not None and pos[2] < c.n_ctx_train:
            raise ModelError(f"position_embd.weight has {pos[2]} rows, fewer than {self.arch}.context_length "
                             f"{c.n_ctx_train}")
        return {
            "pos_embd": pos,
            "embd_norm": self.vector(f"{self.embd_norm_name}.weight") if self.embd_norm_name else None,
            "embd_norm_b": self.vector(f"{self.embd_norm_name}.bias") if self.embd_norm_name else None,
            "arch": self.arch, "n_embd": c.n_embd, "n_vocab": c.n_vocab, "norm_type": self.norm_type,
            "norm_eps": c.norm_eps, "embd_scale": self.embd_scale(), "final_softcap": self.final_softcap(),
            "logit_scale": self.logit_scale(), "tok_embd": emb, "output": output,
            "out_norm": self.vector(f"{self.out_norm_name}.weight", optional=False),
            "out_norm_b": self.vector(f"{self.out_norm_name}.bias"), "output_b": self.vector("output.bias"),
            "layers": [self.layer(il) for il in range(self.run_layers())],
        }

    def run_layers(self) -> int:
        """How many of the file's blocks the forward runs (qwen3next: not its multi-token-prediction blocks)."""
        return self.config.n_layer

    def embd_scale(self) -> float:
        return 1.0

    def final_softcap(self) -> float:
        return 0.0

    def logit_scale(self) -> float:
        return 1.0
