"""Make the tiny random encoder models and their goldens in tests/models/data/ (run once; needs torch,
transformers and llama.cpp's convert_hf_to_gguf.py, e.g. from the llama-cpp-python sdist):

    LLAMA_CPP=/path/to/llama.cpp python tests/models/make_encoder_models.py

bert: a transformers BertModel with small dims (2 layers, 4 heads of 16, FFN 128, 96 positions, 2 token types),
every weight drawn with a fixed seed, and a WordPiece vocabulary written for the purpose (lowercasing, accents
stripped, continuation pieces, punctuation, a CJK character), saved as a sentence-transformers checkpoint with
mean pooling and converted to GGUF by llama.cpp's own converter (so names, the phantom-space vocabulary and the
metadata are llama.cpp's). Goldens in bert.npz: transformers' last_hidden_state (float32, token types 0, no
padding) for TOKEN_SETS; bert.tokens.json: llama.cpp's tokenization (llama-cpp-python, vocab_only) of TEXTS.
nomic-bert: nomic-embed-text's block (transformers has no class for it; its remote code NomicBertModel is
restated in numpy below from its definition: emb_ln after word + token-type embeddings, Wqkv without bias,
rotary over halves (base 1000), out_proj, norm1 after the residual, fc11 * silu(fc12) -> fc2, norm2 after
the residual), random weights written in llama.cpp's nomic-bert GGUF layout (convert_hf_to_gguf.py's
NomicBertModel names: attn_qkv, ffn_up = fc11, ffn_gate = fc12) with the bert vocabulary and cls pooling;
nomic-bert.npz: the numpy reference's hidden states (float64) for TOKEN_SETS.
<name>.llama_cpp.json: llama-cpp-python's pooled (unnormalised) embeddings of EMBED_TEXTS, a second opinion.
The tests (test_encoders.py) only read these files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "encoders")   # apart from the decoders the other tests sweep
SEED = 2468

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "a", "an", "cat", "dog", "sat", "on", "mat", "hello", "world", "token", "embed", "model", "is",
         "of", "and", "to", "in", "it", "un", "able", "play", "run", "cafe", "naive", "over", "lazy", "fox", "jump",
         "quick", "brown", "bert", "llama", "new", "york", "city", "data", "base", "12", "2024"]
PIECES = ["##s", "##ing", "##ed", "##able", "##er", "##ly", "##ize", "##ation", "##ab", "##base", "##e", "##ment"]
PUNCT = list(".,!?;:'\"()[]-_/@#$%&*+=<>`~^|\\{}") + ["中", "文", "é"]
CHARS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
VOCAB = SPECIALS + WORDS + PIECES + PUNCT + CHARS + ["##" + c for c in CHARS]

BERT = dict(vocab_size=len(VOCAB), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=96, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)

TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "unplayable", "Café naïve résumé",
         "New York City, 2024", "中文 and data", "  spaces\tand\nnewlines  ", "UNKNOWN zzzq", "a-b_c/d@e", "",
         "token embeddings: the model's [CLS] text", "x" * 30, "ωmega ω z"]


NOMIC = dict(n_embd=64, n_head=4, n_inner=96, n_layer=2, rotary_base=1000.0, eps=1e-12, n_ctx=2048)
EMBED_TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "中文 and data"]


def token_sets(n_vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    return [np.array([2] + list(rng.integers(5, n_vocab, size=n - 2)) + [3], dtype=np.int64) for n in (3, 17, 70)]


def randomize(model, torch, seed: int) -> None:
    """Matrices ~ N(0, 1/fan_in), embeddings N(0, 1), norms around 1, biases of a useful scale."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                std = 1.0 if "embeddings" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "LayerNorm.weight" in name or "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def convert(model_dir: str, out: str) -> None:
    """llama.cpp's converter, its tokenizer-hash check told this hand-made vocabulary is bge's WordPiece."""
    root = os.environ.get("LLAMA_CPP") or next(
        r for r, _, fs in os.walk("/work/sdist") if "convert_hf_to_gguf.py" in fs and ".git" not in r)
    code = ("import sys; sys.path[:0] = [%r, %r]\n"
            "from conversion.base import TextModel\n"
            "TextModel.get_vocab_base_pre = lambda self, tokenizer: 'bert-bge'\n"
            "import convert_hf_to_gguf as c\n"
            "sys.argv = ['convert', %r, '--outtype', 'f32', '--outfile', %r]\n"
            "c.main()\n") % (root, os.path.join(root, "gguf-py"), model_dir, out)
    subprocess.run([sys.executable, "-c", code], check=True)


def make_bert() -> None:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(VOCAB) + "\n")
        tok = BertTokenizerFast(os.path.join(tmp, "vocab.txt"), do_lower_case=True)
        model = BertModel(BertConfig(**BERT), add_pooling_layer=False).eval()
        randomize(model, torch, SEED)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        with open(os.path.join(tmp, "modules.json"), "w") as f:
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], f)
        os.makedirs(os.path.join(tmp, "1_Pooling"))
        with open(os.path.join(tmp, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": BERT["hidden_size"], "pooling_mode_mean_tokens": True}, f)
        out = os.path.join(DATA, "bert.gguf")
        convert(tmp, out)
        hidden = {}
        with torch.no_grad():
            for i, ids in enumerate(token_sets(len(VOCAB))):
                t = torch.tensor(ids)[None]
                h = model(input_ids=t, token_type_ids=torch.zeros_like(t)).last_hidden_state[0]
                hidden[f"tokens{i}"] = ids.astype(np.int32)
                hidden[f"hidden{i}"] = h.float().numpy()
        np.savez_compressed(os.path.join(DATA, "bert.npz"), **hidden)
        hf_ids = {t: tok(t)["input_ids"] for t in TEXTS}
    from llama_cpp import Llama
    llm = Llama(out, vocab_only=True, verbose=False)
    goldens = [{"text": t, "llama_cpp": llm.tokenize(t.encode(), add_bos=True, special=False),
                "transformers": hf_ids[t]} for t in TEXTS]
    with open(os.path.join(DATA, "bert.tokens.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)


def nomic_weights(n_vocab: int) -> dict:
    """GGUF name -> float32 array (numpy shapes: rows = outputs), drawn with a fixed seed."""
    rng = np.random.default_rng(SEED + 1)
    d, ff = NOMIC["n_embd"], NOMIC["n_inner"]

    def mat(rows, cols, std=None):
        return (rng.standard_normal((rows, cols)) * (cols ** -0.5 if std is None else std)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32), (0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": mat(n_vocab, d, 1.0), "token_types.weight": mat(2, d, 1.0)}
    w["token_embd_norm.weight"], w["token_embd_norm.bias"] = norm(d)
    for il in range(NOMIC["n_layer"]):
        p = f"blk.{il}."
        w[p + "attn_qkv.weight"] = mat(3 * d, d)
        w[p + "attn_output.weight"] = mat(d, d)
        w[p + "attn_output_norm.weight"], w[p + "attn_output_norm.bias"] = norm(d)
        w[p + "ffn_up.weight"] = mat(ff, d)       # fc11
        w[p + "ffn_gate.weight"] = mat(ff, d)     # fc12
        w[p + "ffn_down.weight"] = mat(d, ff)     # fc2
        w[p + "layer_output_norm.weight"], w[p + "layer_output_norm.bias"] = norm(d)
    return w


def nomic_reference(w: dict, ids: np.ndarray) -> np.ndarray:
    """NomicBertModel's last hidden state (prenorm=False, swiglu, rotary non-interleaved), float64."""
    d, nh = NOMIC["n_embd"], NOMIC["n_head"]
    hd, eps = d // nh, NOMIC["eps"]
    f = {k: v.astype(np.float64) for k, v in w.items()}

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * f[name + ".weight"] + f[name + ".bias"]

    n = len(ids)
    x = ln(f["token_embd.weight"][ids] + f["token_types.weight"][0], "token_embd_norm")
    inv = 1.0 / NOMIC["rotary_base"] ** (np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None, :]                  # (n, hd / 2)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rotary(t):                                              # (n, nh, hd): halves rotated
        a, b = t[..., :hd // 2], t[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    for il in range(NOMIC["n_layer"]):
        p = f"blk.{il}."
        qkv = x @ f[p + "attn_qkv.weight"].T
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, nh, hd) for i in range(3))
        q, k = rotary(q), rotary(k)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", s, v).reshape(n, d) @ f[p + "attn_output.weight"].T
        x = ln(x + attn, p + "attn_output_norm")
        up, gate = x @ f[p + "ffn_up.weight"].T, x @ f[p + "ffn_gate.weight"].T
        x = ln(x + (up * gate / (1.0 + np.exp(-gate))) @ f[p + "ffn_down.weight"].T, p + "layer_output_norm")
    return x


def make_nomic() -> None:
    from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter
    src = GGUFFile(os.path.join(DATA, "bert.gguf"))
    n_vocab = src.tensors["token_embd.weight"].shape[0]
    w = nomic_weights(n_vocab)
    out = os.path.join(DATA, "nomic-bert.gguf")
    g = GGUFWriter(out)
    g.add_metadata("general.architecture", "nomic-bert")
    g.add_metadata("general.name", "tiny-nomic-bert")
    arch = {"context_length": NOMIC["n_ctx"], "embedding_length": NOMIC["n_embd"],
            "feed_forward_length": NOMIC["n_inner"], "block_count": NOMIC["n_layer"],
            "attention.head_count": NOMIC["n_head"], "pooling_type": 2}
    for key, value in arch.items():
        g.add_metadata(f"nomic-bert.{key}", value, GGUFValueType.UINT32)
    g.add_metadata("nomic-bert.attention.layer_norm_epsilon", NOMIC["eps"], GGUFValueType.FLOAT32)
    g.add_metadata("nomic-bert.rope.freq_base", NOMIC["rotary_base"], GGUFValueType.FLOAT32)
    g.add_metadata("nomic-bert.attention.causal", False, GGUFValueType.BOOL)
    for key, value in src.metadata.items():
        if key.startswith("tokenizer."):
            vtype, etype = src.metadata_types[key]
            g.add_metadata(key, value, (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
    for name, data in w.items():
        g.add_tensor(name, data, qtype="F32")
    g.write()
    ref = {}
    for i, ids in enumerate(token_sets(n_vocab)):
        ref[f"tokens{i}"] = ids.astype(np.int32)
        ref[f"hidden{i}"] = nomic_reference(w, ids)
    np.savez_compressed(os.path.join(DATA, "nomic-bert.npz"), **ref)


def llama_cpp_embeddings() -> None:
    from llama_cpp import Llama
    for name in ("bert", "nomic-bert"):
        llm = Llama(os.path.join(DATA, f"{name}.gguf"), embedding=True, verbose=False)
        vecs = [llm.embed(t, normalize=False) for t in EMBED_TEXTS]
        with open(os.path.join(DATA, f"{name}.llama_cpp.json"), "w", encoding="utf-8") as f:
            json.dump([{"text": t, "embedding": v} for t, v in zip(EMBED_TEXTS, vecs)], f, ensure_ascii=False)


if __name__ == "__main__":
    make_bert()
    make_nomic()
    llama_cpp_embeddings()
