"""apply_chat_template(tokenize=True) returns token ids, as Hugging Face's does."""
import pytest

from oxillama.errors import TokenizerError

CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi! What's 2+2?"}]


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_tokenize_true_gives_the_ids_of_the_text(name, request):
    tok = request.getfixturevalue(f"{name}_tokenizer")
    text = tok.apply_chat_template(CONVERSATION)
    assert isinstance(text, str)
    ids = tok.apply_chat_template(CONVERSATION, tokenize=True)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert ids == tok.encode(text, add_special=False, parse_special=True)
    assert tok.decode(ids) == text
    # the template's special tokens are single tokens, and no second BOS is added
    if tok.bos_id is not None and text.startswith(tok.token_text(tok.bos_id)):
        assert ids[0] == tok.bos_id and ids[1] != tok.bos_id
    d = tok.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True)
    assert d["input_ids"] == ids and d["attention_mask"] == [1] * len(ids)


def test_return_dict_needs_tokenize(smollm2_tokenizer):
    with pytest.raises(TokenizerError, match="tokenize=True"):
        smollm2_tokenizer.apply_chat_template(CONVERSATION, return_dict=True)


def test_ids_generate_like_the_text(smollm2_path):
    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=128) as engine:
        ids = engine.tokenizer.apply_chat_template(CONVERSATION, tokenize=True)
        text = engine.tokenizer.apply_chat_template(CONVERSATION)
        assert engine.generate(ids, max_tokens=6, temperature=0).tokens == \
            engine.generate(text, max_tokens=6, temperature=0).tokens
