"""Build oxillama's C kernels and Cython wrappers.

Layout of the native code (see csrc/README.md):

* ``csrc/*.c`` and ``csrc/scalar/*.c`` are compiled with baseline flags only;
  the scalar kernels are always present and are the reference.
* Each SIMD tier folder (``csrc/x86/avx2``, ``csrc/x86/avx512``, ...) is compiled
  as its own objects with that tier's ISA flags, never the whole build. The C
  dispatcher picks a tier at import time from CPUID + XCR0, so a wheel built on
  an AVX-512 machine still runs on a CPU without it.
* ``oxillama._core`` links all of the above. Any other ``oxillama/<pkg>/_*.pyx``
  becomes its own extension, with the C sources of ``csrc/<pkg>/`` if present.

Environment switches:
  OXILLAMA_NO_OPENMP=1    build single-threaded even when OpenMP is available.
  OXILLAMA_DEBUG=1        -O0 -g, for debugging the C code.
"""

import glob
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64", "i386", "i686", "x86")
IS_ARM64 = MACHINE in ("arm64", "aarch64")
IS_MACOS = sys.platform == "darwin"

# (tier name, folder, ISA flags). Order matters: each tier may assume the ones before it.
_X86_AVX2 = ["-mavx2", "-mfma", "-mf16c", "-mbmi2"]
_X86_AVX512 = _X86_AVX2 + ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"]
TIERS_X86 = [
    ("avx2", "csrc/x86/avx2", _X86_AVX2),
    ("avx512", "csrc/x86/avx512", _X86_AVX512),
    ("avx512vnni", "csrc/x86/avx512vnni", _X86_AVX512 + ["-mavx512vnni"]),
]
TIERS_ARM64 = [
    ("neon", "csrc/arm/neon", []),
    ("dotprod", "csrc/arm/dotprod", ["-march=armv8.2-a+dotprod"]),
]
TIERS = TIERS_X86 if IS_X86 else TIERS_ARM64 if IS_ARM64 else []

DEBUG = os.environ.get("OXILLAMA_DEBUG") == "1"
C_FLAGS = (["-O0", "-g"] if DEBUG else ["-O3"]) + [
    "-std=gnu11",
    "-fno-math-errno",
    "-Wall",
    "-Wno-unused-function",
]


def _rel(paths):
    return sorted(os.path.relpath(p, ROOT) for p in paths)


def _try_compile(cc, flags, link_flags, source):
    """Compile and link a tiny program; True if the toolchain accepts the flags."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write(source)
        cmd = cc + flags + [src, "-o", os.path.join(tmp, "t")] + link_flags
        try:
            return subprocess.run(cmd, capture_output=True).returncode == 0
        except OSError:
            return False


_OMP_TEST = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"


def detect_openmp(cc):
    """Return (compile_flags, link_flags, found)."""
    if os.environ.get("OXILLAMA_NO_OPENMP") == "1":
        print("oxillama: OXILLAMA_NO_OPENMP=1, building single-threaded kernels")
        return [], [], False
    candidates = [(["-fopenmp"], ["-fopenmp"])]
    if IS_MACOS:
        prefixes = [os.environ.get("LIBOMP_PREFIX", ""), "/opt/homebrew/opt/libomp", "/usr/local/opt/libomp",
                    "/opt/local"]
        brew = shutil.which("brew")
        if brew:
            try:
                out = subprocess.run([brew, "--prefix", "libomp"], capture_output=True, text=True)
                if out.returncode == 0:
                    prefixes.insert(0, out.stdout.strip())
            except OSError:
                pass
        for p in filter(None, prefixes):
            inc, lib = os.path.join(p, "include"), os.path.join(p, "lib")
            if os.path.isdir(inc):
                candidates.append((["-Xpreprocessor", "-fopenmp", "-I" + inc],
                                   ["-L" + lib, "-lomp", "-Wl,-rpath," + lib]))
    for cflags, lflags in candidates:
        if _try_compile(cc, cflags, lflags, _OMP_TEST):
            return cflags, lflags, True
    warnings.warn("oxillama: OpenMP not found (on macOS: `brew install libomp`); "
                  "building single-threaded kernels")
    return [], [], False


class BuildExt(build_ext):
    """build_ext that compiles each SIMD tier's sources with that tier's flags only."""

    def build_extensions(self):
        cc = ["cc"]
        if hasattr(self.compiler, "compiler_so"):
            # the compiler command without its flags: CC="ccache gcc" is two words, both needed
            so = list(self.compiler.compiler_so)
            cc = so[:next((i for i, w in enumerate(so) if w.startswith("-")), len(so))] or so[:1]
        omp_c, omp_l, has_omp = detect_openmp(cc)
        tier_flags = {}
        for name, folder, flags in TIERS:
            if not glob.glob(os.path.join(ROOT, folder, "*.c")):
                continue
            if _try_compile(cc, flags, [], "int main(void){return 0;}\n"):
                tier_flags[name] = (folder, flags)
            else:
                warnings.warn(f"oxillama: compiler does not accept {flags}; tier {name} not built")
        stamp = self._force_if_flags_changed(cc, omp_c, tier_flags)
        for ext in self.extensions:
            if not self.force and not self._outdated(ext):
                continue    # build_ext skips it too: a second `pip install .[extra]` reuses build/
            macros = [("OXL_HAVE_OPENMP", "1" if has_omp else "0")]
            kernels, c_sources = EXTRA.get(ext.name, (False, []))
            if kernels:
                macros += [("OXL_HAVE_TIER_" + n.upper(), "1") for n in tier_flags]
            ext.define_macros = list(ext.define_macros or []) + macros
            ext.extra_compile_args = list(ext.extra_compile_args or []) + omp_c
            ext.extra_link_args = list(ext.extra_link_args or []) + omp_l
            objects = []
            if c_sources:
                objects += self._compile(c_sources, os.path.join(self.build_temp, "base"), ext.define_macros,
                                         C_FLAGS + omp_c)
            if kernels:
                for name, (folder, flags) in tier_flags.items():
                    srcs = _rel(glob.glob(os.path.join(ROOT, folder, "*.c")))
                    objects += self._compile(srcs, os.path.join(self.build_temp, "tier_" + name),
                                             ext.define_macros + [("OXL_TIER", name)], C_FLAGS + flags + omp_c)
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extensions()
        stamp()

    def _compile(self, sources, output_dir, macros, postargs) -> list[str]:
        """The kernel objects, compiling only those older than their source or any C header (distutils'
        compile() would redo them all, e.g. when only the Cython wrapper changed)."""
        headers = glob.glob("csrc/**/*.h", recursive=True)
        objects = self.compiler.object_filenames(sources, output_dir=output_dir)
        stale = [src for src, obj in zip(sources, objects) if self.force or _newer_group([src] + headers, obj)]
        if stale:
            self.compiler.compile(stale, output_dir=output_dir, macros=macros, include_dirs=["csrc"],
                                  extra_postargs=postargs, depends=headers)
        return objects

    def _outdated(self, ext) -> bool:
        """build_ext's own test: a source or dependency (every C file and header) is newer than the module."""
        return _newer_group(list(ext.sources) + list(ext.depends or []), self.get_ext_fullpath(ext.name))

    def _force_if_flags_changed(self, cc, omp_c, tier_flags):
        """Rebuild everything when the compiler, OpenMP, the tiers or the C flags differ from the last build
        (a file's timestamp does not say that); returns the function that notes this build's flags once it
        succeeded."""
        path = os.path.join(self.build_temp, "oxillama-build-flags.txt")
        flags = repr((cc, omp_c, sorted(tier_flags.items()), C_FLAGS, sys.version))
        try:
            with open(path) as f:
                same = f.read() == flags
        except OSError:
            same = False
        if not same:
            self.force = True

        def stamp():
            os.makedirs(self.build_temp, exist_ok=True)
            with open(path, "w") as f:
                f.write(flags)
        return stamp


def _newer_group(sources, target) -> bool:
    if not os.path.exists(target):
        return True
    mtime = os.path.getmtime(target)
    return any(not os.path.exists(s) or os.path.getmtime(s) > mtime for s in sources)


# extension name -> (links the kernel library with its SIMD tiers, extra C sources).
# cythonize() rebuilds Extension objects, so this lives beside them rather than on them.
EXTRA = {}


def make_extensions():
    from Cython.Build import cythonize

    kernel_sources = _rel(glob.glob(os.path.join(ROOT, "csrc", "*.c"))
                          + glob.glob(os.path.join(ROOT, "csrc", "scalar", "*.c"))
                          + glob.glob(os.path.join(ROOT, "csrc", "layers", "*.c")))
    # every C file and header counts as a dependency, so editing one relinks the module
    depends = _rel(glob.glob(os.path.join(ROOT, "csrc", "**", "*.[ch]"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "oxillama", "*.pxi"))
                   + glob.glob(os.path.join(ROOT, "oxillama", "*.pxd")))
    exts = [Extension("oxillama._core", ["oxillama/_core.pyx"], include_dirs=["csrc"], depends=depends)]
    EXTRA["oxillama._core"] = (True, kernel_sources)
    for pyx in _rel(glob.glob(os.path.join(ROOT, "oxillama", "*", "_*.pyx"))):
        pkg = pyx.split(os.sep)[1]
        modname = pyx[:-4].replace(os.sep, ".")
        exts.append(Extension(modname, [pyx], include_dirs=["csrc"], depends=depends))
        EXTRA[modname] = (False, _rel(glob.glob(os.path.join(ROOT, "csrc", pkg, "*.c"))))
    # a module whose generated C is newer than our .pyx/.pxd/.pxi files and setup.py, by this Cython
    # version, is not generated again: pip's isolated build env holds a fresh copy of Cython's own
    # includes each time, which would otherwise make every `pip install .[extra]` start from scratch
    fresh = [ext for ext in exts if _fresh_cython_output(ext.sources[0])]
    for ext in fresh:
        ext.sources = [ext.sources[0][:-len(".pyx")] + ".c"]
    stale = [ext for ext in exts if ext not in fresh]
    return fresh + (cythonize(stale, language_level=3, compiler_directives={
        "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False,
        "embedsignature": True,
    }) if stale else [])


def _fresh_cython_output(pyx: str) -> bool:
    import Cython
    c = pyx[:-len(".pyx")] + ".c"
    ours = [pyx, "setup.py"] + glob.glob("oxillama/**/*.pxd", recursive=True) + glob.glob("oxillama/**/*.pxi",
                                                                                            recursive=True)
    if _newer_group(ours, c):
        return False
    with open(c, encoding="utf-8", errors="replace") as f:
        return f.readline().strip() == f"/* Generated by Cython {Cython.__version__} */"


setup(ext_modules=make_extensions(), cmdclass={"build_ext": BuildExt})
