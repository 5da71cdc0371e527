"""Repacked weights (ForwardPlan(repack=True), the default): a model whose matrices have a repacked layout on
this CPU's tier (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants, IQ4_NL and IQ4_XS on AVX-512 VNNI and on AVX2) reads a
copy of them made at load, and must give
exactly the logits of the file layout, in every call shape (test_invariance.py's checks). A llama model of n_embd
256 with every matrix of the type, written at test time (test_invariance_quants.write_model)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from test_invariance import assert_same, check_batched, check_call_shapes, chunked_logits, prefill_logits, tokens_for
from test_invariance_quants import N_TOKENS, write_model

import oxillama
from oxillama import InferenceEngine, _core

TYPES = ["Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]


@pytest.fixture(scope="module", params=TYPES)
def model_path(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("repack") / f"llama-{request.param}.gguf"
    write_model(path, request.param, seed=3)
    return path, request.param


def test_repacked_copy_gives_the_file_layouts_logits_bit_for_bit(model_path):
    path, qtype = model_path
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2) as packed, \
            InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2, repack=False) as plain:
        has_layout = qtype in _core.repacked_layouts()
        # every matrix but the embedding table (read by rows from the file) is copied, once
        assert (packed.model.repacked_bytes > 0) == has_layout
        assert plain.model.repacked_bytes == 0
        toks = tokens_for(packed, N_TOKENS)
        ref = prefill_logits(plain, toks)
        assert np.isfinite(ref).all() and ref.std() > 0
        assert_same(prefill_logits(packed, toks), ref, "prefill, repacked against the file layout")
        assert_same(chunked_logits(packed, toks, 1), ref, "decode, repacked against the file layout")
        toks, ref = check_call_shapes(packed, N_TOKENS)
        check_batched(packed, toks, ref)


def test_a_layer_draft_shares_the_repacked_copies(model_path):
    path, qtype = model_path
    if qtype not in _core.repacked_layouts():
        pytest.skip(f"no repacked layout for {qtype} on the {_core.active_tier()} tier")
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2) as e:
        before = len(e.model._repacked)
        draft = e.model.first_layers(1)
        assert len(e.model._repacked) == before       # no new copy: the draft reads the model's
        assert 0 < draft.repacked_bytes < e.model.repacked_bytes


def test_system_info_names_the_layouts():
    info = oxillama.system_info()
    assert info["repacked_layouts"] == _core.repacked_layouts()
    for qtype in info["repacked_layouts"]:
        assert qtype in info["kernels"]


def test_no_repack_flag_keeps_the_file_layout_only(model_path):
    from oxillama.cli import _options, build_parser
    path, qtype = model_path
    for flags, copied in (([], qtype in _core.repacked_layouts()), (["--no-repack"], False)):
        args = build_parser().parse_args(["run", "-m", str(path), "-c", "64", *flags, "hi"])
        with _options.engine_from_args(args) as e:
            assert (e.model.repacked_bytes > 0) == copied, flags


def test_inspect_says_what_loading_will_repack(model_path):
    """`oxillama inspect` gives the RAM of the copies before anything is loaded: what the plan then makes."""
    from oxillama.cli.inspect import summarize
    from oxillama.gguf import GGUFFile
    path, qtype = model_path
    with GGUFFile(path) as f:
        rp = summarize(f, tensors=False)["repack"]
    with InferenceEngine.from_gguf(path, n_ctx=64, n_threads=1) as e:
        assert rp["nbytes"] == e.model.repacked_bytes
        assert rp["layouts"] == e.model.plan.repacked_layouts


def test_inspect_counts_a_tied_output(smollm2_path):
    """SmolLM2 has no output.weight: its embedding table is the output matrix, which the plan repacks (its rows
    for the embedding lookup still come from the file), and inspect counts it."""
    from oxillama.cli.inspect import summarize
    from oxillama.gguf import GGUFFile
    with GGUFFile(smollm2_path) as f:
        assert "output.weight" not in f.tensors
        rp = summarize(f, tensors=False)["repack"]
        embd = f.tensors["token_embd.weight"]
    with InferenceEngine.from_gguf(smollm2_path, n_ctx=64, n_threads=1) as e:
        assert rp["nbytes"] == e.model.repacked_bytes
        if embd.qtype in _core.repacked_layouts():   # the tied output's copy, and the Q4_1 matrices' where they have one
            assert rp["nbytes"] >= embd.nbytes + ("Q4_1" in _core.repacked_layouts())


@pytest.mark.parametrize("qtype", [t for t in TYPES if t in ("Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1")])   # tiny_moe: n_embd 64 < QK_K
def test_repacked_experts_give_the_file_layouts_logits_bit_for_bit(tmp_path, qtype):
    """The stacked experts (each expert whole groups of REPACK_ROW_ALIGN rows) are repacked too: layers/moe.c
    reads each chosen expert's rows from the copy, one token or a few per expert, and the logits stay the file
    layout's in every call shape; `inspect` counts the experts' copies as loading makes them."""
    from oxillama.cli.inspect import summarize
    from oxillama.gguf import GGUFFile
    from tiny_moe import N_EMBD, N_FF_EXP, write_tiny_moe   # tests/models, on the path via test_invariance
    if qtype not in _core.repacked_layouts():
        pytest.skip(f"no repacked layout for {qtype} on the {_core.active_tier()} tier")
    assert N_FF_EXP % _core.REPACK_ROW_ALIGN == 0 and N_EMBD % _core.REPACK_ROW_ALIGN == 0
    path = write_tiny_moe(tmp_path / "qwen2moe.gguf", "qwen2moe", qtype=qtype)   # with a shared expert
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2) as packed, \
            InferenceEngine.from_gguf(path, n_ctx=256, n_threads=2, repack=False) as plain:
        with GGUFFile(path) as f:
            exps = sum(t.nbytes for t in f.tensors.values() if "_exps" in t.name)
            assert summarize(f, tensors=False)["repack"]["nbytes"] == packed.model.repacked_bytes
        assert packed.model.repacked_bytes > exps   # the experts' copies and the dense matrices'
        toks = tokens_for(packed, 150)
        ref = prefill_logits(plain, toks)
        assert_same(prefill_logits(packed, toks), ref, "prefill, repacked experts against the file layout")
        assert_same(chunked_logits(packed, toks, 1), ref, "decode, repacked experts against the file layout")
        check_batched(packed, toks, ref)


def test_the_avx2_tiers_repacked_copies_give_the_file_layouts_logits(tmp_path):
    """The AVX2 tier's eight-row layouts, one for every type above (csrc/x86/avx2/quants_x8_avx2.c,
    quants_x8b_avx2.c, quants_kx8_avx2.c; the AVX-512 tier inherits those whose vec_dot it does not replace) on a
    CPU whose active tier is higher: this module's bit-for-bit test in a child process with that tier forced
    (test_invariance.py checks their kernels on every usable tier; this, the whole forward)."""
    if "avx2" not in _core.usable_tiers() or _core.active_tier() == "avx2":
        pytest.skip("the avx2 tier is not a lower usable tier here (where it is the active one, the tests above run it)")
    assert set(TYPES) <= set(_core.repacked_layouts("avx2"))
    env = dict(os.environ, OXILLAMA_DISABLE_CPU_FEATURES="avx512")
    select = "test_repacked_copy_gives_the_file_layouts_logits_bit_for_bit"
    res = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", select],
                         env=env, capture_output=True, text=True, cwd=tmp_path)   # a neutral folder: the installed package, not the source tree
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert f"{len(TYPES)} passed" in res.stdout, res.stdout[-2000:]


def test_the_avx512_tiers_repacked_copies_give_the_file_layouts_logits(tmp_path):
    """The AVX-512 tier (no VNNI) builds the VNNI tier's sixteen-row layouts with vpdpbusd emulated
    (csrc/x86/avx512/quants_*x16*_avx512.c): this module's bit-for-bit test in a child with that tier forced."""
    if "avx512" not in _core.usable_tiers() or _core.active_tier() == "avx512":
        pytest.skip("the avx512 tier is not a lower usable tier here (where it is the active one, the tests above run it)")
    assert set(TYPES) <= set(_core.repacked_layouts("avx512"))
    env = dict(os.environ, OXILLAMA_DISABLE_CPU_FEATURES="avx512vnni")
    select = "test_repacked_copy_gives_the_file_layouts_logits_bit_for_bit"
    res = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", select],
                         env=env, capture_output=True, text=True, cwd=tmp_path)   # a neutral folder, as above
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert f"{len(TYPES)} passed" in res.stdout, res.stdout[-2000:]
