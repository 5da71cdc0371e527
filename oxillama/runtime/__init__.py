"""The runtime: a loaded model with its session, and everything that decodes tokens with it.

    engine = InferenceEngine.from_gguf(path, prefix_cache=PrefixKvCache())  # prompts share cached prefixes
    engine.generate(prompt, max_tokens=20, seed=1)
    engine.save("session.oxs")                     # atomic msgpack snapshot of the whole session
    engine = InferenceEngine.resume("session.oxs", path)
    engine.generate(None, max_tokens=20)           # continues exactly where the saved one stopped

One file, one job:
- engine.py: InferenceEngine, a Model with one Session, LoRA adapters, prefix reuse, and the generate()
  face over the others below.
- model.py: Model, the loaded file: architecture, config, forward plan, tokenizer (immutable, shareable).
- session.py: Session, one sequence's state: KV cache, token history, last logits, sampler and grammar
  state, KV snapshot and restore.
- request.py: one generate() request, its keywords checked once, and the sampler, grammar matcher and
  stop strings it decodes with.
- decode.py: the per-token step (Decoder.advance) and the Completion it builds, for every caller.
- completion.py: what generate() returns (Completion, Usage, Timings, TokenLogprob).
- scheduler.py: continuous batching of many requests over one engine, one forward per step.
- batch.py: SequencePool, many sequences in one pool of KV pages, run in one batched C forward.
- kv_cache.py: one sequence's contiguous KV cache (the KVCache interface) and KV memory helpers.
- prefix_cache.py: PrefixKvCache, K/V of prompt prefixes shared between requests (a radix tree).
- snapshot.py: a session as one checked msgpack blob, and its hardened loader.
- speculative.py: speculative decoding with a draft model or n-gram prompt lookup.
- beam.py: beam search, each beam a forked sequence of a SequencePool.
- embeddings.py: text embeddings pooled from the final hidden states.
"""
from oxillama.runtime.batch import SequencePool
from oxillama.runtime.engine import InferenceEngine
from oxillama.runtime.kv_cache import ContiguousKVCache, KVCache
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.snapshot import KVState

__all__ = ["ContiguousKVCache", "InferenceEngine", "KVCache", "KVState", "PrefixKvCache", "SequencePool"]
