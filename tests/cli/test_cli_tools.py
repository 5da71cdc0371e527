"""The model tools on the command line: perplexity (and KL divergence), verify, tokenize, detokenize,
convert; run as the user runs them (`python -m oxillama ...` in a subprocess)."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parents[1] / "models" / "data"
TINY = str(DATA / "llama.gguf")
TINY_Q8 = str(DATA / "llama.q8_0.gguf")
TEXT = ("The quick brown fox jumps over the lazy dog. " * 3 + "Pack my box with five dozen liquor jugs! " * 3) * 6


def oxillama(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    # from a neutral folder: the repo root's oxillama/ (no build) must not shadow the installed package
    return subprocess.run([sys.executable, "-m", "oxillama", *args], capture_output=True, text=True, input=stdin,
                          timeout=600, cwd=tempfile.gettempdir())


def _one_line_error(r, *words):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("oxillama: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


# ---- perplexity

def _reference_ppl(path: str, text: str, n_ctx: int) -> tuple[float, int]:
    """llama-perplexity's recipe with the one-sequence forward, chunk by chunk (no batching)."""
    from oxillama.runtime.engine import InferenceEngine
    with InferenceEngine.from_gguf(path, n_ctx=n_ctx, n_threads=1) as e:
        toks = e.tokenize(text, add_special=True)
        n_chunk = len(toks) // n_ctx
        first = n_ctx // 2
        nll, count = 0.0, 0
        for i in range(n_chunk):
            chunk = list(toks[i * n_ctx:(i + 1) * n_ctx])
            if e.tokenizer.add_bos:
                chunk[0] = e.tokenizer.bos_id
            e.reset()
            logits = e.forward(chunk, all_logits=True).astype(np.float64)
            for j in range(first, n_ctx - 1):
                row = logits[j]
                nll -= row[chunk[j + 1]] - row.max() - math.log(np.exp(row - row.max()).sum())
                count += 1
    return math.exp(nll / count), count


def test_perplexity_matches_chunk_by_chunk_reference(tmp_path):
    """The batched figure equals the one computed chunk by chunk with the one-sequence forward."""
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    r = oxillama("perplexity", "-m", TINY, "-f", str(text_file), "-c", "32", "--n-seq", "3", "-t", "2")
    assert r.returncode == 0, r.stderr
    final = [ln for ln in r.stdout.splitlines() if ln.startswith("Final estimate: PPL = ")]
    assert len(final) == 1, r.stdout
    value, unc = final[0].split("= ")[1].split(" +/- ")
    want, count = _reference_ppl(TINY, TEXT, 32)
    assert float(value) == pytest.approx(want, rel=1e-4)
    assert 0 < float(unc) < float(value)
    running = r.stdout.splitlines()[0]
    assert running.startswith("[1]") and running.count("[") == count // 15


def test_perplexity_refuses_short_text(tmp_path):
    text_file = tmp_path / "short.txt"
    text_file.write_text("too short")
    _one_line_error(oxillama("perplexity", "-m", TINY, "-f", str(text_file), "-c", "64"), "at least 128 tokens")


def test_kl_divergence_of_a_model_from_itself_and_from_q8_0(tmp_path):
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    base = tmp_path / "base.kld"
    r = oxillama("perplexity", "-m", TINY, "-f", str(text_file), "-c", "32", "--kl-divergence-base", str(base))
    assert r.returncode == 0, r.stderr
    assert base.read_bytes()[:8] == b"_logits_"

    def stats(model):
        r = oxillama("perplexity", "-m", model, "--kl-divergence-base", str(base), "--kl-divergence")
        assert r.returncode == 0, r.stderr
        out = {}
        for ln in r.stdout.splitlines():
            if ":" in ln and ("KLD" in ln or "Same top" in ln or "PPL" in ln):
                key, val = ln.split(":", 1)
                out[key.strip()] = float(val.split("±")[0].strip().rstrip("%"))
        return out
    same = stats(TINY)
    assert same["Mean    KLD"] < 1e-4 and same["Same top p"] == 100.0     # only the 16-bit rounding of the base
    assert same["Mean PPL(Q)"] == pytest.approx(same["Mean PPL(base)"], rel=1e-3)
    q8 = stats(TINY_Q8)
    assert q8["Mean    KLD"] > same["Mean    KLD"] and q8["Maximum KLD"] >= q8["Median  KLD"] >= q8["Minimum KLD"]
    assert 50 < q8["Same top p"] <= 100


# ---- verify

def test_verify_accepts_a_good_file_and_lists_problems(tmp_path):
    r = oxillama("verify", TINY)
    assert r.returncode == 0 and r.stdout.startswith("ok: "), r.stderr
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(Path(TINY).read_bytes()[:50000])
    r = oxillama("verify", str(truncated))
    assert r.returncode == 1 and "runs past the end of the file" in r.stderr
    r = oxillama("verify", str(DATA / "llama.json"))
    assert r.returncode == 1 and "not a GGUF file" in r.stderr
    # a NaN in a weight
    from oxillama.gguf import GGUFFile
    bad = tmp_path / "nan.gguf"
    shutil.copy(TINY, bad)
    with GGUFFile(str(bad)) as f:
        t = f.tensors["blk.1.ffn_up.weight"]
        off, qtype = t.offset, t.qtype
    assert qtype == "F32"
    with open(bad, "r+b") as g:
        g.seek(off + 4 * 70)
        g.write(np.array([np.nan], np.float32).tobytes())
    r = oxillama("verify", str(bad), "--json")
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert not report["ok"] and report["problems"] == [
        "blk.1.ffn_up.weight: 1 non-finite values in rows 0..95 (first at element 70)"]


def test_verify_checks_the_tokenizer(tmp_path):
    from oxillama.gguf import GGUFFile, GGUFWriter
    out = tmp_path / "bad_tokenizer.gguf"
    with GGUFFile(TINY) as f:
        w = GGUFWriter(str(out))
        w.add_metadata_from(f, exclude=["tokenizer.ggml.eos_token_id"])
        w.add_metadata("tokenizer.ggml.eos_token_id", 100000)
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()
    r = oxillama("verify", str(out), "--no-tensors")
    assert r.returncode == 1 and "tokenizer.ggml.eos_token_id = 100000 is outside the vocabulary" in r.stderr


# ---- tokenize / detokenize

def test_tokenize_and_back():
    from oxillama.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(TINY)
    text = "Hello world, this is oxillama"
    want = tok.encode(text)
    r = oxillama("tokenize", "-m", TINY, text, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ids"] == want and got["count"] == len(want) and "".join(got["pieces"]).endswith("oxillama")
    r = oxillama("tokenize", "-m", TINY, "-")
    assert r.returncode == 0
    plain = oxillama("tokenize", "-m", TINY, text)
    assert plain.stdout.splitlines()[-1] == f"Total number of tokens: {len(want)}"
    r = oxillama("detokenize", "-m", TINY, ",".join(map(str, want)), "--skip-special")
    assert r.returncode == 0 and r.stdout == tok.decode(want, skip_special=True) + "\n"
    r = oxillama("detokenize", "-m", TINY, *map(str, want), "--json")
    assert json.loads(r.stdout)["count"] == len(want)
    _one_line_error(oxillama("detokenize", "-m", TINY, "1", "x2"), "not a token id")
    _one_line_error(oxillama("detokenize", "-m", TINY, "99999"), "outside the vocabulary")


# ---- convert

def test_convert_refuses_bad_input(tmp_path):
    _one_line_error(oxillama("convert", str(tmp_path), str(tmp_path / "out.gguf")), "config.json")
    existing = tmp_path / "out.gguf"
    existing.write_bytes(b"x")
    _one_line_error(oxillama("convert", str(tmp_path), str(existing)), "exists")
    assert existing.read_bytes() == b"x"


def test_convert_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=288, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path / "hf")
    for outtype in ("f16", "bf16", "q8_0"):
        out = tmp_path / f"m.{outtype}.gguf"
        r = oxillama("convert", str(tmp_path / "hf"), str(out), "--outtype", outtype)
        assert r.returncode == 0, r.stderr
        r = oxillama("verify", str(out))
        assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_perplexity_within_half_a_percent_of_llama_cpp(smollm2_path, tmp_path):
    """llama.cpp's logits for the same chunks (llama-cpp-python, logits_all) give the same figure
    within 0.5%: the issue's bar for `oxillama perplexity` against llama-perplexity."""
    llama_cpp = pytest.importorskip("llama_cpp")
    n_ctx, n_chunks = 128, 4
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    text_file = tmp_path / "readme.txt"
    text_file.write_text(text, encoding="utf-8")
    r = oxillama("perplexity", "-m", smollm2_path, "-f", str(text_file), "-c", str(n_ctx), "--chunks",
                 str(n_chunks))
    assert r.returncode == 0, r.stderr
    ours = float(r.stdout.split("Final estimate: PPL = ")[1].split()[0])
    from oxillama.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(smollm2_path)
    ids = tok.encode(text, add_special=True)
    llm = llama_cpp.Llama(smollm2_path, n_ctx=n_ctx, logits_all=True, verbose=False, n_threads=2)
    nll, count, first = 0.0, 0, n_ctx // 2
    for i in range(n_chunks):
        chunk = list(ids[i * n_ctx:(i + 1) * n_ctx])
        if tok.add_bos:
            chunk[0] = tok.bos_id
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            nll -= row[chunk[j + 1]] - row.max() - math.log(np.exp(row - row.max()).sum())
            count += 1
    theirs = math.exp(nll / count)
    assert ours == pytest.approx(theirs, rel=0.005)
