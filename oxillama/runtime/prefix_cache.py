"""PrefixKvCache: K/V of prompt prefixes shared between requests, in a radix tree over token ids.

The K and V rows of position p depend only on tokens [0, p] (attention is causal), so the rows
computed for one prompt are valid for every prompt that starts with the same tokens. A server that
sends one long system prompt with many user turns stores it once and, for each request, copies the
cached rows into the engine's cache and runs only the rest of the prompt.

Tree: each edge is labelled with a run of token ids and owns the K/V rows of those positions,
(n_layer, len(run), kv_dim) each; a node's depth is the prefix length at its end. A node may also hold
a state blob (any object with nbytes, e.g. a recurrent layer's state after its last position), which
counts in the byte budget and goes with the node; restore_state() resumes from the deepest such node (the
Scheduler keeps recurrent models' states there: before a prompt's last token and at a request's end). Inserting a prompt
that diverges inside an edge splits it. Under a byte budget the least recently used leaves are
evicted first, so shared prefixes (internal nodes) outlive the suffixes hanging off them.

Any KVCache serves as source or destination: an engine's ContiguousKVCache, or one sequence of a
SequencePool seen through SequencePool.rows() (the Scheduler's prompt cache, `oxillama serve --cache-ram`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from oxillama.errors import InvalidArgumentError
from oxillama.runtime.kv_cache import KVCache

log = logging.getLogger("oxillama.prefix_cache")

DEFAULT_MAX_BYTES = 256 * 2**20


class _Node:
    __slots__ = ("tokens", "k", "v", "state", "children", "parent", "depth", "last_used")

    def __init__(self, tokens: np.ndarray, k, v, parent: "_Node | None", depth: int, last_used: int):
        self.tokens = tokens        # (n,) int32 edge label
        self.k, self.v = k, v       # (n_layer, n, kv_dim) each, positions [depth - n, depth)
        self.state = None           # optional blob (with .nbytes) valid after position depth - 1
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.depth = depth
        self.last_used = last_used

    @property
    def nbytes(self) -> int:
        # latent attention (kv_v_is_k): v is k, its rows held once
        rows = 0 if self.k is None else self.k.nbytes + (0 if self.v is self.k else self.v.nbytes)
        return rows + int(getattr(self.state, "nbytes", 0))


@dataclass
class PrefixCacheStats:
    hits: int = 0            # restores that supplied at least one cached position
    misses: int = 0          # restores that found nothing usable
    hit_tokens: int = 0      # prefill positions skipped thanks to the cache
    inserted_tokens: int = 0
    evicted_tokens: int = 0
    evictions: int = 0       # entries (tree leaves) dropped to stay within max_bytes


def _cut(node: _Node, positions: slice) -> tuple:
    """Copies of node's K and V rows at positions; one array for both when V is K (latent attention)."""
    k = node.k[:, positions].copy()
    return k, (k if node.v is node.k else node.v[:, positions].copy())


def _common_len(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


class PrefixKvCache:
    """Radix tree of cached prompt prefixes with LRU eviction under `max_bytes` of K/V.

        cache = PrefixKvCache(max_bytes=512 * 2**20)
        engine = InferenceEngine.from_gguf(path, prefix_cache=cache)   # generate() uses it
        # or by hand, with any KVCache:
        cache.insert(tokens, engine.kv)            # remember the rows of tokens [0, len)
        n = cache.restore(tokens, engine.kv)       # engine.kv now holds the longest cached prefix
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._root = _Node(np.zeros(0, np.int32), None, None, None, 0, 0)
        self._clock = 0
        self._layout: tuple | None = None    # (n_layer, kv_dim, dtype) of the stored rows
        self.nbytes = 0
        self.stats = PrefixCacheStats()

    # ---- queries ----

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _walk(self, tokens: np.ndarray) -> list[tuple[_Node, int]]:
        """The path matching tokens: (node, positions of its edge used), root excluded."""
        path = []
        node, i = self._root, 0
        while i < len(tokens):
            child = node.children.get(int(tokens[i]))
            if child is None:
                break
            used = _common_len(child.tokens, tokens[i:])
            path.append((child, used))
            i += used
            if used < len(child.tokens):
                break
            node = child
        return path

    def match(self, tokens) -> int:
        """How many leading tokens of `tokens` have cached K/V (no counters, no LRU update)."""
        return sum(used for _, used in self._walk(_as_ids(tokens)))

    def __len__(self) -> int:
        """Cached positions (each stored once, shared prefixes counted once)."""
        return sum(len(n.tokens) for n in self._nodes())

    def _nodes(self):
        stack = list(self._root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    # ---- updates ----

    def insert(self, tokens, source: KVCache, state=None) -> int:
        """Store the K/V rows of tokens[0:len) read from `source` (which must hold them at those
        positions); only the part not cached yet is copied. Returns the number of new positions.
        state, if given, is kept with the node ending at len(tokens) (see the module docstring)."""
        ids = _as_ids(tokens)
        if len(ids) > source.n_past:
            raise InvalidArgumentError(f"the source cache holds {source.n_past} positions, fewer than the "
                                       f"{len(ids)} tokens to insert")
        self._check_layout(source)
        now = self._tick()
        node, i = self._root, 0
        while i < len(ids):
            child = node.children.get(int(ids[i]))
            if child is None:
                k, v = source.read(i, len(ids))
                leaf = _Node(ids[i:].copy(), k, v, node, len(ids), now)
                node.children[int(ids[i])] = leaf
                self.nbytes += leaf.nbytes
                self.stats.inserted_tokens += len(ids) - i
                added = len(ids) - i
                break
            used = _common_len(child.tokens, ids[i:])
            if used < len(child.tokens):
                child = self._split(child, used)
            child.last_used = now
            node, i = child, i + used
        else:
            added = 0
        if state is not None and ids.size:
            end = self._walk(ids)[-1][0]          # the node whose edge ends at len(ids)
            self.nbytes -= end.nbytes
            end.state = state
            self.nbytes += end.nbytes
        self._evict()
        return added

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut node's edge after `at` tokens; the new upper node (holding [0, at)) is returned."""
        parent = node.parent
        upper = _Node(node.tokens[:at].copy(), *_cut(node, slice(None, at)), parent,
                      node.depth - len(node.tokens) + at, node.last_used)
        node.tokens = node.tokens[at:].copy()
        node.k, node.v = _cut(node, slice(at, None))
        node.parent = upper
        upper.children[int(node.tokens[0])] = node
        parent.children[int(upper.tokens[0])] = upper
        return upper

    def restore(self, tokens, dest: KVCache, start: int = 0) -> int:
        """Write the longest cached prefix of `tokens` into `dest` and return its length n.

        dest keeps its positions [0, start) (they must already hold these tokens' rows, e.g. from
        the engine's own cache); rows [start, n) are copied from the cache and dest.n_past becomes
        n. When nothing beyond `start` is cached, dest is truncated to start and start returned.
        """
        ids = _as_ids(tokens)
        if not 0 <= start <= min(dest.n_past, len(ids)):
            raise InvalidArgumentError(f"start {start} must be within the destination's {dest.n_past} positions "
                                       f"and the {len(ids)} tokens")
        path = self._walk(ids)
        n = sum(used for _, used in path)
        if n <= start:
            self.stats.misses += 1
            dest.truncate(start)
            return start
        self._check_layout(dest)
        now = self._tick()
        dest.truncate(start)
        for node, used in path:
            node.last_used = now
            lo = node.depth - len(node.tokens)          # first position of this edge
            hi = lo + used
            if hi <= start:
                continue
            a = max(lo, start) - lo
            dest.write(node.k[:, a:used], node.v[:, a:used], lo + a)
        self.stats.hits += 1
        self.stats.hit_tokens += n - start
        return n

    def restore_state(self, tokens, dest: KVCache, start: int = 0) -> tuple[int, object]:
        """For recurrent models, whose state cannot be rebuilt from K/V rows: the longest cached prefix of
        `tokens` that ends at a node holding a state (a checkpoint). Its rows [start, n) are written into dest
        as restore() writes them and (n, state) returned; (start, None) when no checkpoint lies beyond start."""
        ids = _as_ids(tokens)
        best, depth = None, 0
        for node, used in self._walk(ids):
            if used == len(node.tokens) and node.state is not None:
                best, depth = node, node.depth
        if best is None or depth <= start:
            self.stats.misses += 1
            return start, None
        n = self.restore(ids[:depth], dest, start)
        return n, best.state

    def clear(self) -> None:
        self._root.children.clear()
        self.nbytes = 0

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes:
            leaves = [n for n in self._nodes() if not n.children]
            victim = min(leaves, key=lambda n: n.last_used)
            del victim.parent.children[int(victim.tokens[0])]
            self.nbytes -= victim.nbytes
            self.stats.evicted_tokens += len(victim.tokens)
            self.stats.evictions += 1
            log.debug("prefix cache evicted %d positions (depth %d)", len(victim.tokens), victim.depth)

    def _check_layout(self, cache: KVCache) -> None:
        layout = (cache.n_layer, cache.kv_dim, str(cache.dtype))
        if self._layout is None:
            self._layout = layout
        elif layout != self._layout:
            raise InvalidArgumentError(f"cache layout (n_layer, kv_dim, dtype) {layout} differs from the rows "
                                       f"stored in this prefix cache {self._layout}")

    def __repr__(self):
        return (f"PrefixKvCache({len(self)} positions, {self.nbytes / 1e6:.1f} of {self.max_bytes / 1e6:.1f} MB, "
                f"hits={self.stats.hits}, misses={self.stats.misses})")


def _as_ids(tokens) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidArgumentError("tokens must be a 1-D sequence of ints")
    return arr.astype(np.int32, copy=False)
