"""Make the tiny random recurrent models and their transformers goldens in tests/models/data/ (run once; needs
torch and transformers):

    python tests/models/make_ssm_models.py            # every model
    python tests/models/make_ssm_models.py mamba2
    python tests/models/make_ssm_models.py llamacpp   # llama.cpp's logits on the files (llama-cpp-python)

For each: a transformers model with small dims and the features that matter (several heads per group, more
than one group, a conv kernel of 4, the gated grouped RMS norm), weights drawn with a fixed seed, written as
GGUF in llama.cpp's layout (convert_hf_to_gguf.py's Mamba2Model: A = -exp(A_log), conv1d squeezed to
(conv_dim, d_conv), ssm_norm as (n_group, d_inner / n_group), dt_bias as ssm_dt.bias), and the float32 logits
transformers computes for TOKENS (its chunked SSD scan: a different summation order from ours) saved as
<name>.npz. The tests (test_ssm.py) only read these files.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

N_VOCAB = 288
N_TOKENS = 80          # five prefill chunks of 16 in the tests
SEED = 4321

MAMBA2 = dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=3, num_heads=8, head_dim=16, expand=2,
              state_size=16, n_groups=2, conv_kernel=4, layer_norm_epsilon=1e-5, use_conv_bias=True, use_bias=False,
              tie_word_embeddings=False, chunk_size=32, bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1,
              pad_token_id=0)


def tokens() -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, N_VOCAB - 2, size=N_TOKENS).astype(np.int64)


def randomize(model, torch, seed: int) -> None:
    """Matrices ~ N(0, 1/fan_in), embeddings N(0, 1), norms around 1, conv weights and biases of a useful
    scale, dt biases so that softplus(dt) spans fast and slow decay, D around 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.linspace(0.5, 8.0, p.numel())) + torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("dt_bias"):
                p.copy_(torch.linspace(-4.0, 1.0, p.numel()) + torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith(".D"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            elif "conv1d.weight" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif p.ndim == 2:
                std = 1.0 if "embed" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight") or "layernorm" in name:
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            else:   # biases
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def _np(t) -> np.ndarray:
    return np.ascontiguousarray(t.detach().float().numpy())


def mamba2_mixer_tensors(prefix: str, mixer, cfg) -> dict:
    """One Mamba-2 mixer's GGUF tensors (numpy shapes: ggml's reversed) from transformers' module."""
    d_inner = cfg.expand * cfg.hidden_size
    return {
        prefix + "ssm_in.weight": _np(mixer.in_proj.weight),
        prefix + "ssm_conv1d.weight": _np(mixer.conv1d.weight).reshape(mixer.conv1d.weight.shape[0], -1),
        prefix + "ssm_conv1d.bias": _np(mixer.conv1d.bias),
        prefix + "ssm_dt.bias": _np(mixer.dt_bias),
        prefix + "ssm_a": -np.exp(_np(mixer.A_log)).reshape(-1, 1),
        prefix + "ssm_d": _np(mixer.D).reshape(-1, 1),
        prefix + "ssm_norm.weight": _np(mixer.norm.weight).reshape(cfg.n_groups, d_inner // cfg.n_groups),
        prefix + "ssm_out.weight": _np(mixer.out_proj.weight),
    }


def write_gguf(path: str, arch: str, metadata: dict, tensors: dict) -> None:
    from oxillama.convert.hf import _minimal_vocab
    from oxillama.gguf import GGUFWriter
    w = GGUFWriter(path)
    w.add_metadata("general.architecture", arch)
    w.add_metadata("general.name", f"tiny-{arch}")
    for key, value in metadata.items():
        is_int = isinstance(value, int) and not isinstance(value, bool)
        w.add_metadata(f"{arch}.{key}" if not key.startswith("general.") else key, value,
                       type="UINT32" if is_int else None)   # llama.cpp reads integer keys as UINT32
    for key, value in _minimal_vocab(N_VOCAB).items():
        w.add_metadata(key, value)
    for name, data in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32), qtype="F32")
    w.write()


def make_mamba2() -> None:
    import torch
    import transformers
    cfg = transformers.Mamba2Config(**MAMBA2)
    torch.manual_seed(SEED)
    model = transformers.Mamba2ForCausalLM(cfg).float().eval()
    randomize(model, torch, SEED)
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    d_inner = cfg.expand * cfg.hidden_size
    meta = {"context_length": 1 << 20, "embedding_length": cfg.hidden_size, "feed_forward_length": 0,
            "attention.head_count": 0, "block_count": cfg.num_hidden_layers, "ssm.conv_kernel": cfg.conv_kernel,
            "ssm.inner_size": d_inner, "ssm.state_size": cfg.state_size, "ssm.time_step_rank": cfg.num_heads,
            "ssm.group_count": cfg.n_groups, "attention.layer_norm_rms_epsilon": float(cfg.layer_norm_epsilon)}
    bb = model.backbone
    tensors = {"token_embd.weight": _np(bb.embeddings.weight), "output_norm.weight": _np(bb.norm_f.weight),
               "output.weight": _np(model.lm_head.weight)}
    for il, layer in enumerate(bb.layers):
        tensors[f"blk.{il}.attn_norm.weight"] = _np(layer.norm.weight)
        tensors.update(mamba2_mixer_tensors(f"blk.{il}.", layer.mixer, cfg))
    os.makedirs(DATA, exist_ok=True)
    write_gguf(os.path.join(DATA, "mamba2.gguf"), "mamba2", meta, tensors)
    np.savez_compressed(os.path.join(DATA, "mamba2.npz"), tokens=ids.astype(np.int32), logits=logits.astype(np.float32))
    with open(os.path.join(DATA, "mamba2.json"), "w", encoding="utf-8") as f:
        json.dump({"config": "Mamba2Config", "overrides": MAMBA2, "transformers": transformers.__version__,
                   "torch": torch.__version__}, f, indent=1, sort_keys=True)
    print(f"mamba2: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


GRANITE = dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=40,
               layer_types=["mamba", "mamba", "attention", "mamba"], mamba_n_heads=8, mamba_n_groups=2,
               mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=32, embedding_multiplier=2.0,
               logits_scaling=4.0, residual_multiplier=0.5, attention_multiplier=0.1, position_embedding_type=None,
               rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=256,
               bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1, pad_token_id=0)


def make_granitehybrid() -> None:
    """Granite 4.0-H's layout (convert_hf_to_gguf.py's GraniteHybridModel): Mamba-2 blocks and one attention block
    (NoPE), each followed by 4 experts (2 used) and a shared expert; every Granite multiplier away from 1."""
    import torch
    import transformers
    cfg = transformers.GraniteMoeHybridConfig(**GRANITE)
    torch.manual_seed(SEED)
    model = transformers.GraniteMoeHybridForCausalLM(cfg).float().eval()
    randomize(model, torch, SEED + 1)
    with torch.no_grad():   # the experts' stacked weights are 3-D: N(0, 1/fan_in) as the matrices
        g = torch.Generator().manual_seed(SEED + 2)
        for layer in model.model.layers:
            ex = layer.block_sparse_moe.experts
            ex.gate_up_proj.copy_(torch.randn(ex.gate_up_proj.shape, generator=g) * ex.gate_up_proj.shape[2] ** -0.5)
            ex.down_proj.copy_(torch.randn(ex.down_proj.shape, generator=g) * ex.down_proj.shape[2] ** -0.5)
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    d_inner = cfg.mamba_expand * cfg.hidden_size
    kinds = cfg.layers_block_type
    ff, sff = cfg.intermediate_size, cfg.shared_intermediate_size
    meta = {"context_length": 1 << 20, "embedding_length": cfg.hidden_size, "feed_forward_length": ff,
            "attention.head_count": cfg.num_attention_heads,
            "attention.head_count_kv": np.array([0 if k == "linear_attention" else cfg.num_key_value_heads
                                                 for k in kinds], dtype=np.uint32),
            "block_count": cfg.num_hidden_layers, "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
            "expert_count": cfg.num_local_experts, "expert_used_count": cfg.num_experts_per_tok,
            "expert_shared_feed_forward_length": sff, "attention.scale": float(cfg.attention_multiplier),
            "embedding_scale": float(cfg.embedding_multiplier), "residual_scale": float(cfg.residual_multiplier),
            "logit_scale": float(cfg.logits_scaling), "rope.scaling.finetuned": False,
            "ssm.conv_kernel": cfg.mamba_d_conv, "ssm.inner_size": d_inner, "ssm.state_size": cfg.mamba_d_state,
            "ssm.time_step_rank": cfg.mamba_n_heads, "ssm.group_count": cfg.mamba_n_groups}
    m = model.model
    tensors = {"token_embd.weight": _np(m.embed_tokens.weight), "output_norm.weight": _np(m.norm.weight),
               "output.weight": _np(model.lm_head.weight)}
    mcfg = type("C", (), {"expand": cfg.mamba_expand, "hidden_size": cfg.hidden_size, "n_groups": cfg.mamba_n_groups})
    for il, layer in enumerate(m.layers):
        p = f"blk.{il}."
        tensors[p + "attn_norm.weight"] = _np(layer.input_layernorm.weight)
        if layer.mamba is not None:
            tensors.update(mamba2_mixer_tensors(p, layer.mamba, mcfg))
        else:
            at = layer.self_attn
            tensors.update({p + "attn_q.weight": _np(at.q_proj.weight), p + "attn_k.weight": _np(at.k_proj.weight),
                            p + "attn_v.weight": _np(at.v_proj.weight),
                            p + "attn_output.weight": _np(at.o_proj.weight)})
        tensors[p + "ffn_norm.weight"] = _np(layer.post_attention_layernorm.weight)
        moe = layer.block_sparse_moe
        gu = _np(moe.experts.gate_up_proj)
        tensors.update({p + "ffn_gate_inp.weight": _np(moe.router.weight),
                        p + "ffn_gate_exps.weight": np.ascontiguousarray(gu[:, :ff]),
                        p + "ffn_up_exps.weight": np.ascontiguousarray(gu[:, ff:]),
                        p + "ffn_down_exps.weight": _np(moe.experts.down_proj)})
        sh = _np(layer.shared_mlp.input_linear.weight)
        tensors.update({p + "ffn_gate_shexp.weight": np.ascontiguousarray(sh[:sff]),
                        p + "ffn_up_shexp.weight": np.ascontiguousarray(sh[sff:]),
                        p + "ffn_down_shexp.weight": _np(layer.shared_mlp.output_linear.weight)})
    write_gguf(os.path.join(DATA, "granitehybrid.gguf"), "granitehybrid", meta, tensors)
    np.savez_compressed(os.path.join(DATA, "granitehybrid.npz"), tokens=ids.astype(np.int32),
                        logits=logits.astype(np.float32))
    with open(os.path.join(DATA, "granitehybrid.json"), "w", encoding="utf-8") as f:
        json.dump({"config": "GraniteMoeHybridConfig", "overrides": GRANITE, "transformers": transformers.__version__,
                   "torch": torch.__version__}, f, indent=1, sort_keys=True)
    print(f"granitehybrid: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


BAMBA = dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, attn_layer_indices=[2], mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2,
             mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=32, rms_norm_eps=1e-5,
             tie_word_embeddings=False, max_position_embeddings=256, bos_token_id=N_VOCAB - 2,
             eos_token_id=N_VOCAB - 1, pad_token_id=0)


def permute_for_norm_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows [first half | second half] interleaved, so that
    llama.cpp's adjacent-pair (NORM) RoPE rotates what transformers' rotate_half rotates (over the whole head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_bamba() -> None:
    """Bamba (BambaForCausalLM), which llama.cpp converts as granitehybrid (GraniteHybridModel): Mamba-2 blocks and
    one attention block with RoPE (rope.scaling.finetuned true, Q and K rows permuted for NORM RoPE over the whole
    head), a dense SwiGLU FFN after every block, no Granite multipliers. transformers' Bamba rotates only half of
    each head (partial_rotary_factor 0.5, fixed); llama.cpp's converter writes that as rope.dimension_count where
    the config has attn_rotary_emb (Bamba-9B's: 64 of 128)."""
    import torch
    import transformers
    cfg = transformers.BambaConfig(**BAMBA)
    torch.manual_seed(SEED)
    model = transformers.BambaForCausalLM(cfg).float().eval()
    randomize(model, torch, SEED + 3)
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    d_inner = cfg.mamba_expand * cfg.hidden_size
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    n_rot = int(head_dim * cfg.rope_parameters["partial_rotary_factor"])
    kinds = ["attention" if il in cfg.attn_layer_indices else "mamba" for il in range(cfg.num_hidden_layers)]
    meta = {"context_length": cfg.max_position_embeddings, "embedding_length": cfg.hidden_size,
            "feed_forward_length": cfg.intermediate_size, "attention.head_count": cfg.num_attention_heads,
            "attention.head_count_kv": np.array([cfg.num_key_value_heads if k == "attention" else 0 for k in kinds],
                                                dtype=np.uint32),
            "block_count": cfg.num_hidden_layers, "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
            "rope.freq_base": float(cfg.rope_parameters["rope_theta"]), "rope.dimension_count": n_rot,
            "rope.scaling.finetuned": True,
            "ssm.conv_kernel": cfg.mamba_d_conv, "ssm.inner_size": d_inner, "ssm.state_size": cfg.mamba_d_state,
            "ssm.time_step_rank": cfg.mamba_n_heads, "ssm.group_count": cfg.mamba_n_groups}
    m = model.model
    tensors = {"token_embd.weight": _np(m.embed_tokens.weight), "output_norm.weight": _np(m.final_layernorm.weight),
               "output.weight": _np(model.lm_head.weight)}
    mcfg = type("C", (), {"expand": cfg.mamba_expand, "hidden_size": cfg.hidden_size, "n_groups": cfg.mamba_n_groups})
    for il, layer in enumerate(m.layers):
        p = f"blk.{il}."
        tensors[p + "attn_norm.weight"] = _np(layer.input_layernorm.weight)
        if kinds[il] == "mamba":
            tensors.update(mamba2_mixer_tensors(p, layer.mamba, mcfg))
        else:
            at = layer.self_attn
            tensors.update({p + "attn_q.weight": permute_for_norm_rope(_np(at.q_proj.weight), cfg.num_attention_heads),
                            p + "attn_k.weight": permute_for_norm_rope(_np(at.k_proj.weight), cfg.num_key_value_heads),
                            p + "attn_v.weight": _np(at.v_proj.weight),
                            p + "attn_output.weight": _np(at.o_proj.weight)})
        tensors[p + "ffn_norm.weight"] = _np(layer.pre_ff_layernorm.weight)
        ff = layer.feed_forward
        tensors.update({p + "ffn_gate.weight": _np(ff.gate_proj.weight), p + "ffn_up.weight": _np(ff.up_proj.weight),
                        p + "ffn_down.weight": _np(ff.down_proj.weight)})
    write_gguf(os.path.join(DATA, "bamba.gguf"), "granitehybrid", meta, tensors)
    np.savez_compressed(os.path.join(DATA, "bamba.npz"), tokens=ids.astype(np.int32), logits=logits.astype(np.float32))
    with open(os.path.join(DATA, "bamba.json"), "w", encoding="utf-8") as f:
        json.dump({"config": "BambaConfig", "overrides": BAMBA, "transformers": transformers.__version__,
                   "torch": torch.__version__}, f, indent=1, sort_keys=True)
    print(f"bamba: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


NEMOTRON_H = dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
                  layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, mamba_num_heads=8, mamba_head_dim=16,
                  n_groups=2, ssm_state_size=16, conv_kernel=4, chunk_size=32, layer_norm_epsilon=1e-5,
                  use_conv_bias=True, mlp_bias=True, tie_word_embeddings=False, max_position_embeddings=256,
                  bos_token_id=N_VOCAB - 2, eos_token_id=N_VOCAB - 1, pad_token_id=0)


def make_nemotron_h() -> None:
    """Nemotron-H (NemotronHForCausalLM) in llama.cpp's nemotron_h layout (convert_hf_to_gguf.py's NemotronHModel):
    Mamba-2, MLP (relu^2, with biases), attention (NoPE, GQA; Q and K rows permuted as the converter does), Mamba-2,
    MLP blocks, each one mixer and a residual; the kinds from attention.head_count_kv and feed_forward_length, one
    value per block."""
    import torch
    import transformers
    cfg = transformers.NemotronHConfig(**NEMOTRON_H)
    torch.manual_seed(SEED)
    model = transformers.NemotronHForCausalLM(cfg).float().eval()
    randomize(model, torch, SEED + 5)
    ids = tokens()
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)[None], use_cache=False).logits[0].float().numpy()
    kinds = cfg.layers_block_type
    d_inner = cfg.mamba_num_heads * cfg.mamba_head_dim
    meta = {"context_length": cfg.max_position_embeddings, "embedding_length": cfg.hidden_size,
            "feed_forward_length": np.array([cfg.intermediate_size if k == "mlp" else 0 for k in kinds], np.uint32),
            "attention.head_count": cfg.num_attention_heads,
            "attention.head_count_kv": np.array([cfg.num_key_value_heads if k == "full_attention" else 0
                                                 for k in kinds], np.uint32),
            "attention.key_length": cfg.head_dim, "attention.value_length": cfg.head_dim,
            "block_count": cfg.num_hidden_layers, "attention.layer_norm_epsilon": float(cfg.layer_norm_epsilon),
            "attention.layer_norm_rms_epsilon": float(cfg.layer_norm_epsilon),
            "ssm.conv_kernel": cfg.conv_kernel, "ssm.inner_size": d_inner, "ssm.state_size": cfg.ssm_state_size,
            "ssm.time_step_rank": cfg.mamba_num_heads, "ssm.group_count": cfg.n_groups}
    m = model.model
    tensors = {"token_embd.weight": _np(m.embeddings.weight), "output_norm.weight": _np(m.norm_f.weight),
               "output.weight": _np(model.lm_head.weight)}
    mcfg = type("C", (), {"expand": d_inner // cfg.hidden_size, "hidden_size": cfg.hidden_size,
                          "n_groups": cfg.n_groups})
    for il, layer in enumerate(m.layers):
        p, mx = f"blk.{il}.", layer.mixer
        tensors[p + "attn_norm.weight"] = _np(layer.norm.weight)
        if kinds[il] == "linear_attention":
            tensors.update(mamba2_mixer_tensors(p, mx, mcfg))
        elif kinds[il] == "full_attention":
            tensors.update({p + "attn_q.weight": permute_for_norm_rope(_np(mx.q_proj.weight), cfg.num_attention_heads),
                            p + "attn_k.weight": permute_for_norm_rope(_np(mx.k_proj.weight), cfg.num_key_value_heads),
                            p + "attn_v.weight": _np(mx.v_proj.weight),
                            p + "attn_output.weight": _np(mx.o_proj.weight)})
        else:
            tensors.update({p + "ffn_up.weight": _np(mx.up_proj.weight), p + "ffn_up.bias": _np(mx.up_proj.bias),
                            p + "ffn_down.weight": _np(mx.down_proj.weight),
                            p + "ffn_down.bias": _np(mx.down_proj.bias)})
    write_gguf(os.path.join(DATA, "nemotron_h.gguf"), "nemotron_h", meta, tensors)
    np.savez_compressed(os.path.join(DATA, "nemotron_h.npz"), tokens=ids.astype(np.int32),
                        logits=logits.astype(np.float32))
    with open(os.path.join(DATA, "nemotron_h.json"), "w", encoding="utf-8") as f:
        json.dump({"config": "NemotronHConfig", "overrides": NEMOTRON_H, "transformers": transformers.__version__,
                   "torch": torch.__version__}, f, indent=1, sort_keys=True)
    print(f"nemotron_h: logits {logits.shape}, |logit| max {np.abs(logits).max():.2f}, std {logits.std():.3f}")


def make_llama_cpp_goldens() -> None:
    """llama.cpp's logits on the committed files (llama-cpp-python, F32 KV cache, one prefill of the tokens), with
    each file's sha256: data/ssm_llamacpp.npz, read by test_ssm.py so the suite needs no llama.cpp."""
    import hashlib

    import llama_cpp
    out = {}
    for name in ("mamba2", "granitehybrid", "nemotron_h"):   # (not bamba: llama.cpp rotates its heads otherwise)
        path = os.path.join(DATA, f"{name}.gguf")
        g = np.load(os.path.join(DATA, f"{name}.npz"))
        model = llama_cpp.Llama(path, n_ctx=128, n_batch=128, logits_all=True, verbose=False, n_threads=1,
                                type_k=0, type_v=0)
        model.eval(g["tokens"].tolist())
        logits = np.array(model.scores[:len(g["tokens"])], dtype=np.float32)
        with open(path, "rb") as f:
            out[f"{name}/sha256"] = np.array(hashlib.sha256(f.read()).hexdigest())
        out[f"{name}/logits"] = logits
        err = np.abs(logits - g["logits"]).max() / g["logits"].std()
        print(f"{name}: max |llama.cpp - transformers| / std {err:.2e}")
    out["llama_cpp_version"] = np.array(llama_cpp.__version__)
    np.savez_compressed(os.path.join(DATA, "ssm_llamacpp.npz"), **out)


MODELS = {"mamba2": make_mamba2, "granitehybrid": make_granitehybrid, "bamba": make_bamba,
          "nemotron_h": make_nemotron_h, "llamacpp": make_llama_cpp_goldens}

if __name__ == "__main__":
    for n in sys.argv[1:] or list(MODELS):
        MODELS[n]()
