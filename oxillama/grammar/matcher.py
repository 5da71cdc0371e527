"""GrammarMatcher: a grammar bound to a vocabulary, advanced token by token during decoding.

How the decode loop uses it (the engine's side):

1. sample a token from the unmasked logits;
2. ``is_token_allowed(tok)``: a walk of that token's bytes through the cached transition table,
   about a microsecond;
3. if rejected, ``apply_to_logits(logits)`` (or ``fill_mask``) masks the whole vocabulary with one
   pass over the vocabulary's prefix trie, pruning every subtree the grammar rejects and allowing
   whole every subtree the state provably loops over (JSON string content), and the engine
   samples again;
4. ``accept_token(tok)``.

Masks are cached per parse state, twice: by state id in each matcher, and by the state's stacks
in a cache shared by every matcher of the same grammar over the same vocabulary (so the next
generate() call, or a matcher restored from a snapshot, starts warm).

End-of-generation tokens are allowed exactly where the grammar can end. The state is a set of
parse stacks; ``get_state()`` returns it as plain lists (msgpack-friendly) for session snapshots.
"""
from __future__ import annotations

import collections
import logging
import threading
import weakref

import numpy as np

from oxillama.errors import GrammarError
from oxillama.grammar._cgrammar import Vocab, apply_mask_to_logits
from oxillama.grammar.grammar import Grammar
from oxillama.grammar.vocab import vocab_trie

log = logging.getLogger("oxillama.grammar")

STATE_VERSION = 1
MAX_MACHINE_STATES = 30_000
"""The lazily built transition table (1 KiB per state) is rebuilt from the current state past this."""
MASK_CACHE_SIZE = 16
"""Full vocabulary masks kept per matcher, keyed by parse state (grammars revisit states often)."""
SHARED_MASK_CACHE_SIZE = 64
"""Masks kept per vocabulary for all matchers, keyed by (grammar, parse stacks): 16 MiB for 262,144 tokens."""


def _as_byte_list(vocab_bytes) -> list:
    """bytes per token id, from a list of bytes or of (id, bytes) pairs (``Tokenizer.vocab_bytes()``)."""
    vocab_bytes = list(vocab_bytes)
    if vocab_bytes and isinstance(vocab_bytes[0], tuple):
        if all(type(p) is tuple and len(p) == 2 for p in vocab_bytes) and \
                [p[0] for p in vocab_bytes] == list(range(len(vocab_bytes))):
            return [p[1] for p in vocab_bytes]      # pairs in id order, as Tokenizer gives them
        out = [b""] * len(vocab_bytes)
        for pair in vocab_bytes:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise GrammarError("vocab_bytes mixes (id, bytes) pairs with other items")
            tid, data = pair
            if not 0 <= int(tid) < len(out):
                raise GrammarError(f"vocab_bytes: token id {tid} out of range")
            out[int(tid)] = data
        return out
    return vocab_bytes


# tokenizer -> (vocab bytes with control tokens blanked, eog ids, their trie), built once per tokenizer
_tokenizer_vocab: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _special_flags(tokenizer, n: int) -> list:
    """is_special(id) for every id; from the token types in one pass when the tokenizer has them."""
    from oxillama.tokenizer.builder import TOKEN_CONTROL, TOKEN_UNKNOWN
    types = getattr(getattr(tokenizer, "vocab", None), "token_type", None)
    if types is not None and len(types) == n:
        return np.isin(np.asarray(types), (TOKEN_CONTROL, TOKEN_UNKNOWN)).tolist()
    return [bool(tokenizer.is_special(i)) for i in range(n)]


def _tokenizer_entry(tokenizer) -> tuple:
    try:
        hit = _tokenizer_vocab.get(tokenizer)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    vb = _as_byte_list(tokenizer.vocab_bytes())
    out = [b"" if s else b for b, s in zip(vb, _special_flags(tokenizer, len(vb)))]
    eog = sorted(tokenizer.eog_ids)
    entry = (out, eog, vocab_trie(out, eog))
    try:
        _tokenizer_vocab[tokenizer] = entry
    except TypeError:
        pass
    return entry


def tokenizer_vocab(tokenizer) -> tuple:
    """(vocab bytes, eog ids) for a Tokenizer: control and unknown tokens get b"", so a grammar can
    never spell them out (an end-of-generation token is allowed only through eog ids)."""
    out, eog, _ = _tokenizer_entry(tokenizer)
    return out, eog


class _SharedMasks:
    """Masks of one vocabulary keyed by (grammar fingerprint, eog ids, parse stacks), LRU."""

    def __init__(self):
        self._lock = threading.Lock()
        self._masks: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        with self._lock:
            m = self._masks.get(key)
            if m is not None:
                self._masks.move_to_end(key)
            return m

    def put(self, key, mask) -> None:
        with self._lock:
            self._masks[key] = mask
            while len(self._masks) > SHARED_MASK_CACHE_SIZE:
                self._masks.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._masks.clear()


_shared_masks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Vocab -> _SharedMasks
_shared_lock = threading.Lock()


def shared_masks(vocab: Vocab) -> _SharedMasks:
    """The mask cache every matcher over this vocabulary trie shares."""
    with _shared_lock:
        c = _shared_masks.get(vocab)
        if c is None:
            c = _shared_masks[vocab] = _SharedMasks()
        return c


class GrammarMatcher:
    """Match a Grammar token by token over a vocabulary.

    Args:
        grammar: the Grammar.
        vocab_bytes: bytes of every token, indexed by token id, or ``[(id, bytes)]`` pairs as
            ``Tokenizer.vocab_bytes()`` gives them, or a prebuilt trie (``vocab.vocab_trie``) made
            with the same eog_ids. Tokens with empty bytes are never allowed.
            Prefer ``GrammarMatcher.from_tokenizer``, which also hides control tokens.
        eog_ids: end-of-generation token ids, allowed only where the grammar can end.
    """

    @classmethod
    def from_tokenizer(cls, grammar: Grammar, tokenizer) -> "GrammarMatcher":
        """A matcher over a Tokenizer's vocabulary: control tokens are never allowed, and the
        tokenizer's end-of-generation tokens only where the grammar can end."""
        _, eog, trie = _tokenizer_entry(tokenizer)
        return cls(grammar, trie, eog)

    def __init__(self, grammar: Grammar, vocab_bytes, eog_ids=()):
        if not isinstance(grammar, Grammar):
            raise GrammarError(f"GrammarMatcher needs a Grammar, not {type(grammar).__name__}")
        self.grammar = grammar
        eog = sorted(set(int(t) for t in eog_ids))
        if isinstance(vocab_bytes, Vocab):
            if vocab_bytes.skip != tuple(eog):
                raise GrammarError("the vocabulary trie was built for other end-of-generation ids")
            self.vocab = vocab_bytes
        else:
            self.vocab = vocab_trie(_as_byte_list(vocab_bytes), eog)
        self.n_vocab = self.vocab.n_vocab
        for t in eog:
            if not 0 <= t < self.n_vocab:
                raise GrammarError(f"end-of-generation id {t} out of range for a vocabulary of {self.n_vocab}")
        self.eog_ids = np.asarray(eog, dtype=np.int64)
        self._eog_set = frozenset(eog)
        self._machine = grammar.new_machine()
        self._masks: collections.OrderedDict = collections.OrderedDict()
        self._shared = shared_masks(self.vocab)
        self._shared_prefix = (grammar.fingerprint, tuple(eog))
        self.reset()

    # -- state -----------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._state = self._machine.initial(self.grammar.root_id)
        self._ended = False

    def _compact(self) -> None:
        if self._machine.n_states > MAX_MACHINE_STATES:
            stacks = self._machine.export(self._state)
            self._machine.reset()
            self._masks.clear()
            self._state = self._machine.import_(stacks)
            log.debug("grammar matcher tables rebuilt (%d stacks kept)", len(stacks))

    @property
    def can_end(self) -> bool:
        """The text so far is a complete match (an end-of-generation token is allowed)."""
        return self._ended or self._machine.can_end(self._state)

    @property
    def is_finished(self) -> bool:
        """Generation must stop: an end-of-generation token was accepted, or nothing can follow."""
        return self._ended or (self._machine.can_end(self._state) and self._machine.n_stacks(self._state) == 1)

    def get_state(self) -> dict:
        """Plain data (lists, ints, bools) describing where the match is, for snapshots."""
        return {"version": STATE_VERSION, "grammar": self.grammar.fingerprint,
                "stacks": self._machine.export(self._state), "ended": self._ended}

    def set_state(self, state: dict) -> None:
        """Restore a get_state() result taken from a matcher of the same grammar."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise GrammarError(f"not a grammar matcher state (version {STATE_VERSION} expected)")
        if state.get("grammar") != self.grammar.fingerprint:
            raise GrammarError("grammar matcher state was saved under a different grammar")
        stacks = state.get("stacks")
        if not isinstance(stacks, (list, tuple)) or not all(
                isinstance(s, (list, tuple)) and all(isinstance(p, int) for p in s) for s in stacks):
            raise GrammarError("grammar matcher state: 'stacks' must be a list of lists of ints")
        if not stacks:
            raise GrammarError("grammar matcher state has no parse stacks")
        self._compact()
        try:
            new = self._machine.import_(stacks)
        except GrammarError as e:
            raise GrammarError("grammar matcher state does not fit this grammar") from e
        self._state = new
        self._ended = bool(state.get("ended", False))

    # -- tokens ----------------------------------------------------------------------------------
    def _check_id(self, token_id) -> int:
        t = int(token_id)
        if not 0 <= t < self.n_vocab:
            raise GrammarError(f"token id {t} out of range for a vocabulary of {self.n_vocab}")
        return t

    def is_token_allowed(self, token_id: int) -> bool:
        """Whether the grammar allows this token next (cheap: one walk over its bytes)."""
        t = self._check_id(token_id)
        if self._ended:
            return False
        if t in self._eog_set:
            return self._machine.can_end(self._state)
        return self._machine.token_allowed(self._state, self.vocab, t) != 0

    def accept_token(self, token_id: int) -> None:
        """Advance over a token; raises GrammarError if the grammar does not allow it."""
        t = self._check_id(token_id)
        if self._ended:
            raise GrammarError("the grammar already ended (an end-of-generation token was accepted)")
        if t in self._eog_set:
            if not self._machine.can_end(self._state):
                raise GrammarError(f"end-of-generation token {t} where the grammar cannot end")
            self._ended = True
            return
        self._compact()
        new = self._machine.token_allowed(self._state, self.vocab, t)
        if new == 0:
            raise GrammarError(f"token {t} ({self.vocab.token_bytes(t)!r}) is not allowed by the grammar here")
        self._state = new

    def accept_bytes(self, data: bytes) -> None:
        """Advance over raw bytes (e.g. a forced prefix); raises GrammarError if rejected."""
        if self._ended:
            raise GrammarError("the grammar already ended")
        self._compact()
        new = self._machine.walk(self._state, bytes(data))
        if new == 0:
            raise GrammarError(f"bytes {bytes(data)[:40]!r} are not allowed by the grammar here")
        self._state = new

    def _mask(self) -> np.ndarray:
        """The allowed-token mask of the current state (cached, do not modify)."""
        key = (self._state, self._ended)
        m = self._masks.get(key)
        if m is not None:
            self._masks.move_to_end(key)
            return m
        self._compact()
        key = (self._state, self._ended)
        # state ids belong to this matcher's machine; other matchers know the state by its stacks
        shared_key = self._shared_prefix + (self._ended, tuple(map(tuple, self._machine.export(self._state))))
        m = self._shared.get(shared_key)
        if m is None:
            m = self._compute_mask()
            self._shared.put(shared_key, m)
        self._masks[key] = m
        while len(self._masks) > MASK_CACHE_SIZE:
            self._masks.popitem(last=False)
        return m

    def _compute_mask(self) -> np.ndarray:
        m = np.empty(self.n_vocab, dtype=np.bool_)
        if self._ended:
            m[:] = False
        else:
            self._machine.fill_mask(self._state, self.vocab, m)
            if len(self.eog_ids):
                m[self.eog_ids] = self._machine.can_end(self._state)
        m.flags.writeable = False
        return m

    def fill_mask(self, mask: np.ndarray) -> np.ndarray:
        """Write the allowed tokens into `mask` (bool, shape (n_vocab,)) and return it."""
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.n_vocab,):
            raise GrammarError(f"mask must be a numpy bool array of shape ({self.n_vocab},)")
        mask[...] = self._mask()
        return mask

    def allowed_tokens(self) -> np.ndarray:
        """Ids of every token allowed next."""
        return np.flatnonzero(self._mask())

    def apply_to_logits(self, logits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Set logits of disallowed tokens to -inf (float32, shape (n_vocab,)): in place, or into
        `out` (the allowed ones copied) in the same pass. Returns the masked array."""
        for a in (logits, out):
            if a is None:
                continue
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != (self.n_vocab,) \
                    or not a.flags.c_contiguous or (a is out and not a.flags.writeable):
                raise GrammarError(f"logits must be a contiguous float32 array of shape ({self.n_vocab},)")
        mask = self._mask()
        if not self._ended and not mask.any():
            # nothing to sample from: say why instead of handing the sampler all -inf
            raise GrammarError("no token of the vocabulary can continue the grammar here "
                               f"(after {self._machine.n_stacks(self._state)} parse stacks)")
        apply_mask_to_logits(logits, mask, out)
        return logits if out is None else out
