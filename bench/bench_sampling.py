"""Sampling speed on a 262,144-token vocabulary (gemma-3's), one thread.

Target (issue 6): the default chain (llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05,
temperature 0.8) under 1 ms per token. Run: `pytest bench/bench_sampling.py`.
"""
import numpy as np
import pytest

from oxillama.sampling import Sampler, SamplerConfig, top_logprobs

N_VOCAB = 262_144
HISTORY = 1024


@pytest.fixture(scope="module")
def logits():
    """LM-like logits: a broad floor with a handful of strong candidates."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(N_VOCAB) * 2.0).astype(np.float32)
    x[rng.integers(0, N_VOCAB, 20)] += 12.0
    return x


@pytest.fixture(scope="module")
def history():
    return np.random.default_rng(1).integers(0, N_VOCAB, HISTORY)


CONFIGS = {
    "default": SamplerConfig(),
    "default+penalties+dry": SamplerConfig(repeat_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1,
                                           dry_multiplier=0.8),
    "greedy": SamplerConfig(temperature=0.0),
    "top_p_only": SamplerConfig(top_k=0, min_p=0.0),
    "min_p_only": SamplerConfig(top_k=0, top_p=1.0),
    "full_draw": SamplerConfig(top_k=0, top_p=1.0, min_p=0.0),
    "mirostat_v2": SamplerConfig(mirostat=2),
    "xtc+dynatemp": SamplerConfig(xtc_probability=0.5, dynatemp_range=0.5),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_sample(benchmark, logits, history, name):
    sampler = Sampler(CONFIGS[name], seed=0)
    benchmark(sampler.sample, logits, history)


def test_top_logprobs_20(benchmark, logits):
    benchmark(top_logprobs, logits, 20)
