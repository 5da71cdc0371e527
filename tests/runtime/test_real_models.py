"""The two real models end to end: logits against the NumPy reference, greedy decoding against
llama.cpp goldens (tests/runtime/make_goldens.py), chat."""
import json
import os

import numpy as np
import pytest

from oxillama.cli import main
from reference import reference_forward  # tests/runtime/reference.py

GOLDENS = os.path.join(os.path.dirname(__file__), "data", "greedy_llamacpp.json")
# Activations are rounded to 8-bit blocks before every matrix product (as in llama.cpp), so logits
# differ from a float forward by up to a few units after 18-30 layers; llama.cpp is as far off.
# Achieved (2026-11-25): largest 1.61 / 3.68, median of the row maxima 0.57 / 0.87 (SmolLM2 / Gemma 3).
LOGIT_ABS_TOL = {"smollm2": 2.0, "gemma3": 4.5}
MEDIAN_ROW_TOL = {"smollm2": 0.75, "gemma3": 1.1}
# Two candidates closer than this are a tie that summation order may break either way.
TIE_TOL = 0.3
# Along llama.cpp's path, its pick may trail ours by its own rounding noise (its logits and ours differ
# by ~0.6 at the median position), so a step counts as agreeing within this margin. Largest gap seen
# (2026-11-26, SmolLM2): 0.63 on the AVX-512 tiers (one near-tie step of the fibonacci prompt, after the
# 16-lane attention kernels; 0.45 before), 0.23 on AVX2, 0 on the scalar tier: the attention's summation
# order alone moves SmolLM2's logits by up to ~1 (an f32 cache against f16: 1.4), while the mean KL to
# llama.cpp stayed 0.00235 (tests/runtime/test_llamacpp_logprobs.py holds the distributions to llama.cpp's).
LLAMACPP_TIE_TOL = 0.7
# Each golden run of 24 greedy steps: 22-24 exact picks achieved, at most one fewer is accepted.
LLAMACPP_EXACT = 21 / 24

TEXT = ("The quick brown fox jumps over the lazy dog. In 1879, the city of Paris hosted a grand exhibition "
        "where engineers, artists and merchants gathered to show the newest machines, paintings and fabrics "
        "from every corner of the world. Visitors walked for hours between the halls, and many of them wrote "
        "letters home about the electric lights that turned the night into day.")


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_logits_agree_with_float_reference(request, name):
    engine = request.getfixturevalue(name)
    engine.reset()
    ids = engine.tokenize(TEXT)[:64]
    assert len(ids) == 64
    ours = engine.forward(ids, all_logits=True)
    ref = reference_forward(engine.arch.build(), ids)
    diff = np.abs(ours - ref)
    assert diff.max() < LOGIT_ABS_TOL[name]
    assert np.median(diff.max(-1)) < MEDIAN_ROW_TOL[name]
    # top-1 identical wherever the reference has a clear winner; elsewhere our pick is one of the tied
    ours_top = ours.argmax(-1)
    ref_sorted = np.sort(ref, -1)
    clear = ref_sorted[:, -1] - ref_sorted[:, -2] > TIE_TOL
    assert (ours_top == ref.argmax(-1))[clear].all()
    picked = ref[np.arange(len(ids)), ours_top]
    assert (picked >= ref.max(-1) - TIE_TOL - diff.max(-1)).all()
    assert clear.mean() > 0.6   # the text is ordinary prose: most positions have a clear winner


def _goldens(model):
    with open(GOLDENS) as f:
        return json.load(f)[model]


@pytest.mark.parametrize("name,model", [("smollm2", "smollm2-135m"), ("gemma3", "gemma3-270m")])
def test_greedy_follows_llamacpp(request, name, model):
    """Teacher-forced along llama.cpp's greedy path: every step we pick its token, or the two are tied."""
    engine = request.getfixturevalue(name)
    for case in _goldens(model):
        engine.reset()
        ids = engine.tokenize(case["prompt"], parse_special=True)
        assert ids == case["prompt_ids"]
        logits = engine.forward(ids)
        exact = 0
        for tok in case["ids"]:
            if int(logits.argmax()) == tok:
                exact += 1
            else:
                assert logits[tok] >= logits.max() - LLAMACPP_TIE_TOL, (case["prompt"], tok, logits.max() - logits[tok])
            logits = engine.forward([tok])
        assert exact >= LLAMACPP_EXACT * len(case["ids"]), (case["prompt"], exact)


def test_known_completions(smollm2, gemma3):
    assert smollm2.generate("The capital of France is", max_tokens=4, temperature=0).startswith(" Paris.")
    red = gemma3.generate("The three primary colors are", max_tokens=8, temperature=0)
    assert red.startswith(" red, ") and "blue" in red and "yellow" in red


def test_chat_answer_is_coherent(smollm2_path, capsys):
    rc = main(["run", "-m", smollm2_path, "--chat", "--temp", "0", "-n", "40", "What is photosynthesis?"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("Photosynthesis is")
    # on topic, whichever of the process's ingredients the 40 greedy tokens get to first (the last bits
    # of the logits, e.g. a kernel's summation order, may pick another near-tied wording)
    assert "plants" in out and any(w in out for w in ("light", "sun", "carbon dioxide", "oxygen", "energy"))
