"""`oxillama selftest` / `python -m oxillama.selftest`: this CPU's tiers against the scalar reference."""
import os

import pytest

import oxillama
from oxillama import _core, selftest
from oxillama.cli import main
from oxillama.errors import InvalidArgumentError

SIMD_TIERS = [t for t in _core.usable_tiers() if t != "scalar"]


@pytest.fixture(scope="module")
def report():
    return selftest.run_selftest()


def test_every_usable_tier_passes(report):
    assert report.tiers == SIMD_TIERS
    assert report.ok, [f"{c.tier} {c.subject} {c.kernel}: {c.detail}" for c in report.failures]
    assert all(0 <= c.worst <= 1 for c in report.checks)


@pytest.mark.skipif(not SIMD_TIERS, reason="only the scalar tier runs on this CPU")
def test_each_tier_checks_what_system_info_reports(report):
    """The kernels in use (system_info()["kernels"]) are the ones the selftest compared."""
    active = oxillama.system_info()["active_tier"]
    checks = {(c.subject, c.kernel): c for c in report.checks if c.tier == active}
    for qtype, tier in oxillama.system_info()["kernels"].items():
        c = checks[(qtype, "vec_dot")]
        assert c.owner == tier, (qtype, c.owner, tier)
        assert (c.cases > 0) == (tier != "scalar"), c
    # every quant type's dequantize / quantize / products, and the row ops, are accounted for
    for qtype in oxillama.system_info()["kernels"]:
        for kernel in ("to_float", "from_float", "vec_dot", "gemm", "matvec", "matmul"):
            assert (qtype, kernel) in checks
    assert ("ops", "softmax") in checks and ("ops", "attn_values_f16_group") in checks


@pytest.mark.skipif(not SIMD_TIERS, reason="only the scalar tier runs on this CPU")
def test_cli_prints_each_quant_types_tier(capsys):
    tier = SIMD_TIERS[-1]
    assert main(["selftest", "--tier", tier]) == 0
    out = capsys.readouterr().out
    assert f"{tier} against scalar" in out
    assert "PASS" in out
    for qtype in ("Q4_0", "Q8_0", "Q4_K", "Q6_K", "F16", "ops"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(qtype + " "))
        assert " ok " in line and ("vec_dot" in line or qtype == "ops"), line


def test_mismatch_exits_non_zero(monkeypatch, capsys):
    """A kernel that differs from the scalar one is reported with its first failing case and exit code 1."""
    bad = ("Q4_0", "vec_dot", "avx2", 8, 3, 1e5, "n 64 (random quant bytes): tier 1 scalar 2")
    monkeypatch.setattr(_core, "check_tier", lambda tier, thorough, seed: [bad])
    monkeypatch.setattr(_core, "usable_tiers", lambda: ["scalar", "avx2"])
    assert main(["selftest"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH Q4_0 vec_dot (avx2 code): 3 of 8 cases; first: n 64 (random quant bytes)" in out
    assert "FAIL: 1 kernel differs from the scalar tier" in out


def test_unusable_tier_is_an_error(capsys):
    with pytest.raises(InvalidArgumentError, match="'sparc' is not usable"):
        selftest.run_selftest(["sparc"])
    assert main(["selftest", "--tier", "sparc"]) == 1
    assert "not usable on this CPU" in capsys.readouterr().err


def test_module_entry_point(python_runner):
    # the same oxillama as this test imports (the installed one in CI, an in-place build in a checkout)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(oxillama.__file__)))
    out = python_runner("import sys; from oxillama.selftest import main; sys.exit(main(['--tier', 'scalar']))",
                        env=env)
    assert out.returncode == 0, out.stderr
    # scalar against itself: every kernel is the reference, nothing to compare
    assert "scalar: to_float, from_float, vec_dot" in out.stdout and "PASS" in out.stdout
    out = python_runner("import runpy, sys; sys.argv = ['x', '--tier', 'scalar', '--seed', '5']; "
                        "runpy.run_module('oxillama.selftest', run_name='__main__')", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout
