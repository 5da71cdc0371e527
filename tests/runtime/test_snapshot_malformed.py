"""Hardened snapshot loading: every malformed blob raises SnapshotError, leaves the session as it was,
and allocates nothing beyond the blob's own size."""
import os
import tracemalloc

import msgpack
import numpy as np
import pytest

from oxillama.errors import SnapshotError
from oxillama.runtime import snapshot as snap

N_TRUNCATIONS = 40
N_FLIPS = 40
# a refused blob may cost a few copies of itself (bytes, the body view, msgpack's objects), never more
MAX_ALLOC_FACTOR = 4
ALLOC_SLACK_BYTES = 1 << 20


@pytest.fixture(scope="module")
def session(smollm2):
    """A small real session (prompt + sampled tokens, sampler with state) and its snapshot."""
    smollm2.reset()
    smollm2.generate("The sea was calm and", max_tokens=2, seed=11, temperature=0.8, top_k=20)
    blob = smollm2.snapshot()
    return smollm2, blob, smollm2.tokens


def body_of(blob: bytes) -> dict:
    return msgpack.unpackb(blob[snap._HEADER.size:], raw=False)


def resign(body) -> bytes:
    """A correctly framed blob (right length and checksum) around a crafted body."""
    raw = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    return snap.frame(raw)


def edited(blob: bytes, **changes) -> bytes:
    d = body_of(blob)
    for k, v in changes.items():
        d[k] = v
    return resign(d)


def without(blob: bytes, key: str) -> bytes:
    d = body_of(blob)
    del d[key]
    return resign(d)


def sampler_edit(blob: bytes, fn) -> bytes:
    d = body_of(blob)
    fn(d["sampler"])
    return resign(d)


def nested(depth: int):
    x = []
    for _ in range(depth):
        x = [x]
    return x


def crafted_cases(blob: bytes) -> dict:
    d = body_of(blob)
    n_past = len(d["tokens"]) // 4
    hdr = snap._HEADER.size
    return {
        "empty": b"",
        "header only, cut": blob[:10],
        "wrong magic": b"NOTASNAP" + blob[8:],
        "newer version": snap.frame(blob[hdr:], version=snap.FORMAT_VERSION + 1),
        "version zero": snap.frame(blob[hdr:], version=0),
        "body shorter than its length": blob[:-1],
        "trailing bytes (oversized)": blob + b"\x00" * 16,
        "checksum mismatch": blob[:hdr] + bytes([blob[hdr] ^ 0x01]) + blob[hdr + 1:],
        "body is an array": resign([1, 2, 3]),
        "body is an int": resign(7),
        "body is not msgpack": resign(b"\xc1\xc1\xc1"),
        "body cut, re-signed": resign(blob[hdr:len(blob) // 2]),
        "two objects in the body": resign(blob[hdr:] + msgpack.packb(1)),
        "missing k": without(blob, "k"),
        "missing sampler": without(blob, "sampler"),
        "unknown field": edited(blob, surprise=1),
        "n_layer is a string": edited(blob, n_layer="30"),
        "n_layer is a bool": edited(blob, n_layer=True),
        "n_ctx is a float": edited(blob, n_ctx=512.5),
        "n_ctx negative": edited(blob, n_ctx=-1),
        "tokens as a list": edited(blob, tokens=list(range(n_past))),
        "tokens not whole int32s": edited(blob, tokens=d["tokens"][:-1]),
        "token id outside the vocabulary": edited(blob, tokens=d["tokens"][:-4] + (10**8).to_bytes(4, "little")),
        "pending outside the vocabulary": edited(blob, pending=d["n_vocab"]),
        "pending negative": edited(blob, pending=-3),
        "more tokens than n_ctx": edited(blob, n_ctx=n_past),
        "k too short": edited(blob, k=d["k"][:-2]),
        "v missing rows": edited(blob, v=d["v"][: len(d["v"]) // 2]),
        "k claims a huge shape": edited(blob, n_layer=2**30),
        "kv_type unknown": edited(blob, kv_type="q4_0"),
        "kv_type f32 with f16 bytes": edited(blob, kv_type="f32"),
        "logits wrong length": edited(blob, logits=b"\x00" * 12),
        "logits and a pending token": edited(blob, logits=b"\x00" * (4 * d["n_vocab"])),
        "fingerprint head differs": edited(blob, fingerprint=dict(d["fingerprint"], head=b"\x00" * 32)),
        "fingerprint size differs": edited(blob, fingerprint=dict(d["fingerprint"], size=12345)),
        "fingerprint head a string": edited(blob, fingerprint=dict(d["fingerprint"], head="abc")),
        "fingerprint missing tail": edited(blob, fingerprint={"size": 1, "head": b"\x00" * 32}),
        "another architecture": edited(blob, arch="gemma3"),
        "kv_dim and n_layer swapped shape": edited(blob, n_layer=d["n_layer"] * 2, kv_dim=d["kv_dim"] // 2),
        "another vocabulary": edited(blob, n_vocab=d["n_vocab"] + 1),
        "sampler config unknown key": sampler_edit(blob, lambda s: s["config"].update(temprature=1.0)),
        "sampler config bad value": sampler_edit(blob, lambda s: s["config"].update(top_p=7.0)),
        "sampler rng state not hex": sampler_edit(blob, lambda s: s["state"]["rng"].update(state="zz")),
        "sampler rng seed a string": sampler_edit(blob, lambda s: s["state"]["rng"].update(seed="1")),
        "sampler state version": sampler_edit(blob, lambda s: s["state"].update(version=99)),
        "sampler chain state wrong length": sampler_edit(blob, lambda s: s["state"].update(chain=[])),
        "sampler not a map": edited(blob, sampler=[1, 2]),
        "seed negative": edited(blob, seed=-5),
        "extension type": resign(msgpack.packb(dict(d, seed=msgpack.ExtType(5, b"xyz")), use_bin_type=True)),
        "timestamp extension": resign(msgpack.packb(dict(d, seed=msgpack.Timestamp(1, 0)), use_bin_type=True)),
        "integer map key": resign(msgpack.packb(dict(d, grammar={1: 2}), use_bin_type=True)),
        "bytes map key": resign(msgpack.packb({**d, b"arch": "llama"}, use_bin_type=True)),
        "invalid utf-8 string": resign(b"\x81\xa3\xff\xfe\xfd\x01"),
        "deeply nested grammar state": edited(blob, grammar={"source": "root ::= x", "state": nested(200)}),
        "grammar state of another shape": edited(blob, grammar={"source": "root ::= \"a\"", "root": "root",
                                                                "state": {"stack": [1]}}),
        "grammar source invalid": edited(blob, grammar={"source": "root ::= (", "root": "root", "state": {}}),
        "grammar root missing": edited(blob, grammar={"source": "root ::= \"a\"", "root": "nope", "state": {}}),
        "grammar wrong shape": edited(blob, grammar={"state": 1}),
        "array32 claiming 4G elements": resign(b"\xdd\xff\xff\xff\xff"),
        "bin32 claiming 4 GB": resign(b"\xc6\xff\xff\xff\xff" + b"\x00" * 8),
        "map32 claiming 4G entries": resign(b"\xdf\xff\xff\xff\xff"),
        "str32 claiming 4 GB": resign(b"\xdb\xff\xff\xff\xff"),
    }


# what the error must name, for the cases where one cause is expected
EXPECTED = {
    "empty": "empty", "header only, cut": "truncated", "wrong magic": "magic", "newer version": "newer",
    "body shorter than its length": "truncated", "trailing bytes (oversized)": "oversized",
    "checksum mismatch": "checksum", "body is an array": "map", "body cut, re-signed": "incomplete",
    "two objects in the body": "trailing", "missing k": "lacks", "unknown field": "unknown",
    "n_layer is a bool": "n_layer", "tokens not whole int32s": "int32", "token id outside the vocabulary": "vocabulary",
    "more tokens than n_ctx": "n_ctx", "k too short": "expected", "k claims a huge shape": "more than the blob",
    "kv_type unknown": "kv_type", "fingerprint head differs": "another model",
    "fingerprint size differs": "another model",
    "another architecture": "does not match the model", "kv_dim and n_layer swapped shape": "does not match the model",
    "another vocabulary": "does not match the model", "sampler config unknown key": "temprature",
    "sampler rng state not hex": "RNG", "extension type": "extension type 5", "timestamp extension": "Timestamp",
    "integer map key": "map key", "bytes map key": "map key", "invalid utf-8 string": "utf-8",
    "deeply nested grammar state": "nested", "grammar state of another shape": "grammar",
    "grammar source invalid": "grammar", "grammar root missing": "grammar",
    "array32 claiming 4G elements": "exceeds", "map32 claiming 4G entries": "exceeds",
}


def _assert_refused(engine, blob, tokens, what):
    with pytest.raises(SnapshotError):
        engine.load_snapshot(blob)
    assert engine.tokens == tokens, f"{what}: the failed load changed the session"


def test_the_good_blob_loads(session):
    engine, blob, tokens = session
    engine.load_snapshot(blob)
    assert engine.tokens == tokens


def test_crafted_malformed_blobs(session):
    engine, blob, tokens = session
    cases = crafted_cases(blob)
    assert len(cases) >= 30
    assert set(EXPECTED) <= set(cases)
    for what, bad in cases.items():
        try:
            engine.load_snapshot(bad)
        except SnapshotError as e:
            assert EXPECTED.get(what, "").lower() in str(e).lower(), f"case {what!r}: {e}"
        else:
            raise AssertionError(f"case {what!r} was not refused with SnapshotError")
        assert engine.tokens == tokens, f"{what}: the failed load changed the session"


def test_truncation_at_many_points(session):
    engine, blob, tokens = session
    hdr = snap._HEADER.size
    cuts = sorted(set(list(range(0, hdr + 4)) +
                      np.linspace(hdr + 4, len(blob) - 1, N_TRUNCATIONS).astype(int).tolist()))
    for cut in cuts:
        _assert_refused(engine, blob[:cut], tokens, f"cut at {cut}")
        # re-signed, so the msgpack parser itself sees the cut body
        if cut > hdr:
            _assert_refused(engine, resign(blob[hdr:cut]), tokens, f"re-signed cut at {cut}")


def test_random_byte_flips(session):
    engine, blob, tokens = session
    rng = np.random.default_rng(2024)
    hdr = snap._HEADER.size
    for pos in rng.integers(0, len(blob), N_FLIPS):
        bad = bytearray(blob)
        bad[pos] ^= int(rng.integers(1, 256))
        _assert_refused(engine, bytes(bad), tokens, f"flip at {pos}")
    # flips in the metadata (start of the body), re-signed so they get past the checksum
    body = bytearray(blob[hdr:])
    for pos in rng.integers(0, 400, N_FLIPS):
        bad = bytearray(body)
        bad[pos] ^= int(rng.integers(1, 256))
        try:
            engine.load_snapshot(resign(bytes(bad)))
        except SnapshotError:
            pass
        # a flip may leave a valid snapshot (e.g. a different token id): then it must still load cleanly
        engine.load_snapshot(blob)
        assert engine.tokens == tokens


def test_wrong_argument_types(session):
    engine, _, _ = session
    for bad in (None, 12, 3.5, ["a"], {"k": 1}):
        with pytest.raises(SnapshotError, match=f"bytes or a path, got {type(bad).__name__}"):
            engine.load_snapshot(bad)


def test_refusals_allocate_no_more_than_the_blob(session):
    engine, blob, tokens = session
    d = body_of(blob)
    hostile = [
        resign(b"\xdd\xff\xff\xff\xff"),
        resign(b"\xc6\xff\xff\xff\xff"),
        resign(b"\xdf\xff\xff\xff\xff" + b"\xa1a\x00" * 4),
        edited(blob, n_layer=2**30),
        edited(blob, tokens=b"\x00" * 4 * 100000, n_ctx=2**31 - 1),
    ]
    del d
    for bad in hostile:
        tracemalloc.start()
        try:
            with pytest.raises(SnapshotError):
                engine.load_snapshot(bad)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= MAX_ALLOC_FACTOR * len(bad) + ALLOC_SLACK_BYTES


def _header_with(blob: bytes, **fields) -> bytes:
    magic, version, body_len, digest = snap._HEADER.unpack_from(blob)
    values = dict(magic=magic, version=version, body_len=body_len, digest=digest)
    values.update(fields)
    return snap._HEADER.pack(values["magic"], values["version"], values["body_len"], values["digest"]) + \
        blob[snap._HEADER.size:]


def test_errors_say_what_is_wrong(session, tmp_path):
    """Another file is 'not a snapshot' (not 'truncated'), a damaged header is 'corrupt' (not 'newer')."""
    engine, blob, tokens = session
    cases = {
        "a short text file": (b"hello world\n", "not an oxillama snapshot: it starts with b'hello wo'"),
        "a GGUF file": (b"GGUF\x03\x00\x00\x00" + bytes(200), "not an oxillama snapshot"),
        "a long text file": (b"x" * 10_000, "not an oxillama snapshot"),
        "version field hit": (_header_with(blob, version=1 | (1 << 24)), "corrupt"),
        "length field hit": (_header_with(blob, body_len=len(blob) * 1000), "corrupt"),
        "magic hit": (b"OXLSNAQ\x00" + blob[8:], "corrupt"),
        "the magic, then nothing": (snap.MAGIC[:5], "truncated"),
    }
    for what, (bad, expected) in cases.items():
        with pytest.raises(SnapshotError) as e:
            engine.load_snapshot(bad)
        assert expected in str(e.value), f"{what}: {e.value}"
        assert "newer" not in str(e.value) and (what.startswith("the magic") or "truncated" not in str(e.value))
    path = tmp_path / "notes.txt"
    path.write_text("my notes")
    with pytest.raises(SnapshotError, match="not an oxillama snapshot"):
        engine.load_snapshot(path)
    assert engine.tokens == tokens


def test_save_into_a_missing_folder_names_the_path(session, tmp_path):
    from oxillama.errors import SnapshotWriteError
    engine, _, _ = session
    target = tmp_path / "missing-folder" / "s.oxs"
    with pytest.raises(SnapshotWriteError) as e:
        engine.save(target)
    assert isinstance(e.value, OSError) and isinstance(e.value, SnapshotError)
    assert str(target) in str(e.value) and "missing-folder does not exist" in str(e.value)
    assert ".tmp" not in str(e.value)
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):      # root ignores permissions
            pytest.skip("running as root: a read-only folder is writable")
        with pytest.raises(SnapshotWriteError) as e:
            engine.save(folder / "s.oxs")
        assert str(folder / "s.oxs") in str(e.value) and ".tmp" not in str(e.value)
    finally:
        folder.chmod(0o700)
