# The fused forward pass: ForwardPlan (the model as C structs), KVBuffers (the cache), and
# ForwardContext (scratch + the one call per forward that releases the GIL).
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from posix.mman cimport madvise, MADV_DONTNEED
from posix.unistd cimport sysconf, _SC_PAGESIZE

import mmap as _mmap

import numpy as np

from oxillama.errors import ContextOverflowError, ModelError

_NORM_TYPES = {"rms": 0, "layer": 1}
_ACTS = {"silu": 0, "gelu_tanh": 1, "gelu": 1, "gelu_erf": 2, "swiglu_oai": 3, "relu_sqr": 4}
_ROPE_MODES = {"norm": 0, "neox": 2, "none": -1}
GATINGS = {"softmax": OXL_GATING_SOFTMAX, "sigmoid": OXL_GATING_SIGMOID, "softmax_weight": OXL_GATING_SOFTMAX_WEIGHT,
           "sparsemixer": OXL_GATING_SPARSEMIXER}
MAX_EXPERTS = OXL_MAX_EXPERTS


cdef class ForwardPlan:
    """A model's forward pass as C structs, built once at load time from a Python description.

    `spec` is a dict produced by oxillama.models (see models/base.py): hyper-parameters, weights as
    (uint8 array, type id, rows, cols) tuples and norm/bias vectors as float32 arrays. The plan
    keeps every array it points into alive.

    repack: the matrices whose type has a repacked layout on the active tier (matmul.h) are copied once
    into it, and the products read the copy (the same floats, less work per block); the file stays the
    truth (embedding rows, and experts whose rows do not split into whole groups of OXL_REPACK_ROW_ALIGN per
    expert). `repacked`: a dict shared by plans over the same weights (a layer
    draft) so each matrix is repacked once. repacked_bytes: the RAM the copies take.
    """
    cdef oxl_model model
    cdef oxl_layer *layers
    cdef list _keep
    cdef bint _repack
    cdef dict _repacked
    cdef int _repack_threads
    cdef readonly int n_layer, n_embd, n_vocab, kv_dim, n_head_kv, head_dim
    cdef readonly int n_kv_layer          # layers with K/V in the cache: the attention layers (>= 1: an
                                          # attention-free model keeps one unused KV layer)
    cdef readonly int64_t repacked_bytes
    cdef readonly dict repacked_layouts
    cdef readonly bint non_causal          # an encoder: each call's tokens see each other (one call per input)
    cdef readonly int64_t state_floats    # floats of one sequence's recurrent state; 0: no recurrent layer
    cdef readonly list state_layout       # [(layer, name, shape, offset)]: where each layer's state lives in a slot
    cdef readonly tuple kinds             # each layer's kind
    cdef readonly bint kv_v_is_k          # every KV layer is latent attention (layers/mla.h): it reads its values
                                          # from its K pages, so a cache's V may be its K (half the memory)

    def __cinit__(self):
        self.layers = NULL
        self._keep = []

    def __dealloc__(self):
        free(self.layers)

    def __init__(self, dict spec, bint repack=True, dict repacked=None):
        memset(&self.model, 0, sizeof(oxl_model))
        self._repack = repack
        self._repacked = {} if repacked is None else repacked
        self._repack_threads = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                   else (os.cpu_count() or 1))
        self.repacked_bytes = 0
        self.repacked_layouts = {}
        layers = spec["layers"]
        self.n_layer = len(layers)
        if self.n_layer == 0:
            raise ModelError("a model needs at least one layer")
        self.layers = <oxl_layer *>calloc(self.n_layer, sizeof(oxl_layer))
        if self.layers == NULL:
            raise MemoryError()
        self.n_embd = spec["n_embd"]
        self.n_vocab = spec["n_vocab"]
        m = &self.model
        m.n_embd = self.n_embd
        m.n_vocab = self.n_vocab
        m.n_layer = self.n_layer
        m.norm_type = _NORM_TYPES[spec.get("norm_type", "rms")]
        m.norm_eps = spec["norm_eps"]
        m.embd_scale = spec.get("embd_scale", 1.0)
        m.final_softcap = spec.get("final_softcap", 0.0)
        m.logit_scale = spec.get("logit_scale", 1.0)
        emb = self._weight(spec["tok_embd"], "token_embd", self.n_vocab, self.n_embd, False)
        m.tok_embd = emb.data
        m.tok_embd_type = emb.type
        m.output = self._weight(spec["output"], "output", self.n_vocab, self.n_embd)
        if spec.get("pos_embd") is not None:   # learned absolute positions (gpt2)
            pos = spec["pos_embd"]
            pw = self._weight(pos, "position_embd", pos[2], self.n_embd)
            if pw.rows < 1:
                raise ModelError("position_embd.weight has no rows")
            m.pos_embd = pw.data
            m.pos_embd_type = pw.type
            m.n_pos = pw.rows
        m.embd_norm = self._vec(spec.get("embd_norm"), self.n_embd, "token_embd_norm")
        m.embd_norm_b = self._vec(spec.get("embd_norm_b"), self.n_embd, "token_embd_norm.bias")
        m.out_norm = self._vec(spec.get("out_norm"), self.n_embd, "output_norm")
        m.out_norm_b = self._vec(spec.get("out_norm_b"), self.n_embd, "output_norm.bias")
        # encoders: the token-type-0 row and no causal mask (learned positions and the embeddings' norm above)
        m.type_embd = self._vec(spec.get("type_embd"), self.n_embd, "token_types")
        m.non_causal = bool(spec.get("non_causal", False))
        self.non_causal = m.non_causal
        m.output_b = self._vec(spec.get("output_b"), self.n_vocab, "output.bias")
        cdef int n_ff_max = 0, q_dim_max = 0, kv_dim = -1, n_kv_layer = 0, n_mla = 0
        cdef oxl_layer *L
        self.state_layout = []
        self.state_floats = 0
        kinds = []
        self.n_head_kv, self.head_dim = spec.get("n_head_kv", 1), spec.get("head_dim", 32)  # attention-free: a token KV
        for il, ls in enumerate(layers):
            L = &self.layers[il]
            p = f"blk.{il}."
            kind = ls.get("kind", "attention")
            kinds.append(kind)
            if kind == "mamba2":
                self._mamba2(L, ls, p, il)
            elif kind == "shortconv":
                self._shortconv(L, ls, p, il)
            elif kind == "deltanet":
                self._deltanet(L, ls, p, il)
            elif kind == "mla":
                q_dim_max = max(q_dim_max, self._mla(L, ls, p, il, kv_dim))
                kv_dim = L.n_head_kv * L.head_dim
                L.kv_layer = n_kv_layer
                n_kv_layer += 1
                n_mla += 1
            elif kind == "ffn":   # no mixer: x += ffn(ffn_norm(x))
                L.kind = OXL_LAYER_FFN
                if ls.get("w_up") is None or ls.get("ffn_norm") is None:
                    raise ModelError(f"layer {il}: a block without a mixer needs its FFN and ffn_norm")
            elif kind != "attention":
                raise ModelError(f"layer {il}: unknown layer kind {kind!r}")
            else:
                q_dim_max = max(q_dim_max, self._attention(L, ls, p, il, kv_dim))
                kv_dim = L.n_head_kv * L.head_dim
                L.kv_layer = n_kv_layer
                n_kv_layer += 1
            L.ffn_norm = self._vec(ls.get("ffn_norm"), self.n_embd, p + "ffn_norm")
            L.ffn_norm_b = self._vec(ls.get("ffn_norm_b"), self.n_embd, p + "ffn_norm.bias")
            L.fused_gate_up = bool(ls.get("fused_gate_up", False))
            n_expert = ls.get("n_expert", 0)
            if ls.get("w_up") is not None:   # the dense FFN, or the shared expert beside experts
                n_ff = ls["n_ff"]
                n_ff_max = max(n_ff_max, n_ff)
                if ls.get("w_gate") is not None:
                    L.w_gate = self._weight(ls["w_gate"], p + "ffn_gate", n_ff, self.n_embd)
                L.w_up = self._weight(ls["w_up"], p + "ffn_up", 2 * n_ff if L.fused_gate_up else n_ff, self.n_embd)
                L.w_down = self._weight(ls["w_down"], p + "ffn_down", self.n_embd, n_ff)
                L.b_up = self._vec(ls.get("b_up"), n_ff, p + "ffn_up.bias")
                L.b_gate = self._vec(ls.get("b_gate"), n_ff, p + "ffn_gate.bias")
                L.b_down = self._vec(ls.get("b_down"), self.n_embd, p + "ffn_down.bias")
            elif not n_expert and (kind == "attention" and not ls.get("no_ffn", False) or kind == "mla"):
                raise ModelError(f"layer {il}: no feed-forward weights")
            if n_expert:
                self._experts(L, ls, p)
                m.n_expert_max = max(m.n_expert_max, L.n_expert)
                m.n_expert_used_max = max(m.n_expert_used_max, L.n_expert_used)
                m.n_ff_exp_max = max(m.n_ff_exp_max, L.n_ff_exp)
            L.post_ffn_norm = self._vec(ls.get("post_ffn_norm"), self.n_embd, p + "post_ffw_norm")
            L.act = _ACTS[ls.get("act", "silu")]
            L.residual_scale = ls.get("residual_scale", 1.0)
            L.attn_out_norm = self._vec(ls.get("attn_out_norm"), self.n_embd, p + "attn_output_norm")
            L.attn_out_norm_b = self._vec(ls.get("attn_out_norm_b"), self.n_embd, p + "attn_output_norm.bias")
            L.layer_out_norm = self._vec(ls.get("layer_out_norm"), self.n_embd, p + "layer_output_norm")
            L.layer_out_norm_b = self._vec(ls.get("layer_out_norm_b"), self.n_embd, p + "layer_output_norm.bias")
            L.act_alpha = ls.get("act_alpha", 0.0)
            L.act_limit = ls.get("act_limit", 0.0)
            if L.act == 3 and not (L.act_alpha > 0.0 and L.act_limit > 0.0):
                raise ModelError(f"layer {il}: the clamped SwiGLU needs act_alpha > 0 and act_limit > 0, got "
                                 f"{L.act_alpha}, {L.act_limit}")
        self.kinds = tuple(kinds)
        m.layers = self.layers
        m.n_ff_max = n_ff_max
        m.q_dim_max = q_dim_max
        m.state_floats = self.state_floats
        self.n_kv_layer = max(n_kv_layer, 1)
        self.kv_v_is_k = n_mla > 0 and n_mla == n_kv_layer
        if kv_dim < 0:
            kv_dim = self.n_head_kv * self.head_dim
        m.kv_dim = kv_dim
        self.kv_dim = kv_dim

    cdef int _mamba2(self, oxl_layer *L, dict ls, str p, int il) except -1:
        """A Mamba-2 mixer (layers/ssm.h): its sizes checked against each other and its weights, its state
        placed in the slot after the previous recurrent layers'."""
        L.kind = OXL_LAYER_MAMBA2
        dc, di, ds = ls["ssm_d_conv"], ls["ssm_d_inner"], ls["ssm_d_state"]
        ng, nh = ls["ssm_n_group"], ls["ssm_n_head"]
        for key, v in (("ssm.conv_kernel", dc), ("ssm.inner_size", di), ("ssm.state_size", ds),
                       ("ssm.group_count", ng), ("ssm.time_step_rank", nh)):
            if not isinstance(v, int) or v < 1 or v > 1 << 20:
                raise ModelError(f"layer {il}: {key} = {v!r} is not a size")
        if dc > 64:
            raise ModelError(f"layer {il}: ssm.conv_kernel = {dc}; at most 64 is supported")
        if di % nh or nh % ng:
            raise ModelError(f"layer {il}: ssm.inner_size {di} must be a multiple of ssm.time_step_rank (heads) {nh}, "
                             f"itself a multiple of ssm.group_count {ng}")
        conv_dim = di + 2 * ng * ds
        d_in_proj = di + conv_dim + nh
        L.ssm_d_conv, L.ssm_d_inner, L.ssm_d_state, L.ssm_n_group, L.ssm_n_head = dc, di, ds, ng, nh
        L.attn_norm = self._vec(ls.get("attn_norm"), self.n_embd, p + "attn_norm")
        if L.attn_norm == NULL:
            raise ModelError(f"layer {il}: {p}attn_norm is missing")
        L.ssm_in = self._weight(ls["ssm_in"], p + "ssm_in", d_in_proj, self.n_embd)
        L.ssm_out = self._weight(ls["ssm_out"], p + "ssm_out", self.n_embd, di)
        conv = ls["ssm_conv1d"]
        if not isinstance(conv, np.ndarray) or conv.size != conv_dim * dc:
            raise ModelError(f"layer {il}: {p}ssm_conv1d.weight has {getattr(conv, 'size', None)} values; "
                             f"conv_dim {conv_dim} x ssm.conv_kernel {dc} = {conv_dim * dc}")
        L.ssm_conv1d = self._vec(conv, conv_dim * dc, p + "ssm_conv1d.weight")
        L.ssm_conv1d_b = self._vec(ls.get("ssm_conv1d_b"), conv_dim, p + "ssm_conv1d.bias")
        L.ssm_a = self._vec(ls["ssm_a"], nh, p + "ssm_a")
        L.ssm_d = self._vec(ls["ssm_d"], nh, p + "ssm_d")
        L.ssm_dt_b = self._vec(ls["ssm_dt_b"], nh, p + "ssm_dt.bias")
        L.ssm_norm = self._vec(ls.get("ssm_norm"), di, p + "ssm_norm")
        L.state_off = self.state_floats
        conv_shape, ssm_shape = (dc - 1, conv_dim), (nh, ds, di // nh)
        self.state_layout.append((il, "conv", conv_shape, self.state_floats))
        self.state_floats += (dc - 1) * conv_dim
        self.state_layout.append((il, "ssm", ssm_shape, self.state_floats))
        self.state_floats += nh * ds * (di // nh)
        m = &self.model
        m.ssm_d_inner_max = max(m.ssm_d_inner_max, di)
        m.ssm_conv_dim_max = max(m.ssm_conv_dim_max, conv_dim)
        m.ssm_d_in_proj_max = max(m.ssm_d_in_proj_max, d_in_proj)
        return 0

    cdef int _shortconv(self, oxl_layer *L, dict ls, str p, int il) except -1:
        """LFM2's gated short convolution (layers/shortconv.h): in_proj (3 n_embd, n_embd) rows [B; C; x], the
        (n_embd, L) kernel, out_proj; its conv state placed in the slot after the previous recurrent layers'."""
        L.kind = OXL_LAYER_SHORTCONV
        width = ls["conv_L"]
        if not isinstance(width, int) or not 2 <= width <= OXL_CONV_MAX_L:
            raise ModelError(f"layer {il}: shortconv.l_cache = {width!r}; supported 2..{OXL_CONV_MAX_L}")
        L.conv.L = width
        L.attn_norm = self._vec(ls.get("attn_norm"), self.n_embd, p + "attn_norm")
        if L.attn_norm == NULL:
            raise ModelError(f"layer {il}: {p}attn_norm is missing")
        L.conv.in_proj = self._weight(ls["conv_in"], p + "shortconv.in_proj", 3 * self.n_embd, self.n_embd)
        L.conv.out_proj = self._weight(ls["conv_out"], p + "shortconv.out_proj", self.n_embd, self.n_embd)
        L.conv.kernel = self._vec(ls["conv_kernel"], self.n_embd * width, p + "shortconv.conv")
        L.state_off = self.state_floats
        self.state_layout.append((il, "conv", (self.n_embd, width - 1), self.state_floats))
        self.state_floats += self.n_embd * (width - 1)
        return 0

    cdef int _deltanet(self, oxl_layer *L, dict ls, str p, int il) except -1:
        """Qwen3-Next's gated DeltaNet (layers/deltanet.h): its sizes checked against each other and its weights,
        its conv state (conv_dim, L - 1) and delta-rule state (n_v_heads, d_v, d_k) placed in the slot."""
        L.kind = OXL_LAYER_DELTANET
        width, nk, nv, dk, dv = ls["dn_L"], ls["dn_n_k_heads"], ls["dn_n_v_heads"], ls["dn_d_k"], ls["dn_d_v"]
        for key, v in (("ssm.conv_kernel", width), ("ssm.group_count", nk), ("ssm.time_step_rank", nv),
                       ("ssm.state_size", dk), ("value head size", dv)):
            if not isinstance(v, int) or v < 1 or v > 1 << 16:
                raise ModelError(f"layer {il}: {key} = {v!r} is not a size")
        if not 2 <= width <= OXL_CONV_MAX_L:
            raise ModelError(f"layer {il}: ssm.conv_kernel = {width}; supported 2..{OXL_CONV_MAX_L}")
        if nv % nk or dk > OXL_DELTANET_MAX_DK:
            raise ModelError(f"layer {il}: ssm.time_step_rank (value heads) {nv} must be a multiple of "
                             f"ssm.group_count (key heads) {nk}, and ssm.state_size {dk} at most {OXL_DELTANET_MAX_DK}")
        cd, vd = 2 * nk * dk + nv * dv, nv * dv
        L.dn.L, L.dn.n_k_heads, L.dn.n_v_heads, L.dn.d_k, L.dn.d_v = width, nk, nv, dk, dv
        L.dn.heads_tiled = bool(ls.get("dn_heads_tiled", False))
        L.attn_norm = self._vec(ls.get("attn_norm"), self.n_embd, p + "attn_norm")
        if L.attn_norm == NULL:
            raise ModelError(f"layer {il}: {p}attn_norm is missing")
        L.dn.wqkv = self._weight(ls["dn_wqkv"], p + "attn_qkv", cd, self.n_embd)
        L.dn.wgate = self._weight(ls["dn_wgate"], p + "attn_gate", vd, self.n_embd)
        L.dn.w_ba = self._weight(ls["dn_w_ba"], p + "ssm_ba", 2 * nv, self.n_embd)
        L.dn.w_out = self._weight(ls["dn_w_out"], p + "ssm_out", self.n_embd, vd)
        L.dn.conv = self._vec(ls["dn_conv"], cd * width, p + "ssm_conv1d")
        L.dn.a_neg = self._vec(ls["dn_a"], nv, p + "ssm_a")
        L.dn.dt_bias = self._vec(ls["dn_dt_bias"], nv, p + "ssm_dt.bias")
        L.dn.norm = self._vec(ls["dn_norm"], dv, p + "ssm_norm")
        L.state_off = self.state_floats
        self.state_layout.append((il, "conv", (cd, width - 1), self.state_floats))
        self.state_floats += cd * (width - 1)
        self.state_layout.append((il, "delta", (nv, dv, dk), self.state_floats))
        self.state_floats += nv * dv * dk
        return 0

    cdef int _attention(self, oxl_layer *L, dict ls, str p, int il, int kv_dim_seen) except -1:
        """An attention block's weights; returns its q_dim."""
        L.kind = OXL_LAYER_ATTENTION
        L.n_head = ls["n_head"]
        L.n_head_kv = ls["n_head_kv"]
        L.head_dim = ls["head_dim"]
        if L.n_head <= 0 or L.n_head_kv <= 0 or L.head_dim <= 0 or L.n_head % L.n_head_kv:
            raise ModelError(f"layer {il}: bad head counts n_head={L.n_head} n_head_kv={L.n_head_kv} "
                             f"head_dim={L.head_dim}")
        q_dim = L.n_head * L.head_dim
        kv_dim = L.n_head_kv * L.head_dim
        if kv_dim_seen >= 0 and (L.n_head_kv, L.head_dim) != (self.n_head_kv, self.head_dim):
            raise ModelError(f"layer {il}: n_head_kv={L.n_head_kv}, head_dim={L.head_dim} differ from the first "
                             f"attention layer's {self.n_head_kv}, {self.head_dim} (the KV cache has one layout for "
                             f"all layers)")
        self.n_head_kv, self.head_dim = L.n_head_kv, L.head_dim
        L.attn_norm = self._vec(ls.get("attn_norm"), self.n_embd, p + "attn_norm")
        L.attn_norm_b = self._vec(ls.get("attn_norm_b"), self.n_embd, p + "attn_norm.bias")
        L.attn_gate = bool(ls.get("attn_gate", False))
        if L.attn_gate:   # wq's rows: [q | gate] per head
            if ls.get("wk") is None or ls.get("bq") is not None:
                raise ModelError(f"layer {il}: a gated attention layer needs separate Q, K, V and no Q bias")
            L.wq = self._weight(ls["wq"], p + "attn_q", 2 * q_dim, self.n_embd)
            L.wk = self._weight(ls["wk"], p + "attn_k", kv_dim, self.n_embd)
            L.wv = self._weight(ls["wv"], p + "attn_v", kv_dim, self.n_embd)
        elif ls.get("wk") is None:
            L.wq = self._weight(ls["wq"], p + "attn_qkv", q_dim + 2 * kv_dim, self.n_embd)
        else:
            L.wq = self._weight(ls["wq"], p + "attn_q", q_dim, self.n_embd)
            L.wk = self._weight(ls["wk"], p + "attn_k", kv_dim, self.n_embd)
            L.wv = self._weight(ls["wv"], p + "attn_v", kv_dim, self.n_embd)
        L.wo = self._weight(ls["wo"], p + "attn_output", self.n_embd, q_dim)
        L.bq = self._vec(ls.get("bq"), q_dim, p + "attn_q.bias")
        L.bk = self._vec(ls.get("bk"), kv_dim, p + "attn_k.bias")
        L.bv = self._vec(ls.get("bv"), kv_dim, p + "attn_v.bias")
        L.bo = self._vec(ls.get("bo"), self.n_embd, p + "attn_output.bias")
        L.qk_norm_full = bool(ls.get("qk_norm_full", False))
        L.qk_norm_layer = ls.get("qk_norm_type", "rms") == "layer"
        L.qk_norm_head_weights = bool(ls.get("qk_norm_head_weights", False))
        if L.qk_norm_full and (L.qk_norm_layer or L.qk_norm_head_weights):
            raise ModelError(f"layer {il}: q/k norms over all heads are RMS norms with one weight vector")
        whole = L.qk_norm_full or L.qk_norm_head_weights
        L.q_norm = self._vec(ls.get("q_norm"), q_dim if whole else L.head_dim, p + "attn_q_norm")
        L.k_norm = self._vec(ls.get("k_norm"), kv_dim if whole else L.head_dim, p + "attn_k_norm")
        L.alibi_slopes = self._vec(ls.get("alibi_slopes"), L.n_head, p + "ALiBi slopes")
        L.post_attn_norm = self._vec(ls.get("post_attn_norm"), self.n_embd, p + "post_attention_norm")
        L.parallel_residual = bool(ls.get("parallel_residual", False))
        L.attn_scale = ls["attn_scale"]
        L.attn_softcap = ls.get("attn_softcap", 0.0)
        L.sliding_window = ls.get("sliding_window", 0)
        L.attn_sinks = self._vec(ls.get("attn_sinks"), L.n_head, p + "attn_sinks")
        self._rope(L, ls, p, il)
        return q_dim

    cdef int _rope(self, oxl_layer *L, dict ls, str p, int il) except -1:
        rope = ls.get("rope") or {"mode": "none"}
        L.rope.mode = _ROPE_MODES[rope["mode"]]
        if L.rope.mode != -1:
            L.rope.base = rope["base"]
            L.rope.freq_scale = rope.get("freq_scale", 1.0)
            L.rope.n_rot = rope.get("n_rot", L.head_dim)
            if L.rope.n_rot <= 0 or L.rope.n_rot > L.head_dim or L.rope.n_rot % 2:
                raise ModelError(f"layer {il}: rope n_rot {L.rope.n_rot} must be even and <= head_dim")
            L.rope.freq_factors = self._vec(rope.get("freq_factors"), L.rope.n_rot // 2, p + "rope_freqs")
            L.rope.ext_factor = rope.get("ext_factor", 0.0)
            L.rope.attn_factor = rope.get("attn_factor", 1.0)
            L.rope.corr_low, L.rope.corr_high = rope.get("corr_dims", (0.0, 0.0))
        return 0

    cdef int _mla(self, oxl_layer *L, dict ls, str p, int il, int kv_dim_seen) except -1:
        """Multi-head latent attention (layers/mla.h): its sizes checked against each other and its weights; the
        cache row is the compressed latent [c | k_pe] (one KV head of kv_lora_rank + d_rope values). Returns the
        width of the attention output wo reads (n_head d_v)."""
        L.kind = OXL_LAYER_MLA
        nh, r, dn, dr, dv = ls["n_head"], ls["mla_kv_lora_rank"], ls["mla_d_nope"], ls["mla_d_rope"], ls["mla_d_v"]
        qr = ls.get("mla_q_lora_rank", 0)
        for key, v in (("attention.head_count", nh), ("attention.kv_lora_rank", r), ("nope head size", dn),
                       ("rope.dimension_count", dr), ("attention.value_length_mla", dv),
                       ("attention.q_lora_rank", qr)):
            if not isinstance(v, int) or v < (0 if key == "attention.q_lora_rank" else 1) or v > 1 << 16:
                raise ModelError(f"layer {il}: {key} = {v!r} is not a size")
        if dr % 2:
            raise ModelError(f"layer {il}: rope.dimension_count = {dr} must be even")
        cdef oxl_mla *a = &L.mla
        L.n_head, L.n_head_kv, L.head_dim = nh, 1, r + dr
        if kv_dim_seen >= 0 and (L.n_head_kv, L.head_dim) != (self.n_head_kv, self.head_dim):
            raise ModelError(f"layer {il}: the latent cache row of {L.head_dim} values differs from the first "
                             f"attention layer's {self.n_head_kv} x {self.head_dim} (one cache layout for all layers)")
        self.n_head_kv, self.head_dim = L.n_head_kv, L.head_dim
        a.q_lora_rank, a.kv_lora_rank, a.d_nope, a.d_rope, a.d_v = qr, r, dn, dr, dv
        L.attn_norm = self._vec(ls.get("attn_norm"), self.n_embd, p + "attn_norm")
        if L.attn_norm == NULL:
            raise ModelError(f"layer {il}: {p}attn_norm is missing")
        if qr:
            a.wq_a = self._weight(ls["mla_wq_a"], p + "attn_q_a", qr, self.n_embd)
            a.wq_b = self._weight(ls["mla_wq_b"], p + "attn_q_b", nh * (dn + dr), qr)
            a.q_a_norm = self._vec(ls.get("mla_q_a_norm"), qr, p + "attn_q_a_norm")
            if a.q_a_norm == NULL:
                raise ModelError(f"layer {il}: {p}attn_q_a_norm is missing")
        else:
            a.wq = self._weight(ls["mla_wq"], p + "attn_q", nh * (dn + dr), self.n_embd)
        a.wkv_a = self._weight(ls["mla_wkv_a"], p + "attn_kv_a_mqa", r + dr, self.n_embd)
        a.kv_a_norm = self._vec(ls.get("mla_kv_a_norm"), r, p + "attn_kv_a_norm")
        if a.kv_a_norm == NULL:
            raise ModelError(f"layer {il}: {p}attn_kv_a_norm is missing")
        a.wk_b = self._weight(ls["mla_wk_b"], p + "attn_k_b", nh * r, dn, False)
        a.wv_b = self._weight(ls["mla_wv_b"], p + "attn_v_b", nh * dv, r, False)
        L.wo = self._weight(ls["wo"], p + "attn_output", self.n_embd, nh * dv)
        L.attn_scale = ls["attn_scale"]
        self._rope(L, ls, p, il)
        if L.rope.mode == -1 or L.rope.n_rot != dr:
            raise ModelError(f"layer {il}: latent attention rotates its {dr} rope dimensions, got rope "
                             f"{ls.get('rope')!r}")
        return nh * dv

    cdef int _experts(self, oxl_layer *L, dict ls, str p) except -1:
        """A mixture-of-experts FFN: the router and every expert's gate, up and down stacked by expert."""
        ne, k, ff = ls["n_expert"], ls["n_expert_used"], ls["n_ff_exp"]
        if not 0 < ne <= OXL_MAX_EXPERTS:
            raise ModelError(f"{p}: {ne} experts; supported 1..{OXL_MAX_EXPERTS}")
        if not 0 < k <= ne:
            raise ModelError(f"{p}: {k} experts used per token of {ne}")
        if ff <= 0:
            raise ModelError(f"{p}: expert feed-forward length {ff}")
        gating = ls.get("gating", "softmax")
        if gating not in GATINGS:
            raise ModelError(f"{p}: expert gating {gating!r} is not supported (supported: {', '.join(GATINGS)})")
        L.n_expert, L.n_expert_used, L.n_ff_exp = ne, k, ff
        L.gating = GATINGS[gating]
        if gating == "sparsemixer" and k != 2:
            raise ModelError(f"{p}: the sparsemixer router picks 2 experts, not {k}")
        L.router_eps = ls.get("router_eps", 0.0)
        L.norm_topk = bool(ls.get("norm_topk", False))
        L.expert_scale = ls.get("expert_scale", 1.0)
        L.act = _ACTS[ls.get("act", "silu")]
        L.router = self._weight(ls["router"], p + "ffn_gate_inp", ne, self.n_embd)
        # repacked where each expert is whole groups of the layouts' rows (layers/moe.c reads the copy then)
        L.exp_gate = self._weight(ls["exp_gate"], p + "ffn_gate_exps", ne * ff, self.n_embd,
                                  ff % OXL_REPACK_ROW_ALIGN == 0)
        L.exp_up = self._weight(ls["exp_up"], p + "ffn_up_exps", ne * ff, self.n_embd, ff % OXL_REPACK_ROW_ALIGN == 0)
        L.exp_down = self._weight(ls["exp_down"], p + "ffn_down_exps", ne * self.n_embd, ff,
                                  self.n_embd % OXL_REPACK_ROW_ALIGN == 0)
        L.shexp_gate = self._vec(ls.get("shexp_gate"), self.n_embd, p + "ffn_gate_inp_shexp")
        L.router_b = self._vec(ls.get("router_b"), ne, p + "ffn_gate_inp.bias")
        L.sel_bias = self._vec(ls.get("sel_bias"), ne, p + "exp_probs_b.bias")
        L.exp_gate_b = self._vec(ls.get("exp_gate_b"), ne * ff, p + "ffn_gate_exps.bias")
        L.exp_up_b = self._vec(ls.get("exp_up_b"), ne * ff, p + "ffn_up_exps.bias")
        L.exp_down_b = self._vec(ls.get("exp_down_b"), ne * self.n_embd, p + "ffn_down_exps.bias")
        ng, ngu = ls.get("n_group", 0), ls.get("n_group_used", 0)
        if ng > 1 and (ne % ng or not 0 < ngu <= ng or ngu * (ne // ng) < k):
            raise ModelError(f"{p}: {ne} experts in expert_group_count {ng} groups, expert_group_used_count {ngu} "
                             f"of them for {k} experts per token do not fit")
        L.n_group, L.n_group_used = (ng, ngu) if ng > 1 else (0, 0)
        return 0

    cdef const float *_vec(self, arr, Py_ssize_t n, name) except? NULL:
        cdef const float[::1] mv
        if arr is None:
            return NULL
        if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.ndim != 1 or not arr.flags.c_contiguous:
            raise ModelError(f"{name}: expected a contiguous float32 vector")
        if arr.shape[0] != n:
            raise ModelError(f"{name}: expected {n} values, got {arr.shape[0]}")
        self._keep.append(arr)
        mv = arr
        return &mv[0]

    cdef oxl_weight _weight(self, w, name, int64_t rows, int64_t cols, bint may_repack=True) except *:
        cdef oxl_weight out
        cdef const unsigned char[::1] mv
        cdef unsigned char[::1] pv
        cdef int rc, qt, nth = self._repack_threads
        cdef int64_t prow
        cdef const oxl_kernel_table *kt
        data, qtype, wr, wc = w
        if wr != rows or wc != cols:
            raise ModelError(f"{name}: expected shape ({rows}, {cols}), got ({wr}, {wc})")
        t = oxl_type_info(qtype)
        k = oxl_kernels()
        if t == NULL or k.type[qtype].vec_dot == NULL or k.type[qtype].to_float == NULL:
            raise ModelError(f"{name}: tensor type id {qtype} has no kernels")
        need = oxl_row_size(qtype, cols)
        if need < 0:
            raise ModelError(f"{name}: {cols} columns is not a multiple of the type's block size")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or not data.flags.c_contiguous:
            raise ModelError(f"{name}: weight data must be a contiguous uint8 array")
        if data.nbytes != need * rows:
            raise ModelError(f"{name}: expected {need * rows} bytes, got {data.nbytes}")
        self._keep.append(data)
        mv = data.reshape(-1)
        out.data = &mv[0]
        out.type = qtype
        out.rows = rows
        out.cols = cols
        out.packed = NULL
        qt = qtype
        kt = oxl_kernels()
        prow = oxl_repacked_row_size(kt, qt, cols)
        if self._repack and may_repack and prow > 0 and rows > 0:
            key = (<size_t>out.data, qtype, rows, cols)
            packed = self._repacked.get(key)
            if packed is None:
                packed = _weight_buffer(prow * rows)
                pv = packed
                with nogil:
                    rc = oxl_repack(kt, qt, out.data, rows, cols, &pv[0], nth)
                if rc != 0:
                    raise ModelError(f"{name}: repacking failed (code {rc})")
                self._repacked[key] = packed
                _release_file_pages(data)
            self._keep.append(packed)
            pv = packed
            out.packed = &pv[0]
            self.repacked_bytes += packed.nbytes
            self.repacked_layouts[kt.type[qt].name.decode()] = kt.type[qt].repacked.name.decode()
        return out


def _release_file_pages(arr):
    """A repacked matrix's file rows are no longer read by the products: give their pages back (a file
    mapping: they stay in the page cache and come back from the file if anything reads them, such as
    embedding rows of a tied output matrix). Arrays not mapped from a file are left alone."""
    cdef size_t page, start, end, addr
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if not isinstance(base, _mmap.mmap):
        return
    try:
        if not memoryview(base).readonly:
            return   # not a read-only file map (a repacked copy's own anonymous map holds the only copy)
    except ValueError:   # a closed map
        return
    page = <size_t>sysconf(_SC_PAGESIZE)
    addr = <size_t>arr.__array_interface__["data"][0]
    start = (addr + page - 1) // page * page
    end = (addr + <size_t>arr.nbytes) // page * page
    if end > start:
        madvise(<void *>start, end - start, MADV_DONTNEED)   # advice: a failure changes nothing


KV_PAGE = OXL_KV_PAGE   # positions per page of the C forward's KV cache
REPACK_ROW_ALIGN = OXL_REPACK_ROW_ALIGN   # rows per interleaved group of the repacked layouts: experts repack
                                          # where each one is whole groups
LORA_SLOTS = ("q", "k", "v", "o", "gate", "up", "down")   # the order of OXL_LORA_Q .. OXL_LORA_DOWN
LORA_MAX_RANK = OXL_LORA_MAX_RANK


cdef class LoraWeights:
    """One LoRA adapter bound to a ForwardPlan: per (layer, projection) A (rank, cols) and B transposed
    (rank, rows) as contiguous float32 arrays, checked against the plan's weight shapes. `weights` maps
    (layer, slot name) -> (A, B) with B (rows, rank) as adapters store it."""
    cdef oxl_lora_weight *w
    cdef list _keep
    cdef readonly int n_layer

    def __cinit__(self):
        self.w = NULL
        self._keep = []

    def __dealloc__(self):
        free(self.w)

    def __init__(self, ForwardPlan plan, dict weights):
        from oxillama.errors import LoraError
        self.n_layer = plan.n_layer
        self.w = <oxl_lora_weight *>calloc(plan.n_layer * OXL_LORA_SLOTS, sizeof(oxl_lora_weight))
        if self.w == NULL:
            raise MemoryError()
        cdef const float[:, ::1] av
        cdef const float[:, ::1] bv
        cdef const uint16_t[:, ::1] ah
        cdef const uint16_t[:, ::1] bh
        cdef oxl_layer *L
        cdef oxl_weight *target
        for key, ab in weights.items():
            il, slot = key
            if not (isinstance(il, int) and 0 <= il < plan.n_layer) or slot not in LORA_SLOTS:
                raise LoraError(f"no projection {slot!r} in layer {il!r} of a {plan.n_layer}-layer model")
            L = &plan.layers[il]
            if L.kind == OXL_LAYER_MLA and slot in ("q", "k", "v"):
                raise LoraError(f"layer {il} is latent attention (deepseek2): LoRA adapts its attention output "
                                f"and feed-forward projections, not {slot!r}")
            target = NULL
            if slot == "q": target = &L.wq
            elif slot == "k": target = &L.wk
            elif slot == "v": target = &L.wv
            elif slot == "o": target = &L.wo
            elif slot == "gate": target = &L.w_gate
            elif slot == "up": target = &L.w_up
            else: target = &L.w_down
            if target.data == NULL:
                raise LoraError(f"layer {il} has no separate {slot} projection (fused or absent)")
            a, b = ab
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim == 2 and b.ndim == 2):
                raise LoraError(f"layer {il} {slot}: A and B must be 2-D arrays")
            rank = a.shape[0]
            if not 0 < rank <= OXL_LORA_MAX_RANK or b.shape[1] != rank:
                raise LoraError(f"layer {il} {slot}: ranks of A {a.shape} and B {b.shape} disagree or exceed "
                                f"{OXL_LORA_MAX_RANK}")
            if a.shape[1] != target.cols or b.shape[0] != target.rows:
                raise LoraError(f"layer {il} {slot}: A {a.shape} and B {b.shape} do not fit the projection "
                                f"({target.rows}, {target.cols})")
            a32 = np.ascontiguousarray(a, dtype=np.float32)
            bt32 = np.ascontiguousarray(np.asarray(b, dtype=np.float32).T)
            idx = il * OXL_LORA_SLOTS + LORA_SLOTS.index(slot)
            self.w[idx].rank = rank
            # half the bytes read per token where float16 holds every value exactly (an F16 adapter file)
            a16, bt16 = a32.astype(np.float16), bt32.astype(np.float16)
            if np.array_equal(a16.astype(np.float32), a32) and np.array_equal(bt16.astype(np.float32), bt32):
                self._keep += [a16, bt16]
                ah, bh = a16.view(np.uint16), bt16.view(np.uint16)
                self.w[idx].a = &ah[0, 0]
                self.w[idx].bt = &bh[0, 0]
                self.w[idx].type = OXL_TYPE_F16
            else:
                self._keep += [a32, bt32]
                av, bv = a32, bt32
                self.w[idx].a = &av[0, 0]
                self.w[idx].bt = &bv[0, 0]
                self.w[idx].type = OXL_TYPE_F32


cdef class KVBuffers:
    """Per-layer K and V arrays, (n_layer, n_head_kv, n_pages * KV_PAGE, head_dim) float16 or float32, owned by
    numpy: the paged cache the C forward reads (page p of KV head g is rows [p * KV_PAGE, (p + 1) * KV_PAGE) of
    that head). A single sequence uses the pages in order (`identity_pages`), which is the head-major layout."""
    cdef oxl_kv_cache kv
    cdef void **ptrs
    cdef readonly object k, v, identity_pages
    cdef readonly int n_ctx, n_pages, n_layer, n_head_kv, head_dim, kv_dim

    def __cinit__(self):
        self.ptrs = NULL

    def __dealloc__(self):
        free(self.ptrs)

    def __init__(self, k, v):
        if k.shape != v.shape or k.dtype != v.dtype or k.ndim != 4:
            raise ModelError("K and V caches must be 4-D arrays (n_layer, n_head_kv, n_positions, head_dim) of equal "
                             "shape and dtype")
        if k.dtype not in (np.float16, np.float32, np.uint8) or not (k.flags.c_contiguous and v.flags.c_contiguous):
            raise ModelError("K/V caches must be contiguous float16, float32 or uint8 (Q8_0 blocks)")
        if k.dtype == np.uint8 and k.shape[3] % 34:
            raise ModelError(f"a Q8_0 K/V cache row is whole 34-byte blocks, got {k.shape[3]} bytes")
        if min(k.shape) < 1:
            raise ModelError(f"K/V cache shape {k.shape} has an empty dimension")
        if k.shape[2] % OXL_KV_PAGE:
            raise ModelError(f"K/V caches hold whole pages of {OXL_KV_PAGE} positions, got {k.shape[2]} positions")
        self.k, self.v = k, v
        self.n_layer, self.n_head_kv, self.n_ctx, self.head_dim = k.shape
        if k.dtype == np.uint8:
            self.head_dim = self.head_dim // 34 * 32
        self.n_pages = self.n_ctx // OXL_KV_PAGE
        self.kv_dim = self.n_head_kv * self.head_dim
        self.identity_pages = np.arange(self.n_pages, dtype=np.int32)
        self.ptrs = <void **>calloc(2 * self.n_layer, sizeof(void *))
        if self.ptrs == NULL:
            raise MemoryError()
        cdef unsigned char[:, :, :, ::1] kb = k.view(np.uint8)
        cdef unsigned char[:, :, :, ::1] vb = v.view(np.uint8)
        for il in range(self.n_layer):
            self.ptrs[il] = &kb[il, 0, 0, 0]
            self.ptrs[self.n_layer + il] = &vb[il, 0, 0, 0]
        self.kv.type = 1 if k.dtype == np.float16 else 8 if k.dtype == np.uint8 else 0
        self.kv.n_pages = self.n_pages
        self.kv.n_layer = self.n_layer
        self.kv.n_head_kv = self.n_head_kv
        self.kv.head_dim = self.head_dim
        self.kv.k = self.ptrs
        self.kv.v = self.ptrs + self.n_layer


cdef class StateBuffers:
    """The recurrent-state pool the C forward reads beside the KV pages: a float32 array (n_slots,
    slot_floats), numpy-owned, one slot per sequence (oxl_state_pool, csrc/forward.h)."""
    cdef oxl_state_pool pool
    cdef readonly object data
    cdef readonly int n_slots
    cdef readonly int64_t slot_floats

    def __init__(self, data):
        if not isinstance(data, np.ndarray) or data.dtype != np.float32 or data.ndim != 2 \
                or not data.flags.c_contiguous or min(data.shape) < 1:
            raise ModelError("recurrent state must be a contiguous float32 array (n_slots, slot_floats)")
        cdef float[:, ::1] mv = data
        self.data = data
        self.n_slots, self.slot_floats = data.shape
        self.pool.data = &mv[0, 0]
        self.pool.n_slots = self.n_slots
        self.pool.slot_floats = self.slot_floats


_FORWARD_ERRORS = {-1: "the KV cache type is not supported", -3: "a buffer or the context is too small",
                   -4: "out of memory", -5: "a token id, page id or length is invalid"}


cdef class ForwardContext:
    """Scratch memory for forwards of up to n_batch tokens in all over up to n_ctx positions, and the calls
    that run one: `run` (one sequence over the cache's pages in order) and `run_batch` (many sequences, each
    with its own block table). Either is one call into C with the GIL released."""
    cdef ForwardPlan plan
    cdef KVBuffers kv
    cdef StateBuffers state
    cdef void *scratch
    cdef int64_t scratch_size
    cdef oxl_batch_seq *seqs
    cdef oxl_lora *lora_buf
    cdef int lora_cap
    cdef readonly int n_batch, n_threads, n_ctx

    def __cinit__(self):
        self.scratch = NULL
        self.seqs = NULL
        self.lora_buf = NULL
        self.lora_cap = 0

    def __dealloc__(self):
        free(self.scratch)
        free(self.seqs)
        free(self.lora_buf)

    cdef int _set_loras(self, list per_seq) except -1:
        """Point each sequence at its adapters: per_seq[i] is None or a list of (LoraWeights, scale)."""
        cdef int total = 0, i, j = 0
        cdef LoraWeights lw
        for i in range(len(per_seq)):
            total += len(per_seq[i]) if per_seq[i] else 0
        if total > self.lora_cap:
            free(self.lora_buf)
            self.lora_buf = <oxl_lora *>calloc(total, sizeof(oxl_lora))
            if self.lora_buf == NULL:
                self.lora_cap = 0
                raise MemoryError()
            self.lora_cap = total
        for i in range(len(per_seq)):
            self.seqs[i].loras = self.lora_buf + j
            self.seqs[i].n_loras = 0
            for item in per_seq[i] or ():
                lw, scale = item
                if lw.n_layer != self.plan.n_layer:
                    raise ModelError("a LoRA adapter bound to another model")
                self.lora_buf[j].w = lw.w
                self.lora_buf[j].scale = scale
                self.seqs[i].n_loras += 1
                j += 1
        return 0

    def __init__(self, ForwardPlan plan, KVBuffers kv, int n_batch, int n_threads, n_ctx=None,
                 StateBuffers state=None):
        """state: the recurrent-state pool, needed by a plan with recurrent layers (plan.state_floats > 0)."""
        if plan.state_floats > 0 and (state is None or state.slot_floats < plan.state_floats):
            raise ModelError(f"the model's recurrent layers need a state pool of >= {plan.state_floats} floats per "
                             f"slot, got {None if state is None else state.slot_floats}")
        self.state = state
        if (kv.n_layer, kv.n_head_kv, kv.head_dim) != (plan.n_kv_layer, plan.n_head_kv, plan.head_dim):
            raise ModelError(f"KV cache layout ({kv.n_layer} layers, {kv.n_head_kv} KV heads of {kv.head_dim}) does "
                             f"not match the model's ({plan.n_kv_layer} attention layers, {plan.n_head_kv} KV heads of "
                             f"{plan.head_dim})")
        if n_batch < 1 or n_threads < 1:
            raise ModelError("n_batch and n_threads must be >= 1")
        self.n_ctx = kv.n_ctx if n_ctx is None else n_ctx
        if self.n_ctx < 1:
            raise ModelError(f"n_ctx must be >= 1, got {n_ctx}")
        self.plan, self.kv = plan, kv
        self.n_batch, self.n_threads = n_batch, n_threads
        self.scratch_size = oxl_forward_scratch_size(&plan.model, n_batch, self.n_ctx, n_threads)
        if self.scratch_size < 0:
            raise ModelError("cannot size the forward's scratch memory")
        self.scratch = calloc(self.scratch_size, 1)
        self.seqs = <oxl_batch_seq *>calloc(n_batch, sizeof(oxl_batch_seq))
        if self.scratch == NULL or self.seqs == NULL:
            raise MemoryError()

    @property
    def scratch_bytes(self):
        return self.scratch_size

    cdef _call(self, int n_seqs, float *lp, float *hp):
        cdef int rc
        cdef const oxl_state_pool *sp = &self.state.pool if self.state is not None else NULL
        with nogil:
            rc = oxl_forward_batch(&self.plan.model, &self.kv.kv, sp, self.seqs, n_seqs, lp, hp, self.scratch,
                                   self.scratch_size, self.n_threads)
        if rc != 0:
            raise ModelError(f"forward failed: {_FORWARD_ERRORS.get(rc, 'error')} (code {rc})")

    def run(self, const int32_t[::1] tokens, int pos0, float[::1] logits=None, bint all_logits=False,
            float[::1] hidden=None, list loras=None, int state_slot=0):
        """Run tokens at positions pos0.. of the single sequence that uses the pages in order; logits
        (n_vocab,) or (n * n_vocab,) if all_logits. loras: (LoraWeights, scale) pairs applied to it.
        state_slot: its recurrent state's slot (recurrent models; pos0 = 0 starts from the zero state)."""
        cdef int n = tokens.shape[0]
        cdef float *lp = NULL
        cdef float *hp = NULL
        cdef const int32_t[::1] pages = self.kv.identity_pages
        if n < 1 or n > self.n_batch:
            raise ModelError(f"a forward takes 1..{self.n_batch} tokens, got {n}")
        if pos0 < 0 or pos0 + n > min(self.kv.n_ctx, self.n_ctx):
            raise ContextOverflowError(f"positions {pos0}..{pos0 + n - 1} do not fit the context of "
                                       f"{min(self.kv.n_ctx, self.n_ctx)}")
        if logits is not None:
            if logits.shape[0] != (n if all_logits else 1) * self.plan.n_vocab:
                raise ModelError(f"logits buffer has {logits.shape[0]} values, need "
                                 f"{(n if all_logits else 1) * self.plan.n_vocab}")
            lp = &logits[0]
        if hidden is not None:
            if hidden.shape[0] != n * self.plan.n_embd:
                raise ModelError(f"hidden buffer has {hidden.shape[0]} values, need {n * self.plan.n_embd}")
            hp = &hidden[0]
        for i in range(n):
            if tokens[i] < 0 or tokens[i] >= self.plan.n_vocab:
                raise ModelError(f"token id {tokens[i]} is outside the vocabulary (0..{self.plan.n_vocab - 1})")
        self.seqs[0].tokens = &tokens[0]
        self.seqs[0].n_tokens = n
        self.seqs[0].pos0 = pos0
        self.seqs[0].pages = &pages[0]
        self.seqs[0].n_blocks = pages.shape[0]
        self.seqs[0].all_logits = all_logits
        self.seqs[0].state_slot = self._slot(state_slot)
        self._set_loras([loras])
        self._call(1, lp, hp)

    cdef int _slot(self, slot) except -1:
        if self.state is None:
            return 0
        if not 0 <= slot < self.state.n_slots:
            raise ModelError(f"recurrent state slot {slot} is outside the pool's {self.state.n_slots}")
        return slot

    def run_batch(self, list tokens, list pos0, list pages, list all_logits, float[::1] logits, list loras=None,
                  list state_slots=None):
        """One step for many sequences: tokens[i] (int32 array) at positions pos0[i].. of the sequence whose
        block table is pages[i] (int32 page ids); logits (n_out * n_vocab,) gets, sequence by sequence, every
        token's logits where all_logits[i] is true, else its last token's; loras[i] (if given): sequence i's
        (LoraWeights, scale) pairs; state_slots[i] (recurrent models): sequence i's state slot, each at most once.
        The caller keeps page ids within the pool and pages written by one sequence unshared."""
        cdef int n_seqs = len(tokens)
        cdef int i, n, total = 0, n_out = 0
        cdef const int32_t[::1] tv
        cdef const int32_t[::1] pv
        if n_seqs < 1 or not (len(pos0) == len(pages) == len(all_logits) == n_seqs):
            raise ModelError("run_batch needs one tokens array, pos0, block table and all_logits per sequence")
        for i in range(n_seqs):
            tv = tokens[i]
            pv = pages[i]
            n = tv.shape[0]
            if n < 1 or pos0[i] < 0 or pv.shape[0] < 1:
                raise ModelError(f"sequence {i}: needs >= 1 token, pos0 >= 0 and a block table")
            if pos0[i] + n > self.n_ctx or pos0[i] + n > pv.shape[0] * OXL_KV_PAGE:
                raise ContextOverflowError(f"sequence {i}: positions {pos0[i]}..{pos0[i] + n - 1} do not fit its "
                                           f"{pv.shape[0]} pages or the context of {self.n_ctx}")
            total += n
            if total > self.n_batch:
                raise ModelError(f"a step takes at most {self.n_batch} tokens in all")
            n_out += n if all_logits[i] else 1
            self.seqs[i].tokens = &tv[0]
            self.seqs[i].n_tokens = n
            self.seqs[i].pos0 = pos0[i]
            self.seqs[i].pages = &pv[0]
            self.seqs[i].n_blocks = pv.shape[0]
            self.seqs[i].all_logits = bool(all_logits[i])
            self.seqs[i].state_slot = self._slot(state_slots[i] if state_slots is not None else i)
        if self.state is not None and len(set(state_slots if state_slots is not None else range(n_seqs))) < n_seqs:
            raise ModelError("run_batch: a recurrent state slot appears twice in one step")
        if logits.shape[0] != n_out * self.plan.n_vocab:
            raise ModelError(f"logits buffer has {logits.shape[0]} values, need {n_out * self.plan.n_vocab}")
        if loras is not None and len(loras) != n_seqs:
            raise ModelError("run_batch needs one LoRA list (or None) per sequence")
        self._set_loras(loras if loras is not None else [None] * n_seqs)
        self._call(n_seqs, &logits[0], NULL)
