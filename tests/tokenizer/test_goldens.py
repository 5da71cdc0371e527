"""Token ids identical to llama.cpp's on both real models (goldens made by make_goldens.py with llama.cpp)."""
import pytest

from .helpers import load_golden

MODES = [("add1_parse0", True, False), ("add1_parse1", True, True), ("add0_parse0", False, False),
         ("add0_parse1", False, True)]


@pytest.mark.parametrize("key,add_special,parse_special", MODES)
def test_encode_matches_llama_cpp(real_model, key, add_special, parse_special):
    name, tok, golden = real_model
    mismatches = []
    for case in golden["cases"]:
        got = tok.encode(case["text"], add_special=add_special, parse_special=parse_special)
        if got != case[key]:
            mismatches.append((case["text"], got, case[key]))
    assert not mismatches, f"{name}: {len(mismatches)} texts differ from llama.cpp, first: {mismatches[0]!r}"


def test_decode_matches_llama_cpp(real_model):
    """Decoding llama.cpp's ids gives llama.cpp's text, with control tokens rendered or hidden."""
    name, tok, golden = real_model
    for case in golden["cases"]:
        ids = case["add0_parse1"]
        assert tok.decode(ids) == case["detok_special"], case["text"]
        assert tok.decode(ids, skip_special=True) == case["detok_plain"], case["text"]


def test_round_trip(real_model):
    """decode(encode(x)) == x wherever the vocabulary is lossless: everything except a literal U+2581 in an
    SPM vocabulary, which is its space marker and decodes to a space."""
    name, tok, golden = real_model
    for case in golden["cases"]:
        text = case["text"]
        if tok.model == "llama" and "\u2581" in text:
            assert tok.decode(tok.encode(text, add_special=False)) == text.replace("\u2581", " ")
            continue
        assert tok.decode(tok.encode(text, add_special=False)) == text
        assert tok.decode(tok.encode(text, add_special=False, parse_special=True)) == text


def test_bos_and_special_ids(smollm2_tokenizer, gemma3_tokenizer):
    smol, gemma = smollm2_tokenizer, gemma3_tokenizer
    # SmolLM2: no BOS added; EOG = <|endoftext|>, <|im_end|> and the FIM repo-name token llama.cpp adds.
    assert not smol.add_bos and smol.bos_id == 1 and smol.eos_id == 2
    assert smol.eog_ids == {0, 2, 4}
    assert smol.encode("hi") == smol.encode("hi", add_special=False)
    # Gemma 3: BOS added; EOG = <eos>, <end_of_turn>, and "</s>" (llama.cpp's text rule, made control).
    assert gemma.add_bos and gemma.bos_id == 2 and gemma.eos_id == 1 and gemma.eot_id == 106
    assert gemma.eog_ids == {1, 106, 212}
    assert gemma.encode("hi")[0] == 2 and gemma.encode("hi", add_special=False)[0] != 2
    assert gemma.is_eog(106) and not gemma.is_eog(2)


def test_user_defined_tokens_always_match(gemma3_tokenizer):
    tok = gemma3_tokenizer
    four_spaces = tok.token_to_id("    ")
    assert tok.encode("a    b", add_special=False)[1] == four_spaces
    assert tok.token_to_id("<start_of_turn>") not in tok.encode("<start_of_turn>", add_special=False)
    assert tok.encode("<start_of_turn>", add_special=False, parse_special=True) == [tok.token_to_id("<start_of_turn>")]


@pytest.mark.parametrize("pre", sorted(load_golden("goldens_pre_variants.json")["variants"]))
def test_pre_tokenizer_variants_match_llama_cpp(smollm2_metadata, pre):
    """SmolLM2's vocabulary under other tokenizer.ggml.pre values: each split table entry splits as llama.cpp."""
    from oxillama.tokenizer import Tokenizer

    md = dict(smollm2_metadata)
    md["tokenizer.ggml.pre"] = pre
    tok = Tokenizer.from_metadata(md)
    for case in load_golden("goldens_pre_variants.json")["variants"][pre]:
        assert tok.encode(case["text"], add_special=False) == case["ids"], (pre, case["text"])


def test_from_gguf_path_and_file(smollm2_path):
    from oxillama.gguf import GGUFFile
    from oxillama.tokenizer import Tokenizer

    by_path = Tokenizer.from_gguf(smollm2_path)
    with GGUFFile(smollm2_path) as f:
        by_file = Tokenizer.from_gguf(f)
    text = "<|im_start|>user\nHello, 世界!<|im_end|>"
    assert by_path.encode(text, parse_special=True) == by_file.encode(text, parse_special=True)
    assert by_path.n_vocab == 49152 and by_path.model == "gpt2"


def test_unigram_matches_llama_cpp(gemma3_metadata):
    """Gemma 3's vocabulary read as a Unigram ("t5") model, against llama.cpp's UGM tokenizer."""
    from oxillama.tokenizer import Tokenizer

    from .make_goldens import t5_variant_metadata

    tok = Tokenizer.from_metadata(t5_variant_metadata(gemma3_metadata))
    assert tok.model == "t5" and tok.add_eos and not tok.add_bos
    for case in load_golden("goldens_t5_variant.json")["cases"]:
        assert tok.encode(case["text"]) == case["add1_parse0"], case["text"]
        assert tok.encode(case["text"], add_special=False, parse_special=True) == case["add0_parse1"], case["text"]


def test_a_pickled_tokenizer_encodes_the_same(real_model):
    """Tokenizers travel to worker processes (multiprocessing pickles them)."""
    import pickle

    name, tok, golden = real_model
    copy = pickle.loads(pickle.dumps(tok))
    for case in golden["cases"][:40]:
        assert copy.encode(case["text"], parse_special=True) == tok.encode(case["text"], parse_special=True)
