"""Make the tiny random encoder models and their goldens in tests/models/data/ (run once; needs torch,
transformers and llama.cpp's convert_hf_to_gguf.py, e.g. from the llama-cpp-python sdist):

    LLAMA_CPP=/path/to/llama.cpp python tests/models/make_encoder_models.py

bert: a transformers BertModel with small dims (2 layers, 4 heads of 16, FFN 128, 96 positions, 2 token types),
every weight drawn with a fixed seed, and a WordPiece vocabulary written for the purpose (lowercasing, accents
stripped, continuation pieces, punctuation, a CJK character), saved as a sentence-transformers checkpoint with
mean pooling and converted to GGUF by llama.cpp's own converter (so names, the phantom-space vocabulary and the
metadata are llama.cpp's). Goldens in bert.npz: transformers' last_hidden_state (float32, token types 0, no
padding) for TOKEN_SETS; bert.tokens.json: llama.cpp's tokenization (llama-cpp-python, vocab_only) of TEXTS.
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


if __name__ == "__main__":
    make_bert()
