"""The runtime: the inference engine and its session state.

    engine = InferenceEngine.from_gguf(path, prefix_cache=PrefixKvCache())  # prompts share cached prefixes
    engine.generate(prompt, max_tokens=20, seed=1)
    engine.save("session.oxs")                     # atomic msgpack snapshot of the whole session
    engine = InferenceEngine.resume("session.oxs", path)
    engine.generate(None, max_tokens=20)           # continues exactly where the saved one stopped

Many sequences: SequencePool (batch.py) holds them in one pool of KV pages that the C forward reads through
each sequence's block table, one forward per step for all of them.

KV caches share one interface (kv_cache.KVCache): ContiguousKVCache is one sequence's pages in order;
PagePool / PagedKVCache store rows of many sequences in Python-side 16-token pages (moved in and out of a
ContiguousKVCache by copies).
"""
from oxillama.runtime.batch import SequencePool
from oxillama.runtime.engine import InferenceEngine
from oxillama.runtime.kv_cache import ContiguousKVCache, KVCache
from oxillama.runtime.paged_kv import PagePool, PagedKVCache
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.snapshot import KVState

__all__ = ["ContiguousKVCache", "InferenceEngine", "KVCache", "KVState", "PagePool", "PagedKVCache", "PrefixKvCache",
           "SequencePool"]
