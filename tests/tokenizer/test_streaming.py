"""Incremental detokenizer: never half a UTF-8 character, and the pieces add up to decode(all_ids)."""
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from oxillama.errors import TokenizerError

from .helpers import load_golden

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def stream(tok, ids, skip_special=False):
    detok = tok.detokenizer(skip_special=skip_special)
    pieces = [detok.add(t) for t in ids]
    pieces.append(detok.flush())
    return pieces


def test_stream_of_corpus_reproduces_decode(real_model):
    name, tok, golden = real_model
    for case in golden["cases"]:
        for key in ("add1_parse1", "add1_parse0"):
            ids = case[key]
            for skip in (False, True):
                pieces = stream(tok, ids, skip)
                assert "".join(pieces) == tok.decode(ids, skip_special=skip), (name, case["text"])
                # valid text never shows a replacement character mid-stream
                assert not any("\ufffd" in p for p in pieces), (name, case["text"])


def test_multibyte_characters_wait_for_their_last_byte(gemma3_tokenizer):
    tok = gemma3_tokenizer
    byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in "🙂".encode("utf-8")]
    detok = tok.detokenizer()
    assert [detok.add(t) for t in byte_ids] == ["", "", "", "🙂"]
    assert detok.flush() == ""


def test_unfinished_character_flushes_as_replacement(gemma3_tokenizer):
    tok = gemma3_tokenizer
    ids = [tok.token_to_id("<0xF0>"), tok.token_to_id("<0x9F>")]
    pieces = stream(tok, ids)
    assert pieces[:2] == ["", ""] and "".join(pieces) == tok.decode(ids) == "\ufffd"


@SETTINGS
@given(data=st.data())
def test_random_ids_stream_equals_decode(real_model, data):
    """Any id sequence (byte tokens, control tokens, broken UTF-8 included): the concatenation is decode()."""
    name, tok, _ = real_model
    ids = data.draw(st.lists(st.integers(0, tok.n_vocab - 1), max_size=40))
    skip = data.draw(st.booleans())
    assert "".join(stream(tok, ids, skip)) == tok.decode(ids, skip_special=skip)


@SETTINGS
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\ufffd"), max_size=80))
def test_random_text_streams_without_partial_characters(real_model, text):
    name, tok, _ = real_model
    ids = tok.encode(text, add_special=False)
    # SmolLM2 has no tokens for some bytes (0xF1, 0x04, ...): llama.cpp drops them too, so such text is lossy
    assume(tok.decode(ids) == text)
    pieces = stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids)
    assert not any("\ufffd" in p for p in pieces)


def test_detokenizer_rejects_bad_ids_and_reuse(smollm2_tokenizer):
    detok = smollm2_tokenizer.detokenizer()
    with pytest.raises(TokenizerError):
        detok.add(smollm2_tokenizer.n_vocab)
    detok.flush()
    with pytest.raises(TokenizerError):
        detok.add(1)
