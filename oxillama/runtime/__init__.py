"""The runtime: the inference engine and its session state (KV caches)."""
from oxillama.runtime.engine import InferenceEngine
from oxillama.runtime.kv_cache import ContiguousKVCache, KVCache
from oxillama.runtime.paged_kv import PagePool, PagedKVCache
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.snapshot import KVState

__all__ = ["ContiguousKVCache", "InferenceEngine", "KVCache", "KVState", "PagePool", "PagedKVCache", "PrefixKvCache"]
