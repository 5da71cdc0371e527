"""The same calls on oxillama.Llama and llama_cpp.Llama (when llama-cpp-python is installed): the
response structures match (every key and value type of theirs is in ours), token ids are equal on a
varied text set, and greedy completions agree on their first tokens."""
import json

import pytest
from llama_shapes import structure

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow

TEXTS = ["Hello, world!", "The capital of France is Paris.", "  leading spaces and\ttabs\n\nnew lines",
         "Ünïcödé, 日本語, emoji 🙂 and ZWJ 👩‍💻", "def f(x):\n    return x ** 2  # comment",
         "1234567890 3.14159 -42 1e-9", "<|im_start|>user\nhi<|im_end|>", "a" * 50, "", "x"]
N_AGREE = 4     # greedy tokens both libraries must agree on (later ones may differ on near-ties)


@pytest.fixture(scope="module")
def pair(smollm2_path):
    from oxillama import Llama
    ours = Llama(model_path=smollm2_path, n_ctx=512, seed=1, verbose=False)
    theirs = llama_cpp.Llama(model_path=smollm2_path, n_ctx=512, seed=1, verbose=False, logits_all=True)
    yield ours, theirs
    ours.close()
    theirs.close()


def contains(ours, theirs, path="$"):
    """Every key of theirs is in ours with the same kind of value."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        for k, v in theirs.items():
            assert k in ours, f"{path}: we lack key {k!r}"
            contains(ours[k], v, f"{path}.{k}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), path
        if theirs and ours:
            contains(ours[0], theirs[0], f"{path}[0]")
    elif theirs != "NoneType" and ours != "NoneType":
        assert ours == theirs, f"{path}: {ours} vs {theirs}"


def test_token_ids_equal(pair):
    ours, theirs = pair
    for text in TEXTS:
        for add_bos in (True, False):
            for special in (False, True):
                data = text.encode()
                assert ours.tokenize(data, add_bos, special) == theirs.tokenize(data, add_bos, special), \
                    (text, add_bos, special)
        assert ours.token_bos() == theirs.token_bos() and ours.token_eos() == theirs.token_eos()


@pytest.mark.parametrize("prompt", ["The capital of France is", "def fibonacci(n):", "Once upon a time"])
def test_completion_structure_and_greedy_agreement(pair, prompt):
    ours, theirs = pair
    a = ours(prompt, max_tokens=N_AGREE, temperature=0)
    b = theirs(prompt, max_tokens=N_AGREE, temperature=0)
    contains(structure(a), structure(b))
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["usage"] == b["usage"]
    json.dumps(a)


def test_completion_stream_structure(pair):
    ours, theirs = pair
    a = list(ours("Hi", max_tokens=3, stream=True, temperature=0))
    b = list(theirs("Hi", max_tokens=3, stream=True, temperature=0))
    for x, y in zip(a, b):
        contains(structure(x), structure(y))


def test_chat_structure(pair):
    ours, theirs = pair
    messages = [{"role": "user", "content": "Name a fruit."}]
    a = ours.create_chat_completion(messages, max_tokens=N_AGREE, temperature=0)
    b = theirs.create_chat_completion(messages, max_tokens=N_AGREE, temperature=0)
    contains(structure(a), structure(b))
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    sa = list(ours.create_chat_completion(messages, max_tokens=N_AGREE, temperature=0, stream=True))
    sb = list(theirs.create_chat_completion(messages, max_tokens=N_AGREE, temperature=0, stream=True))
    contains(structure(sa[0]), structure(sb[0]))
    contains(structure(sa[1]), structure(sb[1]))
    contains(structure(sa[-1]), structure(sb[-1]))


def test_embedding_structure(smollm2_path):
    from oxillama import Llama
    with Llama(smollm2_path, n_ctx=256, embedding=True, verbose=False) as ours:
        theirs = llama_cpp.Llama(model_path=smollm2_path, n_ctx=256, embedding=True, verbose=False)
        a, b = ours.create_embedding(["hello", "two words"]), theirs.create_embedding(["hello", "two words"])
        contains(structure(a), structure(b))
        assert [len(d["embedding"]) for d in a["data"]] == [len(d["embedding"]) for d in b["data"]]
        theirs.close()
