"""InferenceEngine: load a GGUF model, run it, generate text.

An engine composes a Model (runtime/model.py: the plan, tokenizer and weights, immutable and
shareable) and one Session (runtime/session.py: the KV cache, token history, sampler and grammar
state), and decides what goes through them: prefix reuse, LoRA adapters, generate() and its faces.
Every forward is one call into C (csrc/forward.c) that runs all layers with the GIL released; decode
allocates nothing vocabulary- or cache-sized in Python.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from oxillama import hub
from oxillama._system import release_free_heap, resolve_threads
from oxillama.errors import ContextOverflowError, InvalidArgumentError, ModelError, SnapshotError
from oxillama.gguf import GGUFFile
from oxillama.grammar import GrammarMatcher
from oxillama.lora import LoraAdapter, bound, check_loras, check_scale
from oxillama.models import architecture_for
from oxillama.runtime import snapshot as _snap
from oxillama.runtime.beam import BeamSearchConfig, beam_search
from oxillama.runtime.completion import Completion, Timings, Usage
from oxillama.runtime.decode import Decoder, text_pieces
from oxillama.runtime.embeddings import embed, embed_batch
from oxillama.runtime.kv_cache import ContiguousKVCache, kv_type_from
from oxillama.runtime.model import Model
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.recurrent_state import RecurrentStatePool, check_state
from oxillama.runtime.request import Prepared, Request
from oxillama.runtime.scheduler import Scheduler
from oxillama.runtime.session import Session
from oxillama.runtime.speculative import SpeculativeEngine
from oxillama.runtime.snapshot import KVState
from oxillama.sampling import Sampler, StopStrings
from oxillama.tokenizer import Tokenizer

log = logging.getLogger("oxillama.engine")

DEFAULT_MAX_CTX = 4096     # n_ctx=0 means the trained context, capped here to keep the KV cache modest


class InferenceEngine:
    """A loaded model with one session (KV cache, token history, sampler state).

        with InferenceEngine.from_gguf("model.gguf") as engine:
            print(engine.generate("The capital of France is", max_tokens=16, temperature=0))
    """

    def __init__(self, gguf: GGUFFile | Model, *, n_ctx: int = 0, n_threads: int | None = None, n_batch: int = 512,
                 seed: int | None = None, kv_type: str = "f16", tokenizer=None,
                 prefix_cache: PrefixKvCache | None = None, n_seq_max: int = 1, type_k=None, type_v=None,
                 repack: bool = True):
        # the loaded model (immutable, shareable: a Model given is not closed with this engine's session)
        arch = gguf.arch if isinstance(gguf, Model) else architecture_for(gguf)
        c = arch.config
        if n_ctx < 0:
            raise InvalidArgumentError(f"n_ctx must be >= 0, got {n_ctx}")
        if n_ctx == 0:
            n_ctx = min(c.n_ctx_train, DEFAULT_MAX_CTX)
            log.info("n_ctx=0: using %d (model trained with %d, default cap %d)", n_ctx, c.n_ctx_train,
                     DEFAULT_MAX_CTX)
        n_pos = c.extra.get("learned_positions")
        if n_pos and n_ctx > n_pos:   # gpt2: no embedding for the positions past its table
            log.warning("n_ctx=%d is above the %d positions %s's learned position embeddings cover: using %d",
                        n_ctx, n_pos, c.arch, n_pos)
            n_ctx = n_pos
        if n_ctx > c.n_ctx_train:
            log.warning("n_ctx=%d is above the %d positions the model was trained on: expect its output to "
                        "degrade past them", n_ctx, c.n_ctx_train)
        if not isinstance(gguf, Model):
            self.model = Model(gguf, tokenizer=tokenizer, repack=repack, arch=arch, n_ctx=n_ctx)
        elif arch.long_rope(n_ctx) != gguf.long_rope:
            raise InvalidArgumentError(
                f"this Model was loaded for a context of {gguf.n_ctx} positions, which runs LongRoPE's "
                f"{'long' if gguf.long_rope else 'short'} factors; n_ctx={n_ctx} needs the other ones: load the "
                f"Model with n_ctx={n_ctx}")
        else:
            self.model = gguf
        if n_batch < 1:
            raise InvalidArgumentError(f"n_batch must be >= 1, got {n_batch}")
        self.n_threads = resolve_threads(n_threads)   # at most the logical CPUs, unless asked
        if self.n_threads < 1:
            raise InvalidArgumentError(f"n_threads must be >= 1, got {n_threads}")
        self.n_batch = min(int(n_batch), n_ctx)
        if isinstance(n_seq_max, bool) or not isinstance(n_seq_max, (int, np.integer)) or n_seq_max < 1:
            raise InvalidArgumentError(f"n_seq_max must be an int >= 1, got {n_seq_max!r}")
        self.n_seq_max = int(n_seq_max)   # sequences a Scheduler / generate_batch runs at once by default
        kv_type = kv_type_from(kv_type, type_k, type_v)
        self.seed = seed
        # the one sequence's state: KV cache, tokens, last logits, sampler and grammar state
        self.session = Session(self.model, n_ctx=n_ctx, n_batch=self.n_batch, n_threads=self.n_threads,
                               kv_type=kv_type)
        self.last_completion = None
        # a streaming generate()'s tokens so far and their logprob entries (None unless asked), appended
        # in order as it runs: what a caller of the stream needs to send each piece's logprobs with it
        self._streamed = _Progress([], None)
        self.load_ms: float | None = None     # set by from_gguf()
        # session reuse: generate() keeps the cached prefix a new prompt shares with the session
        # (reuse_prefix) and restores longer ones from prefix_cache; n_tokens_run counts the tokens
        # actually run through the model, so the saving can be measured
        self.reuse_prefix = True
        self.prefix_cache = prefix_cache
        self.n_tokens_run = 0
        self.last_prefix_reused = 0     # prompt tokens the last generate() did not have to run
        self._loras: list = []             # [(LoraAdapter, scale)]: the session's adapters (add_lora)
        self._call_loras: list | None = None   # generate(lora=...) for one call
        log.info("loaded %s: %d layers, n_embd %d, vocab %d, n_ctx %d, %d threads, KV %.1f MB", c.arch,
                 self.model.n_layer, c.n_embd, c.n_vocab, n_ctx, self.n_threads, self.kv.memory_bytes() / 1e6)
        release_free_heap()     # the metadata parse's temporaries

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, *, n_ctx: int = 0, n_threads: int | None = None,
                  n_batch: int = 512, seed: int | None = None, kv_type: str = "f16",
                  prefix_cache: PrefixKvCache | None = None, n_seq_max: int = 1, type_k=None,
                  type_v=None, lora_path: str | os.PathLike | None = None,
                  lora_scale: float = 1.0, repack: bool = True) -> "InferenceEngine":
        """Load a GGUF file (weights stay memory-mapped); a known model name (see `oxillama pull`)
        is fetched into the cache on first use. n_seq_max: sequences served at once by a Scheduler or
        generate_batch (llama.cpp's name); type_k / type_v: the KV cache type in llama-cpp-python's
        spelling ("f16", "f32", "q8_0", or GGML type ids 1, 0, 8), an alternative to kv_type. lora_path /
        lora_scale: a GGUF LoRA adapter added at load (llama-cpp-python's names). repack=False keeps the
        weights in the file's layout only (see Model: repacking costs RAM, gives the same logits)."""
        path = hub.resolve_model(path)
        t0 = time.perf_counter()
        gguf = GGUFFile(path)
        try:
            engine = cls(gguf, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, seed=seed, kv_type=kv_type,
                         prefix_cache=prefix_cache, n_seq_max=n_seq_max, type_k=type_k, type_v=type_v,
                         repack=repack)
            if lora_path is not None:
                engine.add_lora(LoraAdapter.from_gguf(lora_path), lora_scale)
        except BaseException:
            gguf.close()
            raise
        engine.load_ms = (time.perf_counter() - t0) * 1e3    # as llama.cpp's "load time" (no download)
        return engine

    # ---- properties ----

    @property
    def n_ctx(self) -> int:
        return self.session.n_ctx

    @property
    def kv(self) -> ContiguousKVCache:
        """The session's KV cache."""
        return self.session.kv

    @property
    def recurrent(self) -> RecurrentStatePool | None:
        """The session's recurrent state (a one-slot pool), for a model with recurrent layers; else None."""
        return self.session.recurrent

    # the model's facts (self.model: oxillama.runtime.model.Model)

    @property
    def gguf(self) -> GGUFFile:
        return self.model.gguf

    @property
    def arch(self):
        return self.model.arch

    @property
    def config(self):
        return self.model.config

    @property
    def plan(self):
        return self.model.plan

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_past(self) -> int:
        return self.session.n_past

    @property
    def tokens(self) -> list[int]:
        """The session's tokens: those in the KV cache, then the last sampled one if not yet run."""
        return self.session.tokens

    @property
    def streamed(self):
        """The streaming generate() call's progress: .tokens generated so far and their .token_logprobs
        (None unless asked), appended in order as it runs (what a stream needs to send each piece's
        logprobs with it)."""
        return self._streamed

    @property
    def metadata(self) -> dict:
        return self.model.metadata

    @property
    def tokenizer(self) -> Tokenizer:
        return self.model.tokenizer

    # ---- lifecycle ----

    def close(self) -> None:
        """Free the session and the model (a model shared with another engine stays open)."""
        self.session.close()
        self.model.close()

    def __enter__(self) -> "InferenceEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self) -> None:
        """Forget the session: empty KV cache, no tokens, no sampler state."""
        self.session.reset()

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the session (KV cache and history). A recurrent model's state goes back
        to the nearest checkpoint at or before n and the tokens after it run again."""
        s = self.session
        if not 0 <= n <= len(s.tokens):
            raise InvalidArgumentError(f"cannot truncate a session of {len(s.tokens)} tokens to {n}")
        if s.recurrent is not None and n < s.n_past:
            self._rewind(n)
        s.truncate(n)

    def _rewind(self, n: int) -> None:
        """Recurrent models: the state after the first n tokens of the session (n < the cached ones), from the
        best checkpoint (or position 0) and a forward of the tokens after it."""
        s = self.session
        tokens = s.cached[:n]
        cp, state = s.checkpoints.best(tokens, key=self._lora_key())
        s.truncate(cp)
        if state is not None:
            s.recurrent.write(0, state, check=False)   # our own checkpoint
        if n > cp:
            self._run(np.asarray(tokens[cp:], dtype=np.int32))

    def checkpoint(self, rollback: bool = False) -> None:
        """Recurrent models: remember the state at the current position, to come back to it without running
        the tokens before it again (truncate(), a prompt that shares this prefix); a no-op for others.
        rollback=True: a point to return to only until the next such one (speculative decoding's round start),
        which replaces it in place instead of taking a checkpoint of the prompts' place."""
        self.session.checkpoint(rollback)

    # ---- LoRA adapters (oxillama.lora) ----

    @property
    def loras(self) -> list:
        """The session's adapters, [(LoraAdapter, scale)], applied in this order."""
        return list(self._loras)

    def add_lora(self, adapter, scale: float = 1.0) -> None:
        """Apply an adapter from the next token on (stacked on those already added; W is never modified).
        Prompts run later do not reuse cached positions computed with other adapters."""
        if not isinstance(adapter, LoraAdapter):
            raise InvalidArgumentError(f"add_lora takes a LoraAdapter, got {type(adapter).__name__}")
        scale = check_scale(scale)
        adapter.bind(self)   # validate against the model now
        self._loras.append((adapter, scale))

    def remove_lora(self, adapter) -> None:
        before = len(self._loras)
        self._loras = [(a, s) for a, s in self._loras if a is not adapter]
        if len(self._loras) == before:
            raise InvalidArgumentError(f"{adapter!r} is not one of the session's adapters")

    def clear_loras(self) -> None:
        self._loras = []

    def _active_loras(self) -> list:
        return self._loras if self._call_loras is None else self._call_loras

    def _lora_key(self) -> tuple:
        return tuple((a.sha256, s) for a, s in self._active_loras() if s != 0.0)

    # ---- session state: prefix reuse, KV state, snapshots ----

    def _prefill(self, ids) -> None:
        """Make the cache hold the prompt ids with the last position's logits, running as few tokens
        as possible: the prefix already in this session's cache is kept (as llama-cpp-python does),
        a longer one is restored from prefix_cache, and only the rest is run. The last prompt token
        is always run, since its logits are what the first sampled token needs."""
        ids = self.check_tokens(ids)
        n = len(ids)
        s = self.session
        keep = 0
        same_loras = s.lora_key == self._lora_key()
        if self.reuse_prefix and s.cached and same_loras:
            keep = min(_common_prefix_len(np.asarray(s.cached, dtype=np.int32), ids), n - 1)
        state = None
        if s.recurrent is not None and keep < s.n_past:
            # the state cannot be truncated: resume from the longest checkpoint within the shared prefix
            keep, state = s.checkpoints.best(ids, limit=keep if self.reuse_prefix else 0, key=self._lora_key())
        s.truncate(keep)     # keep <= the cached tokens: the pending token and the logits go too
        if state is not None:
            s.recurrent.write(0, state, check=False)   # our own checkpoint
        # the prefix cache keys on tokens only, and holds K/V rows, not recurrent states
        use_prefix_cache = self.prefix_cache is not None and not self._lora_key() and s.recurrent is None
        if use_prefix_cache and keep < n - 1:
            got = self.prefix_cache.restore(ids[:n - 1], self.kv, start=keep)
            s.extend_cached(ids, keep, got)
            keep = got
        self.last_prefix_reused = keep
        if keep:
            log.debug("prompt of %d tokens: %d reused from the cache, %d to run", n, keep, n - keep)
        if s.recurrent is not None and n - 1 > keep:
            # a checkpoint before the last prompt token, which is always run: a later prompt sharing all of
            # this one but its last token resumes there (the logits do not depend on the cut)
            self._run(ids[keep:n - 1])
            self.checkpoint()
            keep = n - 1
        self._run(ids[keep:])   # the logits do not depend on how the prompt is cut (one fixed sum order)
        if use_prefix_cache:
            self.prefix_cache.insert(ids, self.kv)

    def kv_snapshot(self) -> KVState:
        """A copy of the session's cache: tokens, K/V of positions [0, n_past), the pending token,
        and the last logits when no pending token will produce new ones."""
        return self.session.kv_snapshot()

    def kv_restore(self, state: KVState) -> None:
        """Replace the session's cache with a kv_snapshot() (of an engine on the same model).
        The sampler is left as it is."""
        self.session.kv_restore(state)

    def fingerprint(self) -> dict:
        """The model file's fingerprint (size, sha256 of its first and last few MB)."""
        return self.model.fingerprint()

    def snapshot(self) -> bytes:
        """The session as bytes: tokens (with the pending one), K/V of [0, n_past), the sampler with
        its RNG state and mirostat mu, and the grammar state. See oxillama.runtime.snapshot."""
        c, s = self.config, self.session
        snap = _snap.Snapshot(
            arch=c.arch, fingerprint=self.fingerprint(), n_ctx=self.n_ctx, n_layer=self.kv.n_layer,
            kv_dim=self.kv.kv_dim, n_vocab=self.n_vocab, kv_type=self.kv.kv_type, kv=s.kv_snapshot(),
            seed=self.seed, sampler=None if s.sampler is None else _snap.sampler_record(s.sampler),
            grammar=None if s.matcher is None else _snap.grammar_record(s.matcher), loras=list(s.lora_key))
        if s.sampler is not None and s.sampler.logits_processors:
            log.warning("snapshot: the sampler's logits_processors (Python callables) are not saved")
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
        if not os.path.exists(model_path) and str(model_path) in hub.KNOWN_MODELS:
            model_path = hub.pull(str(model_path))
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
            engine.model._fingerprint = fp
            engine._restore_session(snap)
        except BaseException:
            engine.close()
            raise
        return engine

    def _restore_session(self, snap: "_snap.Snapshot") -> None:
        c = self.config
        theirs = (snap.arch, snap.n_layer, snap.kv_dim, snap.n_vocab)
        ours = (c.arch, self.kv.n_layer, self.kv.kv_dim, self.n_vocab)
        if theirs != ours:
            raise SnapshotError(f"snapshot (arch, n_layer, kv_dim, n_vocab) = {theirs} does not match the model {ours}")
        kv = snap.kv
        if kv.n_past + (kv.pending is not None) > self.n_ctx:
            raise SnapshotError(f"snapshot holds {kv.n_past} tokens (+ pending), more than n_ctx={self.n_ctx}")
        if tuple(snap.loras) != self._lora_key():
            def show(key):
                return ", ".join(f"{h[:12]}@{sc:g}" for h, sc in key) or "none"
            raise SnapshotError(f"the snapshot was taken with LoRA adapters [{show(snap.loras)}], this engine has "
                                f"[{show(self._lora_key())}]: add the same adapters with the same scales (add_lora, "
                                f"or lora_path / lora_scale to resume) first")
        sampler = _snap.build_sampler(snap.sampler) if snap.sampler is not None else None
        matcher = _snap.build_matcher(snap.grammar, self.tokenizer) if snap.grammar is not None else None
        if self.recurrent is not None and kv.n_past:   # validated by value: present, of the model's size, finite
            check_state(kv.state, self.recurrent.slot_floats, SnapshotError)
        elif self.recurrent is None and kv.state is not None:
            raise SnapshotError("the snapshot holds a recurrent state but the model has no recurrent layers")
        if kv.k.dtype != self.kv.dtype:   # resumed with another kv_type
            kv = KVState(kv.tokens, kv.k.astype(self.kv.dtype), kv.v.astype(self.kv.dtype), kv.pending, kv.logits,
                         kv.state)
        self.session.kv_restore(kv)
        self.session.lora_key = tuple(snap.loras)
        self.session.sampler = sampler
        self.session.matcher = matcher

    # ---- text ----

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Iterable[int], skip_special: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special=skip_special)

    # ---- the model ----

    def check_tokens(self, tokens) -> np.ndarray:
        """tokens as an int32 array, each checked to be an id of the vocabulary (InvalidArgumentError)."""
        return self.model.check_tokens(tokens)

    def _run(self, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray | None:
        """Append tokens to the session's cache with the active adapters; logits of the last (or every)
        position."""
        if self.plan.non_causal:
            raise ModelError(f"{self.config.arch} is an encoder (embeddings only): it has no logits and cannot "
                             f"generate text; use embed() / embed_batch() / create_embedding")
        active = self._active_loras()
        out = self.session.run(tokens, all_logits, bound(self, active) if active else None, self._lora_key())
        self.n_tokens_run += len(tokens)
        return out

    def forward(self, tokens, *, all_logits: bool = False) -> np.ndarray:
        """Run tokens after the cached ones; logits of the last position (n_vocab,), or of all (n, n_vocab)."""
        arr = self.check_tokens(tokens)
        if arr.size == 0:
            raise InvalidArgumentError("forward needs at least one token")
        s = self.session
        if s.pending is not None:   # a sampled token not yet run: it comes first
            arr = np.concatenate([np.array([s.pending], dtype=np.int32), arr])
            s.pending = None
        out = self._run(arr, all_logits)
        return out.copy() if all_logits else s.logits.copy()

    # ---- generation ----

    def generate(self, prompt: str | list[int] | None, *, stream: bool = False,
                 callback: Callable[[str], None] | None = None, seed: int | None = None, grammar=None,
                 response_format: dict | None = None, **kwargs):
        """Generate a completion of `prompt`: a Completion (a str with .tokens, .finish_reason, .usage,
        .timings and .logprobs), or with stream=True an iterator of text pieces that stops cleanly on
        `break` (last_completion then holds the Completion of what was streamed).

        prompt: text (tokenized with the model's BOS and special tokens parsed, as llama-cpp-python
        does), a list of token ids, or None to continue the current session exactly where the last
        call stopped (same KV cache, tokens, sampler RNG state and grammar state). A continuation
        after a call that completed its grammar is unconstrained unless grammar= is given again;
        one after a call that stopped mid-grammar (max_tokens, a stop string) keeps the grammar.

        Keywords, in llama.cpp / llama-cpp-python or Hugging Face spelling (conflicting aliases
        raise): max_tokens/max_new_tokens (default 256; None or <= 0: until the end of generation or
        of the context), temperature/temp (0: greedy), top_k, top_p, min_p,
        repeat_penalty/repetition_penalty, do_sample, ... (see oxillama.sampling.SamplerConfig,
        or pass sampler=SamplerConfig(...)), stop/stop_strings, logprobs=N (top-N log-probabilities
        of every generated token), logits_processor, stopping_criteria, seed, ignore_eos. grammar= a
        Grammar, or response_format={"type": "json_object", "schema": {...}} (also OpenAI's json_schema
        shape), constrains the output. Generation ends at an end-of-generation token, a stop string, a
        stopping criterion, the end of the grammar, or max_tokens. num_beams=N (oxillama.runtime.beam)
        and speculative="ngram" or a draft engine (oxillama.runtime.speculative) choose another decoding.
        """
        if "lora" in kwargs:   # adapters for this call only: [(LoraAdapter, scale), ...]
            return self._generate_with_loras(kwargs.pop("lora"), prompt, stream=stream, callback=callback, seed=seed,
                                             grammar=grammar, response_format=response_format, **kwargs)
        # every keyword's type and range, token ids within the vocabulary (InvalidArgumentError naming it)
        req = Request.from_kwargs(dict(kwargs, prompt=prompt, stream=stream, seed=seed, callback=callback,
                                       grammar=grammar, response_format=response_format), n_vocab=self.n_vocab)
        if req.decoding != "sample":
            return self._generate_decoding(req)
        t_call = time.perf_counter()
        s = self.session
        continuing = req.prompt is None
        if continuing:
            if not self.tokens:
                raise InvalidArgumentError("generate(None) continues a session, but there is none: give a prompt")
            sampler_changed = req.seed is not None or req.processors is not None or bool(req.sampler_keys)
            if s.sampler is None or sampler_changed:
                s.sampler = req.new_sampler(self)
            n_context = len(self.tokens)
            if req.grammar is not None:
                s.matcher = self.new_matcher(req.grammar)
            elif s.matcher is not None and s.matcher.is_finished:
                # the last call completed its grammar: what follows is free text (as a new call
                # without grammar= would be in llama-cpp-python or transformers); a grammar left
                # unfinished by max_tokens or a stop string keeps constraining
                s.matcher = None
            max_tokens = req.token_limit(n_context, self.n_ctx)
        else:
            ids = self.encode_prompt(req.prompt)
            if len(ids) >= self.n_ctx:
                raise ContextOverflowError(f"the prompt has {len(ids)} tokens and n_ctx={self.n_ctx}: the context "
                                           f"needs room for the prompt and one token more (n_ctx >= {len(ids) + 1})")
            n_context = len(ids)
            max_tokens = req.token_limit(n_context, self.n_ctx)
            prepared = req.prepare(self)
            s.sampler, s.matcher = prepared.sampler, prepared.matcher
            self._prefill(ids)
        decoder = Decoder(req, Prepared(s.sampler, s.matcher, StopStrings(req.stop)), self.tokenizer, max_tokens)
        self.last_completion = None
        prompt_n = 0 if continuing else len(ids) - self.last_prefix_reused
        prompt_ms = 0.0 if continuing else (time.perf_counter() - t_call) * 1e3
        pieces = self._generate_iter(decoder, req.callback, (t_call, n_context, prompt_n, prompt_ms))
        if req.stream:
            return pieces
        for _ in pieces:
            pass
        return self.last_completion

    def _generate_with_loras(self, lora, prompt, *, stream: bool, **kwargs):
        loras = check_loras(lora)
        for adapter, _ in loras:
            adapter.bind(self)
        self._call_loras = loras
        try:
            out = self.generate(prompt, stream=stream, **kwargs)
        except BaseException:
            self._call_loras = None
            raise
        if not stream:
            self._call_loras = None
            return out

        def pieces():
            try:
                yield from out
            finally:
                self._call_loras = None
        return pieces()

    def new_sampler(self, config, seed: int | None = None, processors=None) -> Sampler:
        """A Sampler for config on this model (seed None: the engine's seed)."""
        return self.model.new_sampler(config, self.seed if seed is None else seed, processors)

    def new_matcher(self, grammar) -> GrammarMatcher:
        """A matcher following grammar over this model's vocabulary."""
        return self.model.new_matcher(grammar)

    def token_text(self, token_id: int) -> str:
        """One token's text (its bytes decoded, invalid UTF-8 replaced)."""
        return self.model.token_text(token_id)

    def encode_prompt(self, prompt) -> list[int]:
        """A prompt (text, or token ids) as checked token ids (see Model.encode_prompt)."""
        return self.model.encode_prompt(prompt)

    def _generate_iter(self, decoder: Decoder, callback, start) -> Iterator[str]:
        """The text pieces of a generation, one Decoder.advance per token; when it ends (or the caller
        stops iterating), last_completion holds the text emitted, the tokens, the finish reason, usage and
        timings."""
        t_call, n_context, prompt_n, prompt_ms = start
        s = self.session
        self._streamed = decoder
        t_first = None
        busy = 0.0                              # time spent here, not in a streaming caller
        t = time.perf_counter()
        try:
            finished = decoder.max_tokens <= 0
            while not finished:
                if s.pending is not None:     # run the last sampled token to get the next logits
                    self._run(s.take_pending())
                token, text, finished = decoder.advance(s.logits, s.history())
                s.pending = token
                if t_first is None:
                    t_first = time.perf_counter()
                if text:
                    busy += time.perf_counter() - t
                    if callback is not None:
                        callback(text)
                    yield text
                    t = time.perf_counter()
            text = decoder.end("length")
            if text:
                busy += time.perf_counter() - t
                if callback is not None:
                    callback(text)
                yield text
                t = time.perf_counter()
        finally:
            busy += time.perf_counter() - t
            ttft_ms = ((t_first or time.perf_counter()) - t_call) * 1e3
            n = len(decoder.tokens)
            self.last_completion = decoder.completion(Usage(n_context, n), Timings(prompt_n, prompt_ms, n, busy * 1e3,
                                                                                   ttft_ms), self.token_text)

    def generate_batch(self, prompts, *, n_seq_max: int = 8, max_batch_tokens: int = 512, **kwargs) -> list:
        """Completions of many prompts, in their order, generated together by a temporary Scheduler
        (oxillama.runtime.scheduler): up to n_seq_max at once, one forward per step. Keywords are
        generate()'s (the same for every prompt), plus ignore_eos=True; each text equals the prompt's
        generate() text for the same keywords. The session is untouched."""
        if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)):
            raise InvalidArgumentError(f"prompts must be a list of prompts, got {type(prompts).__name__}")
        if not prompts:
            return []
        if type(n_seq_max) is int and n_seq_max >= 1:    # (a bad value is the Scheduler's to reject)
            n_seq_max = min(n_seq_max, len(prompts))
        with Scheduler(self, n_seq_max=n_seq_max, max_batch_tokens=max_batch_tokens) as sched:
            handles = [sched.submit(p, **kwargs) for p in prompts]   # a bad request raises before any runs long
            return [h.result() for h in handles]


    # ---- decoding strategies: beam search, speculative decoding, embeddings ----

    def beam_generate(self, prompt: str | list[int], config=None, **kwargs) -> list:
        """Beam search (oxillama.runtime.beam): a list of BeamHypothesis, best score first.
        config: a BeamSearchConfig, or its fields as keywords (beam_width=4, max_new_tokens=256, ...)."""
        if config is None:
            config = BeamSearchConfig(**kwargs)
        elif kwargs:
            raise InvalidArgumentError("give a BeamSearchConfig or keywords, not both")
        return beam_search(self, prompt, config)

    def embed(self, text: str | list[int], *, pooling: str | None = None, normalize: bool = True) -> np.ndarray:
        """(n_embd,) float32 embedding of text (oxillama.runtime.embeddings); the session is untouched.
        pooling None: the model's own (an encoder's declared pooling_type, else last)."""
        return embed(self, text, pooling, normalize)

    def embed_batch(self, texts, *, pooling: str | None = None, normalize: bool = True) -> np.ndarray:
        """(len(texts), n_embd) float32 embeddings, each text independent of the others."""
        return embed_batch(self, texts, pooling, normalize)

    def _generate_decoding(self, req: Request):
        """generate(..., num_beams=N) or generate(..., speculative="ngram" | draft engine)."""
        if req.grammar is not None:
            raise InvalidArgumentError("grammar/response_format cannot be combined with num_beams or speculative")
        if req.n_logprobs is not None or req.processors is not None or req.criteria or req.ignore_eos:
            given = [name for name, on in (("logprobs", req.n_logprobs is not None),
                                           ("logits_processor", req.processors is not None),
                                           ("stopping_criteria", bool(req.criteria)), ("ignore_eos", req.ignore_eos))
                     if on]
            raise InvalidArgumentError(f"generate() argument(s) {', '.join(given)} are not supported with "
                                       "num_beams or speculative")
        prompt = req.prompt
        n_context = len(self.tokens) if prompt is None else len(self.encode_prompt(prompt))
        max_tokens = self.n_ctx - n_context if req.max_tokens is None else req.max_tokens
        generated: list[int] = []
        if req.decoding == "beam":
            if req.speculative not in (None, False):
                raise InvalidArgumentError("num_beams > 1 and speculative cannot be combined")
            if prompt is None:
                raise InvalidArgumentError("beam search needs a prompt (it does not continue a session)")
            bad = {k for k in req.sampler_keys if not (k in ("temperature", "temp") and req.config.temperature == 0)}
            if bad:
                raise InvalidArgumentError(f"beam search is deterministic; sampling options {sorted(bad)} "
                                           "do not apply")
            best = self.beam_generate(prompt, BeamSearchConfig(req.num_beams, max(max_tokens, 1),
                                                               **req.beam_options))[0]
            generated = (best.tokens[:-1] if best.finished else best.tokens)[:max_tokens]
            finish = "stop" if best.finished else "length"
            pieces = text_pieces(self.tokenizer, iter(generated), req.stop, req.callback)
        else:
            if req.beam_options:
                raise InvalidArgumentError(f"{sorted(req.beam_options)} apply to beam search only")
            spec = SpeculativeEngine(self, req.speculative, k=req.speculative_k)
            self.last_speculative_stats = spec.stats
            finish = "length"

            def tokens():
                sampler = req.new_sampler(self)
                for t in spec.generate_tokens(prompt, max_tokens=max_tokens, sampler=sampler):
                    generated.append(t)
                    yield t
            pieces = text_pieces(self.tokenizer, tokens(), req.stop, req.callback)

        def recorded():     # last_completion holds what was produced, streamed or not
            emitted = []
            try:
                for piece in pieces:
                    emitted.append(piece)
                    yield piece
            finally:
                self.last_completion = Completion(
                    "".join(emitted), tokens=generated, finish_reason="stop" if len(generated) < max_tokens
                    else finish, usage=Usage(n_context, len(generated)))
        self.last_completion = None
        self._streamed = _Progress(generated, None)
        if req.stream:
            return recorded()
        for _ in recorded():
            pass
        return self.last_completion


def _common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


def _check_fingerprint(theirs: dict, ours: dict) -> None:
    if theirs != ours:
        raise SnapshotError(f"snapshot was taken on another model file (size {theirs['size']} vs {ours['size']}, "
                            f"or different contents)")


@dataclass
class _Progress:
    """A streaming call's tokens and logprob entries so far (what InferenceEngine.streamed gives)."""
    tokens: list
    token_logprobs: list | None
