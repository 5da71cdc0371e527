"""The runtime: the inference engine and its session state (KV caches)."""
from oxillama.runtime.engine import InferenceEngine
from oxillama.runtime.kv_cache import ContiguousKVCache

__all__ = ["ContiguousKVCache", "InferenceEngine"]
