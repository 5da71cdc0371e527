"""llama.cpp's file types and recipes: which tensor of a model gets which quant type.

A file type (LLAMA_FTYPE_*, named as llama-quantize names them: "Q4_K_M", "IQ4_XS", ...) has a
default tensor type and a recipe that moves some tensors up or down from it (attn_v and ffn_down
of some layers get more bits, the output matrix Q6_K, ...). `plan_types` applies the recipe to a
model's tensor table exactly as llama.cpp's llama_tensor_get_type does, so a file we quantize has
the same tensor-type table as llama-quantize's for the same input and options.

Tensors are visited in llama.cpp's order (by layer number, then by name): the per-layer counters
that pick "use more bits" layers depend on it, and the output file keeps that order too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from oxillama.errors import QuantError
from oxillama.quant.types import GGMLType, type_info

T = GGMLType


@dataclass(frozen=True)
class FileType:
    name: str
    ftype: int          # LLAMA_FTYPE_* id, stored as general.file_type
    default: GGMLType   # the type of every quantizable tensor before the recipe moves it


# llama.h's llama_ftype ids and llama_ftype_get_default_type
_FILE_TYPES = [
    FileType("F32", 0, T.F32), FileType("F16", 1, T.F16), FileType("BF16", 32, T.BF16),
    FileType("Q4_0", 2, T.Q4_0), FileType("Q4_1", 3, T.Q4_1), FileType("Q8_0", 7, T.Q8_0),
    FileType("Q5_0", 8, T.Q5_0), FileType("Q5_1", 9, T.Q5_1),
    FileType("Q2_K", 10, T.Q2_K), FileType("Q2_K_S", 21, T.Q2_K),
    FileType("Q3_K_S", 11, T.Q3_K), FileType("Q3_K_M", 12, T.Q3_K), FileType("Q3_K_L", 13, T.Q3_K),
    FileType("Q4_K_S", 14, T.Q4_K), FileType("Q4_K_M", 15, T.Q4_K),
    FileType("Q5_K_S", 16, T.Q5_K), FileType("Q5_K_M", 17, T.Q5_K), FileType("Q6_K", 18, T.Q6_K),
    FileType("IQ2_XXS", 19, T.IQ2_XXS), FileType("IQ2_XS", 20, T.IQ2_XS), FileType("IQ3_XS", 22, T.IQ3_S),
    FileType("IQ3_XXS", 23, T.IQ3_XXS), FileType("IQ1_S", 24, T.IQ1_S), FileType("IQ4_NL", 25, T.IQ4_NL),
    FileType("IQ3_S", 26, T.IQ3_S), FileType("IQ3_M", 27, T.IQ3_S), FileType("IQ2_S", 28, T.IQ2_XS),
    FileType("IQ2_M", 29, T.IQ2_S), FileType("IQ4_XS", 30, T.IQ4_XS), FileType("IQ1_M", 31, T.IQ1_M),
    FileType("TQ1_0", 36, T.TQ1_0), FileType("TQ2_0", 37, T.TQ2_0), FileType("MXFP4_MOE", 38, T.MXFP4),
    FileType("Q1_0", 40, T.Q1_0),
]
FILE_TYPES: dict[str, FileType] = {f.name: f for f in _FILE_TYPES}
# llama-quantize's aliases
_ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

_IQ_LOW = {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}   # the 1-2 bit i-quant mixes


def file_type(name: str | int) -> FileType:
    """A file type by llama-quantize's name ("q4_k_m", "Q4_K", ...) or LLAMA_FTYPE id."""
    if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
        for f in _FILE_TYPES:
            if f.ftype == int(name):
                return f
    elif isinstance(name, str):
        key = _ALIASES.get(name.upper(), name.upper())
        if key in FILE_TYPES:
            return FILE_TYPES[key]
    raise QuantError(f"unknown quantization type {name!r}; known: {', '.join(list(FILE_TYPES) + list(_ALIASES))}")


def layer_of(name: str) -> int:
    """The N of a `blk.N.` tensor name, else -1 (as llama.cpp's sscanf("blk.%d.") leaves it)."""
    m = re.match(r"blk\.(-?\d+)\.", name)
    return int(m.group(1)) if m else -1


def llama_order(names) -> list[str]:
    """Tensor names in llama.cpp's order (its loader's weight_name_comparer): by layer, then name."""
    return sorted(names, key=lambda n: (layer_of(n), n.encode("utf-8")))


def category(name: str) -> str:
    """llama.cpp's broad tensor category (tensor_get_category)."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"),
                     ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                     ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"),
                     ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


_ATTN_V_LIKE = ("attn_v", "attn_qkv", "attn_kv_b")
# name fragments llama.cpp never quantizes (tensor_allows_quantization)
_NEVER = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
          "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
          "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
          "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
          "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
          "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
          "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
          "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd")


def allows_quantization(name: str, n_dims: int, *, quantize_output: bool = True) -> bool:
    """Whether llama.cpp would quantize this tensor at all (2-D or 3-D weights, not norms, ...)."""
    if n_dims < 2 or not name.endswith("weight"):
        return False
    if any(frag in name for frag in _NEVER):
        return False
    if name == "output.weight" and not quantize_output:
        return False
    return name not in ("position_embd.weight", "token_types.weight")


@dataclass
class ModelFacts:
    """What the recipes read from a model besides tensor names (llama.cpp's hparams)."""
    arch: str = ""
    n_layer: int = 0
    n_gqa: int = 1          # n_head / n_head_kv of layer 0
    n_expert: int = 0
    is_70b: bool = False    # llama.cpp's LLM_TYPE_70B: attn_v gets more bits

    @classmethod
    def from_metadata(cls, metadata: dict) -> "ModelFacts":
        arch = str(metadata.get("general.architecture", ""))

        def first(key, default=0):
            v = metadata.get(f"{arch}.{key}", default)
            try:
                return int(v[0]) if hasattr(v, "__len__") and not isinstance(v, str) else int(v)
            except (TypeError, ValueError, IndexError):
                return default
        n_layer = first("block_count")
        n_head = first("attention.head_count")
        n_head_kv = first("attention.head_count_kv", n_head) or n_head
        n_gqa = n_head // n_head_kv if n_head and n_head_kv else 1
        # llm_load_hparams types a llama with 80 layers and grouped KV heads as 70B
        is_70b = arch == "llama" and n_layer == 80 and n_head != n_head_kv
        return cls(arch, n_layer, n_gqa, first("expert_count"), is_70b)


@dataclass
class Options:
    pure: bool = False                            # every quantizable tensor gets the default type
    output_tensor_type: GGMLType | None = None
    token_embedding_type: GGMLType | None = None
    quantize_output: bool = True                  # False: llama-quantize's --leave-output-tensor
    tensor_types: list[tuple[str, GGMLType]] = field(default_factory=list)   # (regex, type) overrides
    has_imatrix: bool = False


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


class _Counters:
    def __init__(self, n_attention_wv: int, n_layer: int):
        self.n_attention_wv, self.i_attention_wv = n_attention_wv, 0
        self.n_layer = n_layer
        self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self.has_tied_embeddings = True


def _block(t: GGMLType) -> int:
    return type_info(t).block_size


def _is_quantized(t: GGMLType) -> bool:
    return t not in (T.F32, T.F16, T.BF16, T.F64, T.I8, T.I16, T.I32, T.I64)


def _recipe_type(qs: _Counters, facts: ModelFacts, opts: Options, ft: str, new: GGMLType, name: str,
                 ne0: int, ne2: int, cat: str) -> GGMLType:
    """llama_tensor_get_type_impl: the file type's mix."""
    def layer_info(i_layer: int) -> tuple[int, int]:
        if facts.n_expert > 1:   # experts may be split over tensors: the layer is in the name
            i_layer = layer_of(name)
            if not 0 <= i_layer < qs.n_layer:
                raise QuantError(f"bad layer {i_layer} for tensor {name}")
        return i_layer, qs.n_layer

    gqa, n_expert = facts.n_gqa, facts.n_expert
    if cat == "output" or (qs.has_tied_embeddings and cat == "token_embd"):
        if opts.output_tensor_type is not None:
            return opts.output_tensor_type
        if ft == "MXFP4_MOE" or facts.arch == "falcon" or ne0 % _block(new):
            return T.Q8_0
        if ft in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
            return T.Q5_K
        return new if new == T.Q8_0 else T.Q6_K
    if ft == "MXFP4_MOE":   # the experts (3-D) MXFP4, every other matrix Q8_0
        experts = ne2 > 1 and (facts.arch != "bailingmoe3" or cat in ("ffn_up", "ffn_gate", "ffn_down"))
        return T.MXFP4 if experts else T.Q8_0
    if cat == "token_embd":
        if opts.token_embedding_type is not None:
            return opts.token_embedding_type
        if ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return T.Q2_K
        if ft in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return T.IQ3_S
        if ft in ("TQ1_0", "TQ2_0"):
            return T.Q4_K
        return new
    if ft in _IQ_LOW:
        if cat in _ATTN_V_LIKE:
            if gqa >= 4 or n_expert >= 4:
                new = T.Q4_K
            else:
                new = T.IQ3_S if ft in ("IQ2_S", "IQ2_M") else T.Q2_K
            qs.i_attention_wv += 1
        elif n_expert == 8 and cat == "attn_k":
            new = T.Q4_K
        elif cat == "ffn_down":
            if qs.i_ffn_down < qs.n_layer // 8:
                new = T.IQ3_S if ft in ("IQ2_S", "IQ2_M") else T.Q2_K
            qs.i_ffn_down += 1
        elif cat == "attn_output":
            if n_expert == 8:
                new = T.Q5_K
            elif ft in ("IQ1_S", "IQ1_M"):
                new = T.IQ2_XXS
            elif ft in ("IQ2_S", "IQ2_M"):
                new = T.IQ3_S
        return new
    if cat in _ATTN_V_LIKE:
        if ft == "Q2_K":
            new = T.Q4_K if gqa >= 4 else T.Q3_K
        elif ft == "Q2_K_S" and gqa >= 4:
            new = T.Q4_K
        elif ft == "IQ3_XXS":
            new = T.Q4_K if gqa >= 4 else (T.IQ3_S if not opts.has_imatrix else T.IQ3_XXS)
        elif ft in ("IQ3_XS", "IQ3_S") and gqa >= 4:
            new = T.Q4_K
        elif ft == "IQ3_M":
            new = T.Q4_K
        elif ft == "Q3_K_M":
            new = T.Q5_K if qs.i_attention_wv < 2 else T.Q4_K
        elif ft == "Q3_K_L":
            new = T.Q5_K
        elif ft in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
            new = T.Q5_K
        elif ft in ("Q4_K_M", "Q5_K_M") and _use_more_bits(qs.i_attention_wv, qs.n_attention_wv):
            new = T.Q6_K
        elif ft == "Q4_K_S" and qs.i_attention_wv < 4:
            new = T.Q5_K
        if facts.is_70b and new in (T.Q3_K, T.Q4_K):
            new = T.Q5_K
        if n_expert == 8:
            new = T.Q8_0
        qs.i_attention_wv += 1
    elif cat == "attn_k":
        if n_expert == 8:
            new = T.Q8_0
        elif ft == "IQ3_XS":
            new = T.IQ3_XXS
        elif ft == "IQ3_XXS":
            new = T.IQ2_S
    elif cat == "attn_q":
        if ft == "IQ3_XS":
            new = T.IQ3_XXS
        elif ft == "IQ3_XXS":
            new = T.IQ2_S
    elif cat == "ffn_down":
        i_layer, n_layer = layer_info(qs.i_ffn_down)
        falcon = facts.arch == "falcon"
        if ft == "Q2_K":
            new = T.Q3_K
        elif ft == "Q2_K_S":
            if i_layer < n_layer // 8:
                new = T.Q4_K
        elif ft == "IQ3_XXS" and not opts.has_imatrix:
            new = T.Q4_K if i_layer < n_layer // 8 else T.Q3_K
        elif ft == "Q3_K_M":
            new = (T.Q5_K if i_layer < n_layer // 16
                   else T.Q4_K if not falcon or _use_more_bits(i_layer, n_layer) else T.Q3_K)
        elif ft == "IQ3_M" and (i_layer < n_layer // 8 or (n_expert == 8 and _use_more_bits(i_layer, n_layer))):
            new = T.Q4_K
        elif ft == "Q3_K_L":
            new = T.Q4_K if falcon else T.Q5_K
        elif ft == "Q4_K_M":
            if falcon:
                new = (T.Q6_K if i_layer < n_layer // 16
                       else T.Q5_K if _use_more_bits(i_layer, n_layer) else T.Q4_K)
            elif _use_more_bits(i_layer, n_layer):
                new = T.Q6_K
        elif i_layer < n_layer // 8 and ft in ("IQ4_NL", "IQ4_XS") and not opts.has_imatrix:
            new = T.Q5_K
        elif ft == "Q5_K_M" and _use_more_bits(i_layer, n_layer):
            new = T.Q6_K
        elif ft == "Q4_K_S" and not falcon and i_layer < n_layer // 8:
            new = T.Q5_K
        elif ft in ("Q4_0", "Q5_0") and opts.has_imatrix and i_layer < n_layer // 8:
            new = T.Q4_1 if ft == "Q4_0" else T.Q5_1
        qs.i_ffn_down += 1
    elif cat == "attn_output":
        if facts.arch != "falcon":
            if n_expert == 8:
                if ft in ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M",
                          "IQ3_S", "IQ3_M", "IQ4_XS"):
                    new = T.Q5_K
            else:
                new = {"Q2_K": T.Q3_K, "IQ3_XXS": T.IQ3_S, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K,
                       "IQ3_M": T.Q4_K}.get(ft, new)
        elif ft == "Q3_K_L":
            new = T.Q4_K
    elif cat == "attn_qkv":
        if ft in ("Q3_K_M", "Q3_K_L", "IQ3_M"):
            new = T.Q4_K
        elif ft == "Q4_K_M":
            new = T.Q5_K
        elif ft == "Q5_K_M":
            new = T.Q6_K
    elif cat in ("ffn_gate", "ffn_up"):
        attr = "i_" + cat
        i_layer, n_layer = layer_info(getattr(qs, attr))
        if ft == "IQ3_XS" and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            new = T.IQ3_XXS
        setattr(qs, attr, getattr(qs, attr) + 1)
    return new


# tensor_type_fallback: a type the row length cannot hold falls back to a 32-block type
_FALLBACK = {T.IQ1_S: T.IQ4_NL, T.IQ1_M: T.IQ4_NL, T.IQ2_XXS: T.IQ4_NL, T.IQ2_XS: T.IQ4_NL, T.IQ2_S: T.IQ4_NL,
             T.IQ3_XXS: T.IQ4_NL, T.IQ3_S: T.IQ4_NL, T.IQ4_XS: T.IQ4_NL, T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0,
             T.TQ1_0: T.Q4_0, T.TQ2_0: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}


@dataclass(frozen=True)
class TensorPlan:
    name: str
    src_type: GGMLType
    dst_type: GGMLType
    requires_imatrix: bool
    fell_back: bool = False


def plan_types(tensors, ft: FileType, facts: ModelFacts, opts: Options) -> list[TensorPlan]:
    """The type of every tensor of the output, in llama.cpp's order.

    tensors: (name, ggml_shape, type) triples (ggml_shape is ne0-first, as GGUF stores it).
    """
    table = {name: (tuple(shape), GGMLType(int(qtype))) for name, shape, qtype in tensors}
    order = llama_order(table)
    n_attention_wv = sum(category(n) in _ATTN_V_LIKE for n in order)
    qs = _Counters(n_attention_wv, facts.n_layer)
    qs.has_tied_embeddings = "output.weight" not in table
    default = ft.default
    plans = []
    for name in order:
        shape, src = table[name]
        n_dims = len(shape)
        while n_dims > 1 and shape[n_dims - 1] == 1:   # ggml_n_dims ignores trailing 1s
            n_dims -= 1
        cat = category(name)
        fell_back = False
        if not allows_quantization(name, n_dims, quantize_output=opts.quantize_output):
            dst = src
        elif opts.token_embedding_type is not None and cat == "token_embd":
            dst = opts.token_embedding_type
        elif opts.output_tensor_type is not None and cat == "output":
            dst = opts.output_tensor_type
        else:
            dst = default
            if _is_quantized(default):
                manual = False
                for pattern, qtype in opts.tensor_types:
                    if re.search(pattern, name):
                        dst, manual = qtype, True
                        break
                if not manual and not opts.pure:
                    ne2 = shape[2] if len(shape) > 2 else 1
                    dst = _recipe_type(qs, facts, opts, ft.name, dst, name, shape[0], ne2, cat)
                if shape[0] % _block(dst):
                    fell_back = True
                    if dst not in _FALLBACK:
                        raise QuantError(f"{name}: rows of {shape[0]} values do not fit {dst.name} blocks of "
                                         f"{_block(dst)} and {dst.name} has no fallback type")
                    dst = _FALLBACK[dst]
                    if shape[0] % _block(dst):
                        dst = T.F16
        requires = (cat not in ("token_embd", "output") and
                    (dst in (T.IQ3_XXS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_M, T.IQ1_S) or
                     (dst == T.Q2_K and ft.name == "Q2_K_S")))
        plans.append(TensorPlan(name, src, dst, requires, fell_back))
    return plans
