"""Model: what loading a GGUF file gives, immutable and shared by every session over it: the mapped file,
the architecture and its config, the forward plan (the C structs the forward runs), the tokenizer, and
the per-vocabulary things requests need (samplers with their DRY breaker scan, grammar matchers, token
texts, prompt encoding). An InferenceEngine is a Model plus one session; a layer draft for speculative
decoding is `model.first_layers(n)`, a Model sharing the file, weights and tokenizer.
"""
from __future__ import annotations

import logging

import numpy as np

from oxillama import _core
from oxillama.errors import InvalidArgumentError
from oxillama.gguf import GGUFFile
from oxillama.grammar import Grammar, GrammarMatcher
from oxillama.models import architecture_for
from oxillama.runtime import snapshot as _snap
from oxillama.sampling import Sampler
from oxillama.sampling.penalties import dry_breakers_from_vocab
from oxillama.tokenizer import Tokenizer

__all__ = ["Model"]

log = logging.getLogger("oxillama")


class Model:
    """A loaded GGUF model (see the module docstring). n_layer: run only the first n_layer blocks (then
    the output norm and head), an early-exit draft of the same model. repack: copy the matrices whose type
    has a repacked layout on this CPU's kernel tier into it once (faster products, the same logits; costs
    `repacked_bytes` of RAM beside the mapped file)."""

    def __init__(self, gguf: GGUFFile, *, tokenizer: Tokenizer | None = None, n_layer: int | None = None,
                 arch=None, owns_file: bool = True, repack: bool = True, _repacked: dict | None = None,
                 n_ctx: int = 0):
        self.gguf = gguf
        self.arch = architecture_for(gguf) if arch is None else arch
        self.config = self.arch.config
        # the context it runs with, where the weights depend on it (LongRoPE's long or short factors)
        self.arch.n_ctx = self.n_ctx = int(n_ctx)
        self.long_rope = self.arch.long_rope(self.n_ctx)
        spec = self.arch.build()
        unread = self.arch.tensors.unread() if n_layer is None else []
        if unread:   # llama.cpp refuses such a file; its tensors may matter, so say so loudly
            log.warning("%s: %d tensor(s) in the file are not used by oxillama's %s forward, so its output may "
                        "differ from what the file's makers intended: %s%s", gguf.path, len(unread),
                        self.config.arch, ", ".join(unread[:8]), " ..." if len(unread) > 8 else "")
        self.unused_tensors = unread
        if n_layer is not None:
            spec["layers"] = spec["layers"][:n_layer]
        self.repack = bool(repack)
        self._repacked = {} if _repacked is None else _repacked   # shared with layer drafts
        self.plan = _core.ForwardPlan(spec, repack=self.repack, repacked=self._repacked)
        if self.plan.repacked_bytes:
            log.info("repacked weights (%s): %.1f MB of RAM beside the mapped file (repack=False to skip)",
                     ", ".join(f"{t} as {lay}" for t, lay in sorted(self.plan.repacked_layouts.items())),
                     self.plan.repacked_bytes / 1e6)
        self.n_layer = self.plan.n_layer      # blocks the forward runs (config.n_layer unless a draft)
        self.owns_file = owns_file
        self._tokenizer = tokenizer
        self._dry_breakers: dict[tuple, list] = {}
        self._fingerprint: dict | None = None

    def first_layers(self, n_layer: int) -> "Model":
        """The first n_layer blocks of this model (plus its output norm and head), sharing its file,
        weights and tokenizer; closing it leaves this one open."""
        full = self.n_layer
        if isinstance(n_layer, bool) or not isinstance(n_layer, (int, np.integer)) or not 1 <= n_layer < full:
            raise InvalidArgumentError(f"a layer draft needs 1 <= n_layer < {full} (the target's layers), "
                                       f"got {n_layer!r}")
        return Model(self.gguf, tokenizer=self.tokenizer, n_layer=int(n_layer), arch=self.arch, owns_file=False,
                     repack=self.repack, _repacked=self._repacked, n_ctx=self.n_ctx)

    @property
    def repacked_bytes(self) -> int:
        """RAM taken by the repacked copies of the weights this model's plan reads (0: none)."""
        return self.plan.repacked_bytes if self.plan is not None else 0

    def close(self) -> None:
        self.plan = None
        self._repacked = {}
        if self.owns_file:
            self.gguf.close()

    # ---- facts ----

    @property
    def n_vocab(self) -> int:
        return self.config.n_vocab

    @property
    def metadata(self) -> dict:
        return self.gguf.metadata

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_gguf(self.gguf)
        return self._tokenizer

    def fingerprint(self) -> dict:
        """The model file's fingerprint (size, sha256 of its first and last few MB)."""
        if self._fingerprint is None:
            self._fingerprint = _snap.model_fingerprint(self.gguf.path)
        return self._fingerprint

    # ---- what requests need of the vocabulary ----

    def new_sampler(self, config, seed: int | None, processors=None) -> Sampler:
        """A Sampler for config on this vocabulary; the DRY sequence breakers' scan of the vocabulary is
        made once per model and breaker set."""
        breakers = None
        if config.dry_multiplier > 0 and config.dry_sequence_breakers:
            key = tuple(config.dry_sequence_breakers)
            if key not in self._dry_breakers:
                texts = [""] * self.n_vocab
                for tid, data in self.tokenizer.vocab_bytes():
                    if 0 <= tid < self.n_vocab:
                        texts[tid] = data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
                self._dry_breakers[key] = dry_breakers_from_vocab(
                    key, texts, lambda t: self.tokenizer.encode(t, add_special=False))
            breakers = self._dry_breakers[key]
        return Sampler(config, seed=seed, n_vocab=self.n_vocab, logits_processors=processors, dry_breakers=breakers)

    def new_matcher(self, grammar) -> GrammarMatcher:
        """A matcher following grammar over this vocabulary."""
        if not isinstance(grammar, Grammar):
            raise InvalidArgumentError(f"grammar must be an oxillama.Grammar, got {type(grammar).__name__}")
        return GrammarMatcher.from_tokenizer(grammar, self.tokenizer)

    def token_text(self, token_id: int) -> str:
        """One token's text (its bytes decoded, invalid UTF-8 replaced)."""
        return self.tokenizer.token_to_bytes(token_id).decode("utf-8", errors="replace")

    def check_tokens(self, tokens) -> np.ndarray:
        """tokens as an int32 array, each checked to be an id of the vocabulary (InvalidArgumentError)."""
        arr = np.asarray(tokens)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InvalidArgumentError("tokens must be a 1-D sequence of ints")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_vocab):
            bad = int(arr[(arr < 0) | (arr >= self.n_vocab)][0])
            raise InvalidArgumentError(f"token id {bad} is outside the vocabulary (0..{self.n_vocab - 1})")
        return arr.astype(np.int32, copy=False)

    def encode_prompt(self, prompt) -> list[int]:
        """A prompt (text, or token ids) as checked token ids: text is tokenized with BOS and special
        tokens parsed, and a BOS doubled by a chat template is kept once."""
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special=True, parse_special=True)
            bos = self.tokenizer.bos_id
            if len(ids) > 1 and bos is not None and ids[0] == ids[1] == bos:
                # a chat template already wrote the BOS the model adds: keep one, as llama.cpp advises
                ids = ids[1:]
        else:
            ids = [int(t) for t in self.check_tokens(list(prompt))]
        if not ids:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        return ids
