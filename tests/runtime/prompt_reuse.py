"""Prompt reuse, checked the same way for every state kind (KV pages, conv and scan checkpoints, latent KV):
a session run through prompts that share prefixes must write what a fresh engine writes for each."""
from oxillama import InferenceEngine


def fresh_and_reused(engine, path, prompts, max_tokens: int, **engine_kwargs):
    """(want, got, reused): each prompt's greedy tokens from a fresh engine on `path` (n_ctx 256, 1 thread,
    `engine_kwargs`), then from `engine` taking the prompts in turn, and the prefix `engine` reused for each."""
    with InferenceEngine.from_gguf(path, n_ctx=256, n_threads=1, **engine_kwargs) as solo:
        want = []
        for p in prompts:
            solo.reset()
            want.append(solo.generate(p, max_tokens=max_tokens, temperature=0).tokens)
    engine.reset()
    got, reused = [], []
    for p in prompts:
        got.append(engine.generate(p, max_tokens=max_tokens, temperature=0).tokens)
        reused.append(engine.last_prefix_reused)
    return want, got, reused
