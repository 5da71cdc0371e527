"""InferenceEngine: load a GGUF model, run it, generate text.

An engine owns one session: the model plan (immutable), one KV cache, the token history and the
current sampler (with its RNG state). Every forward is one call into C (csrc/forward.c) that runs
all layers with the GIL released; decode allocates nothing vocabulary- or cache-sized in Python.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from oxillama import _core
from oxillama._system import default_threads
from oxillama.errors import ContextOverflowError, InvalidArgumentError, SnapshotError
from oxillama.gguf import GGUFFile
from oxillama.models import architecture_for
from oxillama.runtime import snapshot as _snap
from oxillama.runtime.kv_cache import ContiguousKVCache
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.snapshot import KVState

log = logging.getLogger("oxillama.engine")

DEFAULT_MAX_CTX = 4096   # n_ctx=0 means the trained context, capped here to keep the KV cache modest


class InferenceEngine:
    """A loaded model with one session (KV cache, token history, sampler state).

        with InferenceEngine.from_gguf("model.gguf") as engine:
            print(engine.generate("The capital of France is", max_tokens=16, temperature=0))
    """

    def __init__(self, gguf: GGUFFile, *, n_ctx: int = 0, n_threads: int | None = None, n_batch: int = 512,
                 seed: int | None = None, kv_type: str = "f16", tokenizer=None,
                 prefix_cache: PrefixKvCache | None = None):
        self.gguf = gguf
        self.arch = architecture_for(gguf)
        self.config = self.arch.config
        c = self.config
        if n_ctx < 0:
            raise InvalidArgumentError(f"n_ctx must be >= 0, got {n_ctx}")
        if n_ctx == 0:
            n_ctx = min(c.n_ctx_train, DEFAULT_MAX_CTX)
            log.info("n_ctx=0: using %d (model trained with %d, default cap %d)", n_ctx, c.n_ctx_train,
                     DEFAULT_MAX_CTX)
        if n_batch < 1:
            raise InvalidArgumentError(f"n_batch must be >= 1, got {n_batch}")
        self.n_threads = default_threads() if n_threads is None else int(n_threads)
        if self.n_threads < 1:
            raise InvalidArgumentError(f"n_threads must be >= 1, got {n_threads}")
        self.n_batch = min(int(n_batch), n_ctx)
        self.seed = seed
        self.plan = _core.ForwardPlan(self.arch.build())
        self.kv = ContiguousKVCache(c.n_layer, n_ctx, c.kv_dim, kv_type)
        self._ctx = _core.ForwardContext(self.plan, self.kv.buffers, self.n_batch, self.n_threads)
        self._logits = np.zeros(c.n_vocab, dtype=np.float32)   # last position's logits, reused
        self._tok_buf = np.zeros(self.n_batch, dtype=np.int32)
        self._one = np.zeros(1, dtype=np.int32)
        self._tokens: list[int] = []          # tokens whose K/V are in the cache
        self._pending: int | None = None      # last sampled token, not yet run through the model
        self._has_logits = False
        self._sampler = None
        self._tokenizer = tokenizer
        # session reuse: generate() keeps the cached prefix a new prompt shares with the session
        # (reuse_prefix) and restores longer ones from prefix_cache; n_tokens_run counts the tokens
        # actually run through the model, so the saving can be measured
        self.reuse_prefix = True
        self.prefix_cache = prefix_cache
        self.n_tokens_run = 0
        self.last_prefix_reused = 0     # prompt tokens the last generate() did not have to run
        self._fingerprint: dict | None = None
        log.info("loaded %s: %d layers, n_embd %d, vocab %d, n_ctx %d, %d threads, KV %.1f MB", c.arch,
                 c.n_layer, c.n_embd, c.n_vocab, n_ctx, self.n_threads, self.kv.memory_bytes() / 1e6)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, *, n_ctx: int = 0, n_threads: int | None = None,
                  n_batch: int = 512, seed: int | None = None, kv_type: str = "f16",
                  prefix_cache: PrefixKvCache | None = None) -> "InferenceEngine":
        """Load a GGUF file (weights stay memory-mapped)."""
        gguf = GGUFFile(path)
        try:
            return cls(gguf, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, seed=seed, kv_type=kv_type,
                       prefix_cache=prefix_cache)
        except BaseException:
            gguf.close()
            raise

    # ---- properties ----

    @property
    def n_ctx(self) -> int:
        return self.kv.n_ctx

    @property
    def n_vocab(self) -> int:
        return self.config.n_vocab

    @property
    def n_past(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The session's tokens: those in the KV cache, then the last sampled one if not yet run."""
        return self._tokens + ([self._pending] if self._pending is not None else [])

    @property
    def metadata(self) -> dict:
        return self.gguf.metadata

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from oxillama.tokenizer import Tokenizer
            self._tokenizer = Tokenizer.from_gguf(self.gguf)
        return self._tokenizer

    # ---- lifecycle ----

    def close(self) -> None:
        self._ctx = None
        self.plan = None
        self.gguf.close()

    def __enter__(self) -> "InferenceEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self) -> None:
        """Forget the session: empty KV cache, no tokens, no sampler state."""
        self._tokens.clear()
        self._pending = None
        self._has_logits = False
        self._sampler = None
        self.kv.clear()

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the session (KV cache and history)."""
        if not 0 <= n <= len(self.tokens):
            raise InvalidArgumentError(f"cannot truncate a session of {len(self.tokens)} tokens to {n}")
        if n <= len(self._tokens):
            del self._tokens[n:]
            self.kv.truncate(n)
            self._pending = None
            self._has_logits = False
        # n == len(tokens) with a pending token: nothing to drop

    # ---- session state: prefix reuse, KV state, snapshots ----

    def _prefill(self, ids: np.ndarray) -> None:
        """Make the cache hold the prompt ids with the last position's logits, running as few tokens
        as possible: the prefix already in this session's cache is kept (as llama-cpp-python does),
        a longer one is restored from prefix_cache, and only the rest is run. The last prompt token
        is always run, since its logits are what the first sampled token needs."""
        n = len(ids)
        keep = 0
        if self.reuse_prefix and self._tokens:
            keep = min(_common_prefix_len(np.asarray(self._tokens, dtype=np.int32), ids), n - 1)
        self._pending = None
        self._has_logits = False
        del self._tokens[keep:]
        self.kv.truncate(keep)
        if self.prefix_cache is not None and keep < n - 1:
            got = self.prefix_cache.restore(ids[:n - 1], self.kv, start=keep)
            self._tokens.extend(int(t) for t in ids[keep:got])
            keep = got
        self.last_prefix_reused = keep
        if keep:
            log.debug("prompt of %d tokens: %d reused from the cache, %d to run", n, keep, n - keep)
        self._run(ids[keep:])
        if self.prefix_cache is not None:
            self.prefix_cache.insert(ids, self.kv)

    def kv_snapshot(self) -> KVState:
        """A copy of the session's cache: tokens, K/V of positions [0, n_past), the pending token,
        and the last logits when no pending token will produce new ones."""
        k, v = self.kv.read(0, self.n_past)
        logits = self._logits.copy() if self._has_logits and self._pending is None else None
        return KVState(np.array(self._tokens, dtype=np.int32), k, v, self._pending, logits)

    def kv_restore(self, state: KVState) -> None:
        """Replace the session's cache with a kv_snapshot() (of an engine on the same model).
        The sampler is left as it is."""
        if not isinstance(state, KVState):
            raise InvalidArgumentError(f"kv_restore takes a KVState from kv_snapshot(), got {type(state).__name__}")
        tokens = self._check_tokens(state.tokens)
        n = len(tokens)
        for name, a in (("k", state.k), ("v", state.v)):
            if not isinstance(a, np.ndarray) or a.shape != (self.config.n_layer, n, self.kv.kv_dim):
                raise InvalidArgumentError(f"KV state {name} has shape {getattr(a, 'shape', None)}, expected "
                                           f"{(self.config.n_layer, n, self.kv.kv_dim)} for {n} tokens")
        pending = state.pending
        if pending is not None:
            pending = int(self._check_tokens([pending])[0])
        if n + (pending is not None) > self.n_ctx:
            raise ContextOverflowError(f"KV state of {n} tokens (+ pending) exceeds n_ctx={self.n_ctx}")
        logits = state.logits
        if logits is not None and (not isinstance(logits, np.ndarray) or logits.shape != (self.n_vocab,)):
            raise InvalidArgumentError(f"KV state logits must be an array of shape ({self.n_vocab},)")
        self.kv.truncate(0)
        self.kv.write(state.k, state.v, 0)
        self._tokens = [int(t) for t in tokens]
        self._pending = pending
        self._has_logits = logits is not None
        if logits is not None:
            self._logits[:] = logits

    def fingerprint(self) -> dict:
        """The model file's fingerprint (size, sha256 of its first and last few MB)."""
        if self._fingerprint is None:
            self._fingerprint = _snap.model_fingerprint(self.gguf.path)
        return self._fingerprint

    def snapshot(self) -> bytes:
        """The session as bytes: tokens (with the pending one), K/V of [0, n_past), the sampler with
        its RNG state and mirostat mu, and the grammar state. See oxillama.runtime.snapshot."""
        c = self.config
        snap = _snap.Snapshot(
            arch=c.arch, fingerprint=self.fingerprint(), n_ctx=self.n_ctx, n_layer=c.n_layer,
            kv_dim=self.kv.kv_dim, n_vocab=self.n_vocab, kv_type=self.kv.kv_type, kv=self.kv_snapshot(),
            seed=self.seed, sampler=None if self._sampler is None else _snap.sampler_record(self._sampler),
            grammar=None)   # grammar-constrained generation is not wired into the engine yet
        return _snap.encode(snap)

    def save(self, path: str | os.PathLike) -> None:
        """Write snapshot() to path atomically (a temporary file, then a rename)."""
        _snap.write_atomic(path, self.snapshot())

    def load_snapshot(self, blob_or_path) -> None:
        """Replace this session with a snapshot (bytes or a path) taken on the same model."""
        snap = _snap.decode(_snap.read_blob(blob_or_path))
        _check_fingerprint(snap.fingerprint, self.fingerprint())
        self._restore_session(snap)

    @classmethod
    def resume(cls, blob_or_path, model_path: str | os.PathLike, **engine_kwargs) -> "InferenceEngine":
        """A new engine on model_path continuing the session of a snapshot (bytes or a path).

        n_ctx, kv_type and seed default to the snapshot's; other keywords go to from_gguf(). The blob
        is validated and the model's fingerprint compared before the model is loaded.
        """
        snap = _snap.decode(_snap.read_blob(blob_or_path))
        try:
            fp = _snap.model_fingerprint(model_path)
        except OSError as e:
            raise InvalidArgumentError(f"cannot read model {os.fspath(model_path)}: {e.strerror or e}") from e
        _check_fingerprint(snap.fingerprint, fp)
        engine_kwargs.setdefault("n_ctx", snap.n_ctx)
        engine_kwargs.setdefault("kv_type", snap.kv_type)
        engine_kwargs.setdefault("seed", snap.seed)
        engine = cls.from_gguf(model_path, **engine_kwargs)
        try:
            engine._fingerprint = fp
            engine._restore_session(snap)
        except BaseException:
            engine.close()
            raise
        return engine

    def _restore_session(self, snap: "_snap.Snapshot") -> None:
        c = self.config
        theirs = (snap.arch, snap.n_layer, snap.kv_dim, snap.n_vocab)
        ours = (c.arch, c.n_layer, self.kv.kv_dim, self.n_vocab)
        if theirs != ours:
            raise SnapshotError(f"snapshot (arch, n_layer, kv_dim, n_vocab) = {theirs} does not match the model {ours}")
        kv = snap.kv
        if kv.n_past + (kv.pending is not None) > self.n_ctx:
            raise SnapshotError(f"snapshot holds {kv.n_past} tokens (+ pending), more than n_ctx={self.n_ctx}")
        if snap.grammar is not None:
            raise SnapshotError("snapshot carries grammar state, but this engine has no grammar support yet")
        sampler = _snap.build_sampler(snap.sampler) if snap.sampler is not None else None
        if kv.k.dtype != self.kv.dtype:   # resumed with another kv_type
            kv = KVState(kv.tokens, kv.k.astype(self.kv.dtype), kv.v.astype(self.kv.dtype), kv.pending, kv.logits)
        self.kv_restore(kv)
        self._sampler = sampler

    # ---- text ----

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Iterable[int], skip_special: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special=skip_special)

    # ---- the model ----

    def _check_tokens(self, tokens) -> np.ndarray:
        arr = np.asarray(tokens)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InvalidArgumentError("tokens must be a 1-D sequence of ints")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_vocab):
            bad = int(arr[(arr < 0) | (arr >= self.n_vocab)][0])
            raise InvalidArgumentError(f"token id {bad} is outside the vocabulary (0..{self.n_vocab - 1})")
        return arr.astype(np.int32, copy=False)

    def _run(self, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray | None:
        """Append tokens to the cache in chunks of n_batch; logits of the last (or every) position."""
        n = len(tokens)
        if self.n_past + n > self.n_ctx:
            raise ContextOverflowError(f"{self.n_past} cached + {n} new tokens exceed n_ctx={self.n_ctx}")
        out = np.empty((n, self.n_vocab), dtype=np.float32) if all_logits else None
        for start in range(0, n, self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            m = len(chunk)
            buf = self._tok_buf[:m]
            buf[:] = chunk
            last = start + m == n
            if all_logits:
                self._ctx.run(buf, self.n_past, out[start:start + m].reshape(-1), True)
            elif last:
                self._ctx.run(buf, self.n_past, self._logits, False)
            else:
                self._ctx.run(buf, self.n_past, None, False)
            self._tokens.extend(int(t) for t in chunk)
            self.kv.n_past = len(self._tokens)
            self.n_tokens_run += m
        if all_logits and n:
            self._logits[:] = out[-1]
        self._has_logits = n > 0 or self._has_logits
        return out

    def forward(self, tokens, *, all_logits: bool = False) -> np.ndarray:
        """Run tokens after the cached ones; logits of the last position (n_vocab,), or of all (n, n_vocab)."""
        arr = self._check_tokens(tokens)
        if arr.size == 0:
            raise InvalidArgumentError("forward needs at least one token")
        if self._pending is not None:   # a sampled token not yet run: it comes first
            arr = np.concatenate([np.array([self._pending], dtype=np.int32), arr])
            self._pending = None
        out = self._run(arr, all_logits)
        return out.copy() if all_logits else self._logits.copy()

    # ---- generation ----

    def _new_sampler(self, kwargs: dict, seed: int | None):
        from oxillama.sampling import Sampler, resolve_generate_kwargs
        config, rest = resolve_generate_kwargs(**kwargs)
        return Sampler(config, seed=self.seed if seed is None else seed), rest

    def generate(self, prompt: str | list[int] | None, *, max_tokens: int | None = None, stop=(), stream: bool = False,
                 callback: Callable[[str], None] | None = None, seed: int | None = None, **sampling):
        """Generate a completion of prompt; the text, or with stream=True an iterator of text pieces.

        prompt: text (tokenized with the model's BOS and special tokens parsed, like llama-cpp-python),
        a list of token ids, or None to continue the current session where the last call stopped
        (same KV cache, tokens and sampler with its RNG state). Sampling keywords (temperature,
        top_k, top_p, min_p, repeat_penalty, ... or sampler=SamplerConfig) follow oxillama.sampling;
        temperature=0 is greedy. Generation ends at an end-of-generation token, a stop string, or
        max_tokens.
        """
        if "max_new_tokens" in sampling:
            if max_tokens is not None:
                raise InvalidArgumentError("give max_tokens or max_new_tokens, not both")
            max_tokens = sampling.pop("max_new_tokens")
        if "stop_strings" in sampling:
            if stop:
                raise InvalidArgumentError("give stop or stop_strings, not both")
            stop = sampling.pop("stop_strings")
        max_tokens = 256 if max_tokens is None else int(max_tokens)
        if max_tokens < 0:
            raise InvalidArgumentError(f"max_tokens must be >= 0, got {max_tokens}")
        stops = [stop] if isinstance(stop, str) else [s for s in (stop or ()) if s]
        if prompt is None:
            if not self.tokens:
                raise InvalidArgumentError("generate(None) continues a session, but there is none: give a prompt")
            if self._sampler is None or sampling:
                self._sampler, _ = self._new_sampler(sampling, seed)
        else:
            ids = self._encode_prompt(prompt)
            if len(ids) + max_tokens > self.n_ctx:
                raise ContextOverflowError(f"prompt of {len(ids)} tokens + max_tokens={max_tokens} exceed "
                                           f"n_ctx={self.n_ctx}")
            self._sampler, _ = self._new_sampler(sampling, seed)
            self._prefill(self._check_tokens(ids))
        if len(self.tokens) + max_tokens > self.n_ctx + 1:
            raise ContextOverflowError(f"{len(self.tokens)} tokens + max_tokens={max_tokens} exceed n_ctx={self.n_ctx}")
        pieces = self._generate_iter(max_tokens, stops, callback)
        if stream:
            return pieces
        return "".join(pieces)

    def reset_keep_sampler(self) -> None:
        sampler = self._sampler
        self.reset()
        self._sampler = sampler

    def _encode_prompt(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenize(prompt, add_special=True, parse_special=True)
        else:
            ids = [int(t) for t in self._check_tokens(list(prompt))]
        if not ids:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        return ids

    def _generate_iter(self, max_tokens: int, stops: list[str], callback) -> Iterator[str]:
        tok = self.tokenizer
        detok = tok.detokenizer()
        eog = tok.eog_ids
        hold = max((len(s) for s in stops), default=1) - 1   # text kept back while it may start a stop string
        text = ""            # produced but not yet emitted
        sampler = self._sampler
        for _ in range(max_tokens):
            if self._pending is not None:     # run the last sampled token to get the next logits
                self._one[0] = self._pending
                self._pending = None
                self._run(self._one)
            token = int(sampler.sample(self._logits, self._tokens))
            self._pending = token
            if token in eog:
                break
            text += detok.add(token)
            if stops:
                cut = _find_stop(text, stops)
                if cut is not None:
                    text = text[:cut]
                    if text:
                        yield from _emit(text, callback)
                    return
                if len(text) > hold:
                    out, text = text[:len(text) - hold], text[len(text) - hold:]
                    yield from _emit(out, callback)
            elif text:
                yield from _emit(text, callback)
                text = ""
        text += detok.flush()
        if stops:
            cut = _find_stop(text, stops)
            if cut is not None:
                text = text[:cut]
        if text:
            yield from _emit(text, callback)


def _common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


def _check_fingerprint(theirs: dict, ours: dict) -> None:
    if theirs != ours:
        raise SnapshotError(f"snapshot was taken on another model file (size {theirs['size']} vs {ours['size']}, "
                            f"or different contents)")


def _find_stop(text: str, stops: list[str]) -> int | None:
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(cuts) if cuts else None


def _emit(piece: str, callback) -> Iterator[str]:
    if callback is not None:
        callback(piece)
    yield piece
