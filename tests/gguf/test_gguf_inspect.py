"""`oxillama inspect` through oxillama.cli.main, text and --json."""
import json

import numpy as np

from oxillama.cli import main
from oxillama.gguf import GGUFFile, GGUFWriter


def test_text_report_on_smollm2(smollm2_path, capsys):
    assert main(["inspect", smollm2_path]) == 0
    out = capsys.readouterr().out
    assert "architecture   llama" in out
    assert "runs           yes: family Llama (oxillama.models.llama)" in out
    assert "GGUF v3" in out
    lines = out.splitlines()
    hp = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  ") and len(line.split()) == 2}
    assert hp["block_count"] == "30" and hp["attention.head_count_kv"] == "3" and hp["rope.freq_base"] == "100000"
    assert "model gpt2, pre smollm, vocab size 49152, 48900 merges" in out
    assert "bos 1 '<|im_start|>', eos 2 '<|im_end|>'" in out
    emb = next(line for line in lines if line.strip().startswith("token_embd.weight"))
    assert emb.split()[1:5] == ["Q8_0", "49152", "x", "576"] and "MiB" in emb
    assert sum(1 for line in lines if line.strip().startswith("blk.")) == 270
    with GGUFFile(smollm2_path) as f:
        vocab = f.metadata["tokenizer.ggml.tokens"]
    # the vocabulary is summarized, never printed
    assert vocab[30000] not in out and vocab[45000] not in out and len(out) < 40_000


def test_json_report_on_gemma3(gemma3_path, capsys):
    assert main(["inspect", "--json", gemma3_path]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["architecture"] == "gemma3" and r["version"] == 3
    assert r["hparams"]["attention.sliding_window"] == 512 and r["hparams"]["block_count"] == 18
    tok = r["tokenizer"]
    assert tok["model"] == "llama" and tok["vocab_size"] == 262144
    assert (tok["bos_token_id"], tok["bos_token"], tok["eos_token_id"]) == (2, "<bos>", 1)
    assert len(r["tensors"]) == r["n_tensors"] == 236
    emb = next(t for t in r["tensors"] if t["name"] == "token_embd.weight")
    assert emb["type"] == "Q8_0" and emb["shape"] == [262144, 640] and emb["nbytes"] == 262144 * 640 // 32 * 34
    assert r["n_params"] == sum(np.prod(t["shape"]) for t in r["tensors"])
    assert sum(v["count"] for v in r["tensor_types"].values()) == 236
    assert "tokenizer.ggml.tokens" not in r["metadata"]


def test_no_tensors_and_a_minimal_file(tmp_path, capsys):
    path = tmp_path / "tiny.gguf"
    w = GGUFWriter(path)
    w.add_metadata("general.name", "tiny")
    w.add_metadata("custom.long", list(range(100)))
    w.add_tensor("w", np.zeros((2, 4), np.float32))
    w.write()
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "architecture   (none)" in out
    assert "runs           no: the file names no general.architecture" in out
    assert "  w     F32   2 x 4  32 B" in out
    assert "custom.long" in out and "<array[INT32], 100 values>" in out
    assert main(["inspect", "--json", "--no-tensors", str(path)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert "tensors" not in r and r["n_params"] == 8
    assert r["metadata"]["custom.long"] == {"type": "array[INT32]", "length": 100}


def test_bad_file_is_a_clean_error(tmp_path, capsys):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGML" + bytes(100))
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("oxillama: error: ") and "bad magic" in err and "Traceback" not in err
    assert main(["inspect", str(tmp_path / "missing.gguf")]) == 1
    assert "cannot open" in capsys.readouterr().err


ZOO = {"stablelm": "StableLM", "gptneox": "GPTNeoX", "bloom": "Bloom", "falcon": "Falcon", "gpt2": "GPT2",
       "olmo2": "OLMo2", "granite": "Granite", "smollm3": "SmolLM3", "exaone": "Exaone", "internlm2": "InternLM2"}


def test_the_dense_zoo_families_show_and_run(capsys):
    from pathlib import Path
    data = Path(__file__).parent.parent / "models" / "data"
    for arch, cls in ZOO.items():
        assert main(["inspect", "--no-tensors", str(data / f"{arch}.gguf")]) == 0
        out = capsys.readouterr().out
        assert f"architecture   {arch}\n" in out and f"runs           yes: family {cls} " in out
        assert "block_count" in out
    assert main(["inspect", "--json", "--no-tensors", str(data / "gpt2.gguf")]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == {"class": "GPT2", "module": "oxillama.models.gpt2"}
