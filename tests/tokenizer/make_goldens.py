"""Produce the golden token ids in tests/tokenizer/data/ with llama.cpp (through llama-cpp-python).

    python tests/tokenizer/make_goldens.py [--models-dir ~/.cache/oxillama/models]

Run once by hand; the test suite only reads the JSON it writes and never needs llama_cpp. For every model
and every corpus text it records llama.cpp's ids with add_special (BOS/EOS as the vocabulary asks) and
without, with and without parse_special, plus llama.cpp's detokenization of those ids.

Besides the two real models it also writes small vocab-only GGUF files that reuse SmolLM2's byte-level BPE
vocabulary under other `tokenizer.ggml.pre` values, so every pre-tokenizer regex in our table is checked
against llama.cpp's own splitting, and one that reads Gemma 3's vocabulary as a Unigram ("t5") model, to
check the Unigram path against llama.cpp's UGM tokenizer.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

# pre-tokenizer names checked through the SmolLM2 vocabulary (see module docstring)
PRE_VARIANTS = ["default", "gpt-2", "llama-bpe", "qwen2", "starcoder", "deepseek-llm", "deepseek-coder", "falcon",
                "mpt", "gpt-4o", "tekken", "bloom", "chameleon"]

CORPUS = [
    "",
    " ",
    "\n",
    "Hello world!",
    "hello world",
    " Hello World",
    "The quick brown fox jumps over the lazy dog. It wasn't me -- I'd never've done that; they'll see.",
    "Once upon a time, in a land far, far away, there lived a curious little robot named Bolt.\n"
    "Every morning Bolt would roll down to the harbour and count the boats: one, two, three...\n\n"
    "\"Why do you count them?\" asked the gull. \"Because numbers are friendly,\" said Bolt.",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < arr.length; i++) { console.log(`item ${i}: ${arr[i]}`); }",
    "SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name ORDER BY n DESC;",
    "camelCaseIdentifier snake_case_name SCREAMING_CASE PascalCase HTTPServerError",
    "a  b   c    d     e      f",
    "   leading spaces",
    "trailing spaces   ",
    "tabs\tand\t\ttabs\t\t\t!",
    "\n\n\nthree newlines then text\n\n",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \t\n  \n\t whitespace",
    "        eight spaces of indent",
    " " * 40 + "forty spaces",
    "\n" * 40 + "forty newlines",
    "1234567890",
    "3.14159265358979 and 2.71828 and 1e-10",
    "1,000,000 and 12345678901234567890",
    "Call 555-0199 or +1 (800) 123-4567 before 23:59:59 on 2024-12-31.",
    "!!!???...;;;:::---___***&&&%%%$$$###@@@",
    "(parens) [brackets] {braces} <angles> 'quotes' \"double\" `backticks`",
    "don't won't can't I'm you're he's she'll we've they'd it's O'Neil's",
    "DON'T WON'T I'M YOU'RE",
    "Emoji: 🙂😀🎉👍🏽👨‍👩‍👧‍👦🏳️‍🌈 ✅❌⭐",
    "Ça va? Über naïve café, façade, jalapeño, smørrebrød, Łódź, Ångström.",
    "Vietnamese: Tiếng Việt có dấu; Polish: zażółć gęślą jaźń",
    "日本語のテキストです。東京は大きい都市です。",
    "中文文本，包括标点符号！还有数字123。",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم، هذا نص عربي.",
    "שלום עולם, זה טקסט בעברית.",
    "Ελληνικά και Русский текст вместе.",
    "हिन्दी पाठ और தமிழ் உரை",
    "e\u0301 combining acute, n\u0303 tilde, zero\u200bwidth\u200dspace",
    "nbsp\u00a0here, ideographic\u3000space, en\u2002space",
    "control \x00 \x01 \x1f \x7f chars",
    "▁ literal sentencepiece space ▁▁ and Ġ byte-level space",
    "<0x41> looks like a byte token",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|endoftext|>",
    "text<|endoftext|>more text<|endoftext|>",
    "<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>bos in text<eos>",
    "<table><tr><td>cell</td></tr></table> and <b>bold</b> <i>it</i> <code>x</code>",
    "[multimodal] <start_of_image> <unused0> <unused99> <mask> <pad> <unk>",
    "<|im_start|><|im_end|><|im_start|>",
    "<<|im_start|>>",
    "<|im_start|user",
    "<s> </s> <unk>",
    "http://example.com/path?query=1&b=2#frag and user@example.org",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "Mixed 中文 and English with 日本語 and emoji 🎉 in one sentence.",
]


def _random_corpus(n: int, seed: int) -> list[str]:
    """Random strings from a pool that stresses whitespace runs, digits, scripts and special-token texts."""
    rng = random.Random(seed)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 2
            + [" "] * 12 + ["\n"] * 4 + ["\t"] * 2 + list(".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`")
            + list("éüñçßøåłœ") + list("日本語中文한국") + list("مرحباשלום")
            + ["🙂", "🎉", "👍🏽"]
            + ["'s", "'ll", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<eos>",
               "<|endoftext|>", "<td>", "</td>", "  ", "\n\n", "\r\n", "\u00a0", "\u2581"])
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        out.append("".join(rng.choice(pool) for _ in range(length)))
    return out


def corpus() -> list[str]:
    return CORPUS + _random_corpus(150, seed=1234)


def goldens_for(model_path: str, texts: list[str]) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    cases = []
    for text in texts:
        raw = text.encode("utf-8")
        entry = {"text": text}
        for add_special in (True, False):
            for parse_special in (False, True):
                ids = llm.tokenize(raw, add_bos=add_special, special=parse_special)
                key = f"add{int(add_special)}_parse{int(parse_special)}"
                entry[key] = list(ids)
        ids = entry["add0_parse1"]
        entry["detok_special"] = llm.detokenize(ids, special=True).decode("utf-8", errors="replace")
        entry["detok_plain"] = llm.detokenize(ids, special=False).decode("utf-8", errors="replace")
        cases.append(entry)
    return {"llama_cpp_version": llama_cpp.__version__, "model": os.path.basename(model_path), "cases": cases}


def write_variant(src_md: dict, pre: str, path: str) -> None:
    """A vocab-only GGUF: the tokenizer keys of `src_md` with tokenizer.ggml.pre replaced, plus the llama
    hyper-parameters llama.cpp needs to accept the file."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(path, "llama")
    for key in ("llama.context_length", "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                "llama.attention.head_count", "llama.attention.head_count_kv",
                "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base", "llama.vocab_size"):
        if key in src_md:
            value = src_md[key]
            if isinstance(value, float):
                w.add_float32(key, value)
            else:
                w.add_uint32(key, int(value))
    w.add_tokenizer_model(src_md["tokenizer.ggml.model"])
    w.add_tokenizer_pre(pre)
    w.add_token_list(src_md["tokenizer.ggml.tokens"])
    w.add_token_types(np.asarray(src_md["tokenizer.ggml.token_type"]).tolist())
    w.add_token_merges(src_md["tokenizer.ggml.merges"])
    w.add_bos_token_id(int(src_md["tokenizer.ggml.bos_token_id"]))
    w.add_eos_token_id(int(src_md["tokenizer.ggml.eos_token_id"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def t5_variant_metadata(gemma_md: dict) -> dict:
    """Gemma 3's tokens, types and scores read as a Unigram ("t5") vocabulary: the scores become
    log-probabilities for the Viterbi search. Used to check our Unigram path against llama.cpp's UGM."""
    md = {k: v for k, v in gemma_md.items() if k.startswith("tokenizer.ggml.")
          and k not in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.pre")}
    md["tokenizer.ggml.model"] = "t5"
    md["tokenizer.ggml.add_space_prefix"] = True
    return md


def write_t5_variant(gemma_md: dict, hparams_md: dict, path: str) -> None:
    import gguf
    import numpy as np

    md = t5_variant_metadata(gemma_md)
    w = gguf.GGUFWriter(path, "llama")
    for key in ("llama.context_length", "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                "llama.attention.head_count", "llama.attention.head_count_kv",
                "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"):
        value = hparams_md[key]
        if isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, int(value))
    w.add_tokenizer_model("t5")
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_types(np.asarray(md["tokenizer.ggml.token_type"]).tolist())
    w.add_token_scores(np.asarray(md["tokenizer.ggml.scores"]).tolist())
    w.add_bos_token_id(int(md["tokenizer.ggml.bos_token_id"]))
    w.add_eos_token_id(int(md["tokenizer.ggml.eos_token_id"]))
    w.add_unk_token_id(int(md["tokenizer.ggml.unknown_token_id"]))
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/oxillama/models"))
    ap.add_argument("--skip-variants", action="store_true")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    texts = corpus()
    for name, filename in MODELS.items():
        path = os.path.join(args.models_dir, filename)
        data = goldens_for(path, texts)
        with open(os.path.join(DATA, f"goldens_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)
        print(f"{name}: {len(data['cases'])} cases", file=sys.stderr)

    if args.skip_variants:
        return
    sys.path.insert(0, HERE)
    from gguf_shim import read_metadata

    src = read_metadata(os.path.join(args.models_dir, MODELS["smollm2"]))
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRE_VARIANTS:
            path = os.path.join(tmp, f"vocab-{pre}.gguf")
            write_variant(src, pre, path)
            try:
                data = goldens_for(path, texts)
            except ValueError as exc:  # a pre name this llama.cpp build does not know
                print(f"pre={pre}: skipped ({exc})", file=sys.stderr)
                continue
            variants[pre] = [{"text": c["text"], "ids": c["add0_parse0"]} for c in data["cases"]]
            print(f"pre={pre}: done", file=sys.stderr)
    with open(os.path.join(DATA, "goldens_pre_variants.json"), "w", encoding="utf-8") as f:
        json.dump({"vocab": MODELS["smollm2"], "variants": variants}, f, ensure_ascii=False, indent=0)

    gemma = read_metadata(os.path.join(args.models_dir, MODELS["gemma3"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vocab-t5.gguf")
        write_t5_variant(gemma, src, path)
        data = goldens_for(path, texts)
    cases = [{"text": c["text"], "add1_parse0": c["add1_parse0"], "add0_parse1": c["add0_parse1"]}
             for c in data["cases"]]
    with open(os.path.join(DATA, "goldens_t5_variant.json"), "w", encoding="utf-8") as f:
        json.dump({"vocab": MODELS["gemma3"] + " as t5", "cases": cases}, f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
