"""The ARM tiers (NEON, dotprod) against the scalar tier, on an x86 machine: cross-compile csrc/ and
tests/native/neon_driver.c with aarch64-linux-gnu-gcc and run the driver under qemu-aarch64.
Skipped where those tools are missing (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"


@pytest.mark.skipif(not (shutil.which(CC) and shutil.which(QEMU)), reason=f"needs {CC} and {QEMU}")
def test_neon_and_dotprod_match_scalar(tmp_path):
    csrc = os.path.join(ROOT, "csrc")
    flags = ["-O2", "-std=gnu11", "-I" + csrc, "-DOXL_HAVE_OPENMP=0", "-DOXL_HAVE_TIER_NEON=1",
             "-DOXL_HAVE_TIER_DOTPROD=1", "-Wall", "-Wno-unused-function"]
    base = [os.path.join(csrc, f) for f in ("dispatch.c", "cpu.c", "matmul.c")]
    base += sorted(glob.glob(os.path.join(csrc, "scalar", "*.c")))
    base += sorted(glob.glob(os.path.join(csrc, "arm", "neon", "*.c")))
    base.append(os.path.join(ROOT, "tests", "native", "neon_driver.c"))
    objects = []
    jobs = [(src, flags) for src in base]
    jobs += [(src, flags + ["-march=armv8.2-a+dotprod"])
             for src in sorted(glob.glob(os.path.join(csrc, "arm", "dotprod", "*.c")))]
    for i, (src, fl) in enumerate(jobs):
        obj = str(tmp_path / f"{i}.o")
        out = subprocess.run([CC, *fl, "-c", src, "-o", obj], capture_output=True, text=True)
        assert out.returncode == 0, f"{src}:\n{out.stderr}"
        objects.append(obj)
    exe = str(tmp_path / "driver")
    out = subprocess.run([CC, "-static", *objects, "-o", exe, "-lm"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([QEMU, exe], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # the kernels under test really are the ARM ones
    for line in ("neon Q4_0: vec_dot by neon", "dotprod Q8_0: vec_dot by dotprod", "neon F16: vec_dot by neon"):
        assert line in run.stdout
    assert " 0 failures" in run.stdout
