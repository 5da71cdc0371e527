"""Every SIMD tier against the scalar tier, including tiers this machine cannot run natively.

csrc/selftest.c compares every kernel of a tier's table with the scalar one (dequantize, quantize,
vec_dot, gemm, matvec, matmul, row and attention ops) on random blocks, random quant bytes, edge
lengths and odd row counts; `oxillama selftest` runs it on the tiers this CPU has. Here
tests/native/tier_check.c drives it for the others:

* AVX-512 (and AVX-512 VNNI when csrc/x86/avx512vnni/ exists) on an AVX2 machine: the tier's sources
  are compiled against SIMDe (Debian: libsimde-dev) through tests/native/simde/immintrin.h, and the
  dispatcher is told the CPU has AVX-512, so it builds the AVX-512 tables as on such a CPU.
* NEON and dotprod: cross-compiled (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross) and run under
  qemu-aarch64 -cpu max (Debian: qemu-user); natively on an AArch64 host.

Each harness is built once per session under the pytest tmp dir. Without the packages the tests
skip with a reason naming them (.ci/run installs them).
"""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CSRC = REPO / "csrc"
HERE = Path(__file__).resolve().parent
MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64")
IS_ARM64 = MACHINE in ("aarch64", "arm64")

BASE_FLAGS = ["-O2", "-std=gnu11", f"-I{CSRC}", "-DOXL_HAVE_OPENMP=0", "-Wall", "-Wno-unused-function",
              "-Wno-psabi"]
# ISA flags per tier folder, as setup.py compiles them; the AVX-512 tiers get AVX2's only, SIMDe
# supplying the AVX-512 instructions
X86_AVX2 = ["-mavx2", "-mfma", "-mf16c", "-mbmi2"]
X86_TIERS = {"avx2": X86_AVX2, "avx512": X86_AVX2, "avx512vnni": X86_AVX2}
SIMDE_TIERS = [t for t in ("avx512", "avx512vnni") if (CSRC / "x86" / t).is_dir()]
ARM_TIERS = {"neon": [], "dotprod": ["-march=armv8.2-a+dotprod"]}

TIMEOUT = 600


@dataclass
class KernelResult:
    tier: str
    subject: str      # type name or "ops"
    kernel: str
    owner: str        # tier whose code it is
    cases: int
    failures: int
    worst: float      # largest error / tolerance
    detail: str


def _compile_all(cc: list[str], jobs: list[tuple[Path, list[str]]], out: Path) -> list[str]:
    """Compile (source, flags) pairs into out/, two at a time; the object paths."""
    objects, running = [], []
    for i, (src, flags) in enumerate(jobs):
        obj = out / f"{i:02d}_{src.stem}.o"
        running.append((src, subprocess.Popen([*cc, *BASE_FLAGS, *flags, "-c", str(src), "-o", str(obj)],
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        objects.append(str(obj))
        if len(running) >= 2 or i == len(jobs) - 1:
            for s, p in running:
                log = p.communicate(timeout=TIMEOUT)[0]
                assert p.returncode == 0, f"compiling {s.relative_to(REPO)} failed:\n{log}"
            running = []
    return objects


def _base_sources() -> list[Path]:
    """The kernel library as setup.py builds it for oxillama._core, without its SIMD tiers, + the driver"""
    srcs = sorted(Path(p) for p in glob.glob(str(CSRC / "*.c")) + glob.glob(str(CSRC / "scalar" / "*.c"))
                  + glob.glob(str(CSRC / "layers" / "*.c")))
    return srcs + [HERE / "tier_check.c"]


def _tier_sources(folder: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(folder / "*.c")))


def _have_simde(cc: str) -> bool:
    probe = subprocess.run([cc, "-E", "-x", "c", "-", "-o", os.devnull], input="#include <simde/x86/avx512.h>\n",
                           capture_output=True, text=True)
    return probe.returncode == 0


def _x86_jobs(tiers: list[str]) -> list[tuple[Path, list[str]]]:
    """(source, flags) of the x86 harness"""
    defines = [f"-DOXL_HAVE_TIER_{t.upper()}=1" for t in ["avx2", *tiers]] + ["-DOXL_SIMDE_AVX512=1"]
    jobs = [(src, defines) for src in _base_sources()]
    jobs += [(src, X86_AVX2) for src in _tier_sources(CSRC / "x86" / "avx2")]
    for t in tiers:
        for src in _tier_sources(CSRC / "x86" / t):
            # -I its own folder: a copy elsewhere (the mutation test) still finds its "../" headers
            jobs.append((src, [*X86_TIERS[t], f"-I{HERE / 'simde'}", f"-I{src.parent}"]))
    return jobs


def _link(cc: list[str], objects: list[str], exe: Path, extra: list[str]) -> None:
    out = subprocess.run([*cc, *objects, "-o", str(exe), *extra, "-lm"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _run(cmd: list[str]) -> tuple[int, dict[str, dict[tuple[str, str], KernelResult]], str]:
    """Run a harness; (exit code, tier -> (subject, kernel) -> result, output)."""
    run = subprocess.run([*cmd, "--thorough"], capture_output=True, text=True, timeout=TIMEOUT)
    results: dict[str, dict[tuple[str, str], KernelResult]] = {}
    for line in run.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "RESULT":
            r = KernelResult(f[1], f[2], f[3], f[4], int(f[5]), int(f[6]), float(f[7]), f[8])
            results.setdefault(r.tier, {})[(r.subject, r.kernel)] = r
        elif f[0] == "DONE":
            results.setdefault(f[1], {})
            assert f[2].isdigit(), f"tier {f[1]}: {f[2]}"
    return run.returncode, results, run.stdout + run.stderr


@pytest.fixture(scope="session")
def simde_build(tmp_path_factory):
    """(compiler, objects of the SIMDe harness, its directory), built once."""
    if not IS_X86:
        pytest.skip("the AVX-512 tiers are x86 code")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("needs a C compiler (cc)")
    if not _have_simde(cc):
        pytest.skip("needs libsimde-dev (SIMDe headers, <simde/x86/avx512.h>); .ci/run installs it")
    from oxillama import _core
    if "avx2" not in _core.usable_tiers():
        pytest.skip("the AVX-512 tiers run their AVX2 parts natively: needs an AVX2 CPU")
    out = tmp_path_factory.mktemp("simde_harness")
    objects = _compile_all([cc], _x86_jobs(SIMDE_TIERS), out)
    return cc, objects, out


@pytest.fixture(scope="session")
def simde_results(simde_build):
    cc, objects, out = simde_build
    exe = out / "tier_check"
    _link([cc], objects, exe, ["-Wl,--wrap=oxl_cpu_detect"])
    return _run([str(exe), *SIMDE_TIERS])


@pytest.fixture(scope="session")
def arm_results(tmp_path_factory):
    if IS_ARM64:
        cc, runner = shutil.which("cc") or shutil.which("gcc"), []
        if not cc:
            pytest.skip("needs a C compiler (cc)")
    else:
        cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
        if not cc or not qemu:
            pytest.skip("needs aarch64-linux-gnu-gcc (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross) and "
                        "qemu-aarch64 (Debian: qemu-user); .ci/run installs them")
        runner = [qemu, "-cpu", "max"]
    probe = subprocess.run([cc, "-x", "c", "-", "-o", os.devnull, *([] if IS_ARM64 else ["-static"])],
                           input="#include <stdint.h>\nint main(void) { return 0; }\n", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("cannot build an AArch64 program: needs the AArch64 C library (Debian: libc6-dev-arm64-cross)")
    out = tmp_path_factory.mktemp("arm_harness")
    defines = [f"-DOXL_HAVE_TIER_{t.upper()}=1" for t in ARM_TIERS]
    jobs = [(src, defines) for src in _base_sources()]
    for t, flags in ARM_TIERS.items():
        jobs += [(src, flags) for src in _tier_sources(CSRC / "arm" / t)]
    objects = _compile_all([cc], jobs, out)
    exe = out / "tier_check"
    _link([cc], objects, exe, [] if IS_ARM64 else ["-static"])
    return _run([*runner, str(exe), *ARM_TIERS])


def _check_tier(results, tier):
    code, by_tier, output = results
    assert tier in by_tier and by_tier[tier], f"the harness did not check {tier}:\n{output[-3000:]}"
    checked = by_tier[tier].values()
    failing = [f"{r.subject} {r.kernel} ({r.owner}): {r.failures}/{r.cases} failed; first: {r.detail}"
               for r in checked if r.failures]
    assert not failing, f"{tier} kernels differ from the scalar tier:\n" + "\n".join(failing)
    assert code == 0, output[-3000:]
    # the tier's own kernels really ran (not the scalar or a parent's ones under its name)
    own = [r for r in checked if r.owner.split("/")[-1] == tier]
    assert own, f"no kernel of {tier} was checked"
    assert all(r.cases > 0 for r in own), [r for r in own if not r.cases]
    # everything that is not the scalar code was compared
    assert all(r.cases > 0 for r in checked if r.owner not in ("scalar", "none")), \
        [r for r in checked if r.owner not in ("scalar", "none") and not r.cases]
    return by_tier[tier]


@pytest.mark.parametrize("tier", SIMDE_TIERS)
def test_avx512_tiers_match_scalar_through_simde(simde_results, tier):
    results = _check_tier(simde_results, tier)
    if tier == "avx512":
        # the AVX-512 overrides, and what the tier inherits from AVX2 (run as on an AVX-512 CPU)
        for qtype in ("MXFP4", "F16"):
            assert results[(qtype, "vec_dot")].owner == "avx512" and results[(qtype, "vec_dot")].cases >= 40
        # the VNNI tier's sixteen-row kernels built with vpdpbusd emulated (csrc/x86/avx512/quants_*x16*_avx512.c),
        # their repacked layouts too; each product bit for bit the vec_dot beside it
        for qtype in ("Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"):
            for kernel in ("vec_dot", "gemm", "repacked"):
                r = results[(qtype, kernel)]
                assert r.owner == "avx512" and r.cases > 0, r
        # the i-quants sum each super-block as one exact integer: the scalar floats bit for bit
        for qtype in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"):
            for kernel in ("vec_dot", "gemm"):
                r = results[(qtype, kernel)]
                assert r.owner == "avx512" and r.cases > 0 and r.worst == 0, r
        assert results[("ops", "softmax")].cases > 0
    if tier == "avx512vnni":
        # its own multi-row kernels, checked bit for bit against the vec_dots beside them (inherited, or the
        # tier's own for the types it sums sixteen rows per register)
        for qtype in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q1_0", "MXFP4"):
            assert results[(qtype, "gemm")].owner == "avx512vnni" and results[(qtype, "gemm")].cases > 0
        for qtype in ("Q1_0", "MXFP4"):
            assert results[(qtype, "vec_dot")].owner == "avx512vnni" and results[(qtype, "vec_dot")].cases > 0
        assert results[("Q1_0", "repacked")].owner == "avx512vnni" and results[("Q1_0", "repacked")].cases > 0
        # the K-quants' sixteen-rows-a-register order (quants_kx16_vnni.c): its own vec_dot, and the repacked
        # product bit for bit that vec_dot (selftest fails any other float)
        for qtype in ("Q4_K", "Q5_K", "Q6_K"):
            for kernel in ("vec_dot", "gemm", "repacked"):
                r = results[(qtype, kernel)]
                assert r.owner == "avx512vnni" and r.cases > 0, r
        # TQ2_0 by vpdpbusd: one exact integer per super-block, the scalar floats bit for bit
        for kernel in ("vec_dot", "gemm"):
            r = results[("TQ2_0", kernel)]
            assert r.owner == "avx512vnni" and r.cases > 0 and r.worst == 0, r


@pytest.mark.parametrize("tier", sorted(ARM_TIERS))
def test_neon_and_dotprod_tiers_match_scalar(arm_results, tier):
    results = _check_tier(arm_results, tier)
    for qtype in ("Q4_0", "Q8_0", "Q4_K", "Q6_K"):
        assert results[(qtype, "vec_dot")].owner == tier and results[(qtype, "matvec")].cases > 0
    assert results[("F16", "vec_dot")].owner == "neon"
    # the 32-value block kernels replay the scalar float steps in order: equal bit for bit
    for qtype in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "IQ4_NL"):
        assert results[(qtype, "vec_dot")].worst == 0, results[(qtype, "vec_dot")]
    # so do the low-bit ones (exact integer sums per block or sub-block; NVFP4 per 16-value sub-block)
    for qtype in ("NVFP4", "Q1_0", "TQ1_0", "TQ2_0", "IQ2_XXS", "IQ2_S", "IQ3_S", "IQ1_M"):
        r = results[(qtype, "vec_dot")]
        assert r.owner == "neon" and r.cases > 0 and r.worst == 0, r


# A kernel whose two 256-bit halves land in the wrong place: the harness must notice.
MUTATION = (re.compile(r"(_mm512_inserti64x4\(_mm512_castsi256_si512\(\w+\), \w+, )1\)"), r"\g<1>0)")


def test_avx512_harness_catches_a_broken_kernel(simde_build, tmp_path):
    """Flip the lane-placement constant of the AVX-512 tier's 2-block join: vec_dot must fail."""
    cc, objects, out = simde_build
    src = CSRC / "x86" / "avx512" / "quants_legacy_avx512.c"
    text = src.read_text()
    broken, count = MUTATION[0].subn(MUTATION[1], text)
    assert count >= 1, f"the mutation no longer matches {src.name}: update MUTATION to a constant it uses"
    mutant = tmp_path / src.name
    mutant.write_text(broken)
    jobs = _x86_jobs(SIMDE_TIERS)
    index = next(i for i, (s, _) in enumerate(jobs) if s == src)
    obj = tmp_path / "mutant.o"
    flags = jobs[index][1]
    comp = subprocess.run([cc, *BASE_FLAGS, *flags, "-c", str(mutant), "-o", str(obj)], capture_output=True,
                          text=True)
    assert comp.returncode == 0, comp.stdout + comp.stderr
    exe = tmp_path / "tier_check_mutant"
    _link([cc], [str(obj) if i == index else o for i, o in enumerate(objects)], exe, ["-Wl,--wrap=oxl_cpu_detect"])
    code, by_tier, output = _run([str(exe), "avx512"])
    assert code == 1, output[-2000:]
    failed = {(r.subject, r.kernel) for r in by_tier["avx512"].values() if r.failures}
    assert ("MXFP4", "vec_dot") in failed, sorted(failed)
    # the tier's other kernels (the sixteen-row Q4_0, Q8_0 and Q4_K, softmax), untouched, still pass
    assert not {("Q4_0", "vec_dot"), ("Q8_0", "vec_dot"), ("Q4_K", "vec_dot"), ("ops", "softmax")} & failed, \
        sorted(failed)

