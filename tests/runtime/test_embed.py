"""Embeddings: hidden states are the model's final normed states (they give its logits), pooling
modes match their definitions, inputs are independent, a paraphrase ranks above an unrelated text."""
import numpy as np
import pytest

from oxillama.errors import InvalidArgumentError
from oxillama.runtime.embeddings import POOLING_MODES, hidden_states, pool

TEXT = "The old lighthouse keeper climbed the stairs every evening."
# logits = hidden @ W_out.T; the kernel rounds activations to 8-bit blocks first, we do not
LOGIT_TOL = {"smollm2": 0.6, "gemma3": 1.5}
EMB_TOL = 1e-5


def test_hidden_states_project_to_the_models_logits(request, engine):
    name = request.node.callspec.params["engine"]
    ids = engine.tokenize(TEXT)
    h = hidden_states(engine, ids)
    assert h.shape == (len(ids), engine.plan.n_embd) and h.dtype == np.float32
    engine.reset()
    logits = engine.forward(ids, all_logits=True)
    rows = np.unique(np.concatenate([np.argsort(logits[-3:], -1)[:, -20:].ravel(),
                                     np.random.default_rng(0).integers(0, engine.n_vocab, 200)]))
    ours = h[-3:] @ output_rows(engine, rows).T     # (3, len(rows))
    assert np.abs(ours - logits[-3:, rows]).max() < LOGIT_TOL[name]
    assert (rows[ours.argmax(-1)] == logits[-3:].argmax(-1)).all()


def output_rows(engine, rows):
    """Rows of the output matrix (tied to the token embeddings when absent), dequantized."""
    from oxillama.quant import dequantize
    t = engine.gguf.tensors.get("output.weight") or engine.gguf.tensors["token_embd.weight"]
    n_rows, n_cols = t.shape
    data = t.data.reshape(n_rows, -1)[rows]
    return dequantize(np.ascontiguousarray(data).reshape(-1), t.qtype_id, len(rows) * n_cols).reshape(len(rows), n_cols)


def test_pooling_matches_definitions(smollm2):
    ids = smollm2.tokenize(TEXT)
    h = hidden_states(smollm2, ids).astype(np.float64)
    want = {"last": h[-1], "cls": h[0], "mean": h.sum(0) / len(h), "max": np.max(h, axis=0)}
    for mode in POOLING_MODES:
        raw = smollm2.embed(TEXT, pooling=mode, normalize=False)
        np.testing.assert_allclose(raw, want[mode], rtol=EMB_TOL, atol=EMB_TOL)
        unit = smollm2.embed(TEXT, pooling=mode)
        np.testing.assert_allclose(unit, want[mode] / np.linalg.norm(want[mode]), rtol=EMB_TOL, atol=EMB_TOL)
        assert abs(np.linalg.norm(unit) - 1) < 1e-5
    # pool() on a small hand-made array
    hh = np.array([[1.0, -2.0], [3.0, 0.0], [-1.0, 5.0]], dtype=np.float32)
    assert pool(hh, "max", False).tolist() == [3.0, 5.0]
    assert pool(hh, "mean", False).tolist() == pytest.approx([1.0, 1.0])
    assert pool(hh, "cls", False).tolist() == [1.0, -2.0]
    assert pool(hh, "last", True).tolist() == pytest.approx([-1 / 26 ** 0.5, 5 / 26 ** 0.5])


def test_inputs_are_independent_and_session_untouched(smollm2):
    smollm2.reset()
    smollm2.generate("Once upon a time", max_tokens=3, temperature=0)
    session = list(smollm2.tokens)
    texts = ["A short one.", TEXT, "Another sentence, a little longer than the first one."]
    batch = smollm2.embed_batch(texts, pooling="mean")
    assert batch.shape == (3, smollm2.plan.n_embd)
    for i in (2, 0, 1):   # any order, any company: the same vector, bit for bit
        assert np.array_equal(smollm2.embed(texts[i], pooling="mean"), batch[i])
    assert np.array_equal(smollm2.embed_batch(texts[::-1], pooling="mean"), batch[::-1])
    assert smollm2.tokens == session
    # token ids are accepted too
    assert np.array_equal(smollm2.embed(smollm2.tokenize(TEXT)), smollm2.embed(TEXT))


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_paraphrase_ranks_above_unrelated(engine, pooling):
    anchor, para, other = ("A cat is sleeping on the warm windowsill.",
                           "On the sunny window ledge, a kitten naps.",
                           "The central bank raised interest rates by half a percent.")
    v = engine.embed_batch([anchor, para, other], pooling=pooling)
    assert v[0] @ v[1] > v[0] @ v[2]


def test_refusals(smollm2):
    with pytest.raises(InvalidArgumentError, match="empty"):
        smollm2.embed("")
    with pytest.raises(InvalidArgumentError, match="empty"):
        smollm2.embed([])
    with pytest.raises(InvalidArgumentError, match="empty"):
        smollm2.embed_batch(["fine", ""])
    with pytest.raises(InvalidArgumentError, match="pooling"):
        smollm2.embed("text", pooling="sum")
    with pytest.raises(InvalidArgumentError, match="list"):
        smollm2.embed_batch("just one string")
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        smollm2.embed([1, smollm2.n_vocab])
    assert smollm2.embed_batch([]).shape == (0, smollm2.plan.n_embd)
