"""Session snapshots: an engine's session as one msgpack blob, and its hardened loader.

Layout:
    8 bytes   magic b"OXLSNAP\\0"
    4 bytes   format version, uint32 little-endian (FORMAT_VERSION)
    8 bytes   body length, uint64 little-endian
    32 bytes  sha256 of the body (a flipped bit anywhere, K/V included, is caught)
    body      one msgpack map with str keys:
      arch         str            the model's architecture (general.architecture)
      fingerprint  map            {"size": file bytes, "head": sha256 of the first FINGERPRINT_SPAN bytes,
                                   "tail": sha256 of the last FINGERPRINT_SPAN bytes} (constant time)
      n_ctx, n_layer, kv_dim, n_vocab   int   (n_layer: the layers with K/V, i.e. the attention layers)
      kv_type      str            "f16" | "f32"
      tokens       bin            int32 LE, the n_past tokens whose K/V are cached
      pending      int | nil      the last sampled token, not yet run through the model
      k, v         bin            (n_layer, n_past, kv_dim) in kv_type, little-endian; v is nil (version 4)
                                  when the model reads its values from its K rows (latent attention,
                                  ForwardPlan.kv_v_is_k): the rows are stored once
      logits       bin | nil      float32 LE (n_vocab,): the last position's logits, when the session has
                                  them and no pending token (else nil: running the pending token makes them)
      seed         int | nil      the engine's default seed
      sampler      map | nil      {"config": SamplerConfig.to_dict(), "state": Sampler.get_state()}
                                  (the RNG stream and mirostat's mu)
      grammar      map | nil      {"source": GBNF text, "root": rule name, "state": GrammarMatcher.get_state()}
      state        bin            (version 2; only for models with recurrent layers) float32 LE: the recurrent
                                  state after the tokens, one slot of the state pool (runtime/recurrent_state.py);
                                  its size is checked against the model when the snapshot is restored

Loading trusts nothing: every length is bounded by the blob's size before msgpack allocates,
extension types and non-str map keys are refused, every field's type, range and shape is checked,
values too (K/V and logits finite, the sampler and grammar records rebuilt), what resuming would
allocate is bounded (a KV cache of n_ctx positions larger than the machine's memory is refused),
and the arrays are read-only views of the blob. Any problem is a SnapshotError.
"""
from __future__ import annotations

import errno
import hashlib
import os
import struct
from dataclasses import dataclass, field

import msgpack
import numpy as np

from oxillama.errors import GrammarError, SamplerError, SnapshotError, SnapshotWriteError
from oxillama.grammar import Grammar, GrammarMatcher
from oxillama.runtime.kv_cache import KV_DTYPES
from oxillama.sampling import Sampler, SamplerConfig

MAGIC = b"OXLSNAP\x00"
FORMAT_VERSION = 4       # 2: the recurrent state (version 1 snapshots, of attention-only models, still load);
                         # 3: short-conv / DeltaNet conv states in token rows (a version 2 state of those is refused)
                         # 4: v may be nil: latent attention's values are its K rows, stored once
# the families whose recurrent state's layout changed in version 3 (their conv tails were channel rows before)
_CONV_LAYOUT_V3 = {"lfm2", "lfm2moe", "qwen3next", "qwen35", "qwen35moe"}
_HEADER = struct.Struct("<8sIQ32s")
FINGERPRINT_SPAN = 4 * 2**20
_MAX_DEPTH = 16          # nesting of the plain values (sampler / grammar state)
_MAX_INT = 2**31 - 1     # bound for counts and ids


def _physical_memory() -> int | None:
    """Bytes of RAM, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class KVState:
    """A session's cache contents: what kv_snapshot() returns and kv_restore() takes.

    tokens: (n_past,) int32; k, v: (n_layer, n_past, kv_dim); pending: the sampled token not yet run;
    logits: (n_vocab,) float32 of the last position when there is no pending token, else None;
    state: a recurrent model's state after the tokens, (state_floats,) float32 (recurrent_state.py), else None.
    """
    tokens: np.ndarray
    k: np.ndarray
    v: np.ndarray
    pending: int | None = None
    logits: np.ndarray | None = None
    state: np.ndarray | None = None

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def memory_bytes(self) -> int:
        v = 0 if self.v is self.k else self.v.nbytes
        return self.k.nbytes + v + (0 if self.state is None else self.state.nbytes)


@dataclass
class Snapshot:
    """A decoded, validated snapshot (see the module docstring for the fields)."""
    arch: str
    fingerprint: dict
    n_ctx: int
    n_layer: int
    kv_dim: int
    n_vocab: int
    kv_type: str
    kv: KVState
    seed: int | None = None
    sampler: dict | None = None
    grammar: dict | None = None
    extra: dict = field(default_factory=dict)
    loras: list = field(default_factory=list)   # [(adapter sha256, scale)] the cached positions were run with


def model_fingerprint(path: str | os.PathLike) -> dict:
    """File size and sha256 of the first and last FINGERPRINT_SPAN bytes: tells models apart in
    constant time (a different quantisation or fine-tune changes the header or the tail)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = hashlib.sha256(f.read(FINGERPRINT_SPAN)).digest()
        f.seek(max(0, size - FINGERPRINT_SPAN))
        tail = hashlib.sha256(f.read(FINGERPRINT_SPAN)).digest()
    return {"size": size, "head": head, "tail": tail}


# ---- writing ----

def encode(snap: Snapshot) -> bytes:
    dtype = np.dtype(KV_DTYPES[snap.kv_type]).newbyteorder("<")
    kv = snap.kv
    body = {
        "arch": snap.arch,
        "fingerprint": dict(snap.fingerprint),
        "n_ctx": snap.n_ctx,
        "n_layer": snap.n_layer,
        "kv_dim": snap.kv_dim,
        "n_vocab": snap.n_vocab,
        "kv_type": snap.kv_type,
        "tokens": np.ascontiguousarray(kv.tokens, dtype="<i4").tobytes(),
        "pending": kv.pending,
        "k": np.ascontiguousarray(kv.k, dtype=dtype).tobytes(),
        "v": None if kv.v is kv.k else np.ascontiguousarray(kv.v, dtype=dtype).tobytes(),
        "logits": None if kv.logits is None else np.ascontiguousarray(kv.logits, dtype="<f4").tobytes(),
        "seed": snap.seed,
        "sampler": snap.sampler,
        "grammar": snap.grammar,
    }
    if snap.loras:
        body["loras"] = [[h, float(sc)] for h, sc in snap.loras]
    if kv.state is not None:
        body["state"] = np.ascontiguousarray(kv.state, dtype="<f4").tobytes()
    return frame(msgpack.packb(body, use_bin_type=True))


def frame(body: bytes, version: int = FORMAT_VERSION) -> bytes:
    """Header (magic, version, body length, body sha256) + body."""
    return _HEADER.pack(MAGIC, version, len(body), hashlib.sha256(body).digest()) + body


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write data to path so that a reader sees the old file or the whole new one, never a part:
    a temporary file in the same folder, fsync, then os.replace."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SnapshotWriteError(errno.ENOENT, f"cannot save the snapshot: the folder {folder} does not exist", path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):      # name the user's path, not our temporary file
            raise SnapshotWriteError(e.errno, f"cannot save the snapshot: {e.strerror or e}", path) from None
        raise


# ---- reading ----

def _refuse_ext(code, data):
    raise SnapshotError(f"snapshot holds a msgpack extension type {code}, which the format never uses")


def read_blob(blob_or_path) -> bytes:
    """The snapshot bytes from bytes-like data or a file path."""
    if isinstance(blob_or_path, (bytes, bytearray, memoryview)):
        return bytes(blob_or_path)
    if isinstance(blob_or_path, (str, os.PathLike)):
        try:
            with open(blob_or_path, "rb") as f:
                return f.read()
        except OSError as e:
            raise SnapshotError(f"cannot read snapshot {os.fspath(blob_or_path)}: {e.strerror or e}") from e
    raise SnapshotError(f"a snapshot is bytes or a path, got {type(blob_or_path).__name__}")


# a version field above this is a damaged header, not a snapshot from a future oxillama
_MAX_PLAUSIBLE_VERSION = 1000


def _body_matches_header(blob: bytes) -> bool:
    """Whether what follows the header has the header's checksum (so a damaged header, not another file)."""
    return hashlib.sha256(memoryview(blob)[_HEADER.size:]).digest() == blob[_HEADER.size - 32:_HEADER.size]


def decode(blob) -> Snapshot:
    """Parse and validate a snapshot blob (bytes-like); SnapshotError on any defect."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SnapshotError(f"a snapshot blob is bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if not blob:
        raise SnapshotError("not an oxillama snapshot: it is empty (0 bytes)")
    head = blob[:len(MAGIC)]
    if head != MAGIC[:len(head)] and (len(blob) < _HEADER.size or not _body_matches_header(blob)):
        raise SnapshotError(f"not an oxillama snapshot: it starts with {head!r}, not {MAGIC!r}")
    if len(blob) < _HEADER.size:
        raise SnapshotError(f"snapshot truncated: {len(blob)} bytes, the header alone is {_HEADER.size}")
    magic, version, body_len, digest = _HEADER.unpack_from(blob)
    if magic != MAGIC:      # the body still matches the header's checksum: the header was damaged
        raise SnapshotError(f"snapshot is corrupt: its header's magic bytes read {magic!r}, not {MAGIC!r}")
    if version < 1 or version > _MAX_PLAUSIBLE_VERSION:
        raise SnapshotError(f"snapshot is corrupt: its header's format version field reads {version}")
    if version > FORMAT_VERSION:
        raise SnapshotError(f"snapshot format version {version} is newer than this oxillama reads "
                            f"({FORMAT_VERSION}); upgrade oxillama")
    body = memoryview(blob)[_HEADER.size:]
    n = len(body)
    if n != body_len and hashlib.sha256(body).digest() == digest:
        raise SnapshotError(f"snapshot is corrupt: its header's length field reads {body_len} but the body, "
                            f"which matches the header's checksum, has {n} bytes")
    if n < body_len:
        raise SnapshotError(f"snapshot truncated: body has {n} of its {body_len} bytes")
    if n > body_len:
        raise SnapshotError(f"snapshot oversized: {n - body_len} bytes after its {body_len}-byte body")
    if hashlib.sha256(body).digest() != digest:
        raise SnapshotError("snapshot is corrupt: its body does not match the checksum in its header")
    try:
        # every length msgpack may allocate for is bounded by the bytes that are actually there
        d = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True, ext_hook=_refuse_ext,
                            timestamp=0, max_bin_len=n, max_str_len=n,
                            max_array_len=n, max_map_len=n // 2, max_ext_len=n)
    except SnapshotError:
        raise
    except msgpack.ExtraData:
        raise SnapshotError("snapshot has trailing bytes after its body (oversized or concatenated)") from None
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as e:
        raise SnapshotError(f"snapshot body is not valid msgpack (truncated or corrupt): {type(e).__name__}: {e}") \
            from None
    snap = _validate(d, n, version)
    if version < 3 and snap.kv.state is not None and snap.arch in _CONV_LAYOUT_V3:
        raise SnapshotError(f"snapshot format version {version} holds a {snap.arch} recurrent state in the layout "
                            f"older oxillama used (conv tails in channel rows); this version cannot restore it: run "
                            f"the prompt again and save a new snapshot")
    return snap


def _plain(obj, where: str, depth: int = 0) -> None:
    """Only nil, bool, int, float, str, bin, arrays and str-keyed maps, nested at most _MAX_DEPTH."""
    if depth > _MAX_DEPTH:
        raise SnapshotError(f"{where}: nested deeper than {_MAX_DEPTH}")
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return
    if isinstance(obj, list):
        for x in obj:
            _plain(x, where, depth + 1)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            if not isinstance(k, str):
                raise SnapshotError(f"{where}: map key {k!r} is not a string")
            _plain(x, where, depth + 1)
    else:
        raise SnapshotError(f"{where}: unexpected value of type {type(obj).__name__}")


_FIELDS = {"arch", "fingerprint", "n_ctx", "n_layer", "kv_dim", "n_vocab", "kv_type", "tokens", "pending", "k",
           "v", "logits", "seed", "sampler", "grammar"}
_OPTIONAL_FIELDS = {"loras",   # written only when the session used LoRA adapters
                    "state"}   # only for models with recurrent layers (format version 2)


def _validate(d, n_body: int, version: int = FORMAT_VERSION) -> Snapshot:
    if not isinstance(d, dict):
        raise SnapshotError(f"snapshot body must be a map, got {type(d).__name__}")
    _plain(d, "snapshot")
    missing = sorted(_FIELDS - set(d))
    if missing:
        raise SnapshotError(f"snapshot lacks field(s) {', '.join(missing)}")
    unknown = sorted(set(d) - _FIELDS - _OPTIONAL_FIELDS)
    if unknown:
        raise SnapshotError(f"snapshot has unknown field(s) {', '.join(unknown)}")

    def typed(name, types, what, obj=d):
        v = obj[name]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
            raise SnapshotError(f"snapshot field {name!r} must be {what}, got {type(v).__name__}")
        return v

    def count(name, lo=0, hi=_MAX_INT, obj=d):
        v = typed(name, int, "an int", obj)
        if not lo <= v <= hi:
            raise SnapshotError(f"snapshot field {name!r} = {v} is outside [{lo}, {hi}]")
        return v

    arch = typed("arch", str, "a string")
    fp = typed("fingerprint", dict, "a map")
    if set(fp) != {"size", "head", "tail"}:
        raise SnapshotError("snapshot fingerprint must have exactly size, head and tail")
    count("size", 0, 2**63 - 1, fp)
    for h in ("head", "tail"):
        if not isinstance(fp[h], bytes) or len(fp[h]) != 32:
            raise SnapshotError(f"snapshot fingerprint {h!r} must be a 32-byte sha256 digest")
    n_ctx, n_layer, kv_dim, n_vocab = count("n_ctx", 1), count("n_layer", 1), count("kv_dim", 1), count("n_vocab", 1)
    kv_type = typed("kv_type", str, "a string")
    if kv_type not in KV_DTYPES:
        raise SnapshotError(f"snapshot kv_type {kv_type!r} is not one of {', '.join(KV_DTYPES)}")
    dtype = np.dtype(KV_DTYPES[kv_type]).newbyteorder("<")

    tok_bytes = typed("tokens", bytes, "bytes")
    if len(tok_bytes) % 4:
        raise SnapshotError(f"snapshot tokens are {len(tok_bytes)} bytes, not a whole number of int32")
    tokens = np.frombuffer(tok_bytes, dtype="<i4")
    n_past = len(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= n_vocab):
        raise SnapshotError(f"snapshot tokens hold ids outside the vocabulary of {n_vocab}")
    pending = d["pending"]
    if pending is not None:
        pending = count("pending", 0, n_vocab - 1)
    if n_past + (pending is not None) > n_ctx:
        raise SnapshotError(f"snapshot holds {n_past} tokens (+ pending) but n_ctx is {n_ctx}")

    # shapes first, from the ints, so a huge claim fails before anything is allocated
    want = n_layer * n_past * kv_dim * dtype.itemsize
    if want > n_body:
        raise SnapshotError(f"snapshot claims K/V of {n_layer} layers x {n_past} positions x {kv_dim} "
                            f"({want} bytes), more than the blob holds")
    arrays = []
    v_is_k = version >= 4 and d["v"] is None      # latent attention: the values are the K rows, stored once
    for name in ("k",) if v_is_k else ("k", "v"):
        raw = typed(name, bytes, "bytes")
        if len(raw) != want:
            raise SnapshotError(f"snapshot {name} is {len(raw)} bytes, expected {want} for ({n_layer}, {n_past}, "
                                f"{kv_dim}) {kv_type}")
        arr = np.frombuffer(raw, dtype=dtype).reshape(n_layer, n_past, kv_dim)
        if arr.size and not np.isfinite(arr).all():    # what the model computes is finite
            raise SnapshotError(f"snapshot {name} cache holds NaN or infinite values")
        arrays.append(arr)
    if v_is_k:
        arrays.append(arrays[0])
    # what resuming allocates: a KV cache of n_ctx positions (resume's default n_ctx is the snapshot's)
    kv_cache_bytes = (1 if v_is_k else 2) * n_layer * n_ctx * kv_dim * dtype.itemsize
    ram = _physical_memory()
    if ram is not None and kv_cache_bytes > ram:
        raise SnapshotError(f"snapshot asks for a KV cache of n_ctx={n_ctx} ({kv_cache_bytes / 2**30:.1f} GiB), more "
                            f"than this machine's {ram / 2**30:.1f} GiB of memory")
    logits = d["logits"]
    if logits is not None:
        raw = typed("logits", bytes, "bytes or nil")
        if len(raw) != 4 * n_vocab:
            raise SnapshotError(f"snapshot logits are {len(raw)} bytes, expected {4 * n_vocab}")
        if pending is not None:
            raise SnapshotError("snapshot has both a pending token and logits")
        if n_past == 0:
            raise SnapshotError("snapshot has logits but no tokens")
        logits = np.frombuffer(raw, dtype="<f4")
        if not np.isfinite(logits).all():
            raise SnapshotError("snapshot logits hold NaN or infinite values")
    seed = d["seed"]
    if seed is not None:
        seed = count("seed", 0, 2**64 - 1)
    sampler = d["sampler"]
    if sampler is not None:
        sampler = typed("sampler", dict, "a map or nil")
        if set(sampler) != {"config", "state"} or not isinstance(sampler["config"], dict) \
                or not isinstance(sampler["state"], dict):
            raise SnapshotError("snapshot sampler must be a map of config and state maps")
        build_sampler(sampler)   # fail now, not on the first sampled token
    grammar = d["grammar"]
    if grammar is not None:
        grammar = typed("grammar", dict, "a map or nil")
        if set(grammar) != {"source", "root", "state"} or not isinstance(grammar["source"], str) \
                or not isinstance(grammar["root"], str) or not isinstance(grammar["state"], dict):
            raise SnapshotError("snapshot grammar must be a map of source (str), root (str) and state (map)")
    loras = []
    for item in d.get("loras", []) if isinstance(d.get("loras", []), list) else [None]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and len(item[0]) == 64
                and isinstance(item[1], float) and np.isfinite(item[1])):
            raise SnapshotError("snapshot loras must be a list of [sha256 hex, finite scale] pairs")
        loras.append((item[0], item[1]))
    state = None
    if "state" in d:
        raw = typed("state", bytes, "bytes")
        if not raw or len(raw) % 4:
            raise SnapshotError(f"snapshot recurrent state is {len(raw)} bytes, not a whole number of float32")
        state = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        if not np.isfinite(state).all():
            raise SnapshotError("snapshot recurrent state holds NaN or infinite values")
    kv = KVState(tokens=tokens, k=arrays[0], v=arrays[1], pending=pending, logits=logits, state=state)
    return Snapshot(arch=arch, fingerprint=fp, n_ctx=n_ctx, n_layer=n_layer, kv_dim=kv_dim, n_vocab=n_vocab,
                    kv_type=kv_type, kv=kv, seed=seed, sampler=sampler, grammar=grammar, loras=loras)


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def grammar_record(matcher) -> dict:
    return {"source": matcher.grammar.text, "root": matcher.grammar.root, "state": matcher.get_state()}


def build_matcher(record: dict, tokenizer):
    """A GrammarMatcher from grammar_record() over tokenizer's vocabulary; SnapshotError if invalid."""
    try:
        matcher = GrammarMatcher.from_tokenizer(Grammar(record["source"], record["root"]), tokenizer)
        matcher.set_state(record["state"])
    except (GrammarError, TypeError, ValueError, KeyError, RecursionError) as e:
        raise SnapshotError(f"snapshot grammar state is invalid: {e}") from None
    return matcher


def sampler_record(sampler) -> dict:
    return {"config": sampler.config.to_dict(), "state": sampler.get_state()}


def build_sampler(record: dict):
    """A Sampler from sampler_record(); SnapshotError when the record is not a valid one."""
    try:
        config = SamplerConfig.from_dict(record["config"])
        rng = record["state"].get("rng")
        seed = rng.get("seed") if isinstance(rng, dict) else None
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise SamplerError("the sampler state has no integer RNG seed")
        sampler = Sampler(config, seed=seed)
        sampler.set_state(record["state"])
    except (SamplerError, TypeError, ValueError, KeyError, OverflowError, AttributeError) as e:
        raise SnapshotError(f"snapshot sampler state is invalid: {e}") from None
    return sampler
