"""SamplerConfig validation and serialisation; generate() keyword aliases."""
import json
import logging

import msgpack
import pytest

from oxillama.errors import SamplerError
from oxillama.sampling import SamplerConfig, resolve_generate_kwargs
from oxillama.sampling.chain import build_chain


def test_defaults_are_llama_cpp():
    c = SamplerConfig()
    assert (c.temperature, c.top_k, c.top_p, c.min_p, c.repeat_penalty, c.repeat_last_n) == (0.8, 40, 0.95, 0.05,
                                                                                           1.0, 64)
    assert c.dry_sequence_breakers == ("\n", ":", "\"", "*")


def test_round_trip_through_json_and_msgpack():
    c = SamplerConfig(temperature=0.3, logit_bias={5: -float("inf"), 2: 1.5}, banned_tokens=(9,),
                      dry_multiplier=0.8, samplers=("top_k", "temperature"), mirostat=2)
    d = c.to_dict()
    assert SamplerConfig.from_dict(json.loads(json.dumps(d))) == c
    assert SamplerConfig.from_dict(msgpack.unpackb(msgpack.packb(d))) == c


def test_logit_bias_with_string_keys_as_json_objects_have():
    assert SamplerConfig(logit_bias={"17": 2}).logit_bias == {17: 2.0}


@pytest.mark.parametrize("kw", [
    dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.01), dict(min_keep=0), dict(min_p=1.5),
    dict(typical_p=0.0), dict(top_k=-2), dict(top_k=2.5), dict(repeat_penalty=0.0), dict(mirostat=3),
    dict(temperature=float("nan")), dict(dry_base=0.5), dict(logit_bias={1: float("nan")}),
    dict(logit_bias={-1: 1.0}), dict(banned_tokens=(-3,)), dict(samplers=("top_k", "bogus")),
    dict(dry_sequence_breakers="\n"), dict(epsilon_cutoff=1.0), dict(xtc_probability=1.5),
    dict(frequency_penalty=float("inf")),
])
def test_invalid_values_raise(kw):
    with pytest.raises(SamplerError):
        SamplerConfig(**kw)


def test_unknown_field_in_dict_raises():
    with pytest.raises(SamplerError, match="tempreature"):
        SamplerConfig.from_dict({"tempreature": 0.5})


def test_samplers_string_like_llama_cpp():
    assert SamplerConfig(samplers="top_k;temperature").samplers == ("top_k", "temperature")


def test_custom_order_is_used():
    c = SamplerConfig(samplers=("temperature", "top_k"), temperature=0.5, top_k=3)
    chain = build_chain(c)
    assert [s.name for s in chain.stages] == ["temperature", "top_k"]
    names = [s.name for s in build_chain(SamplerConfig(repeat_penalty=1.1, dry_multiplier=0.5)).stages]
    assert names == ["repetition_penalty", "dry", "top_k", "top_p", "min_p", "temperature"]


def test_mirostat_chain_skips_truncation():
    chain = build_chain(SamplerConfig(mirostat=2))
    assert [s.name for s in chain.stages] == ["temperature"] and chain.selector.name == "mirostat_v2"
    assert build_chain(SamplerConfig(temperature=0.0, mirostat=2)).selector.name == "greedy"


def test_aliases_from_both_vocabularies():
    cfg, other = resolve_generate_kwargs(temp=0.5, repetition_penalty=1.2, max_new_tokens=30, stop_strings="###",
                                         typical_p=0.9, min_tokens_to_keep=2, seed=3, logprobs=4)
    assert (cfg.temperature, cfg.repeat_penalty, cfg.typical_p, cfg.min_keep) == (0.5, 1.2, 0.9, 2)
    assert other == {"max_tokens": 30, "stop": ["###"], "seed": 3, "logprobs": 4}
    cfg, other = resolve_generate_kwargs(temperature=0.5, repeat_penalty=1.2, max_tokens=30, stop=["a", "b"],
                                         mirostat_mode=2, n_predict=30)
    assert (cfg.temperature, cfg.repeat_penalty, cfg.mirostat) == (0.5, 1.2, 2)
    assert other == {"max_tokens": 30, "stop": ["a", "b"]}


@pytest.mark.parametrize("kw", [
    dict(temp=0.5, temperature=0.7), dict(max_tokens=5, max_new_tokens=6), dict(stop="a", stop_strings="b"),
    dict(repeat_penalty=1.1, repetition_penalty=1.2), dict(do_sample=True, temperature=0.0),
    dict(tfs_z=0.9), dict(do_sample="yes"), dict(sampler=3),
])
def test_conflicts_raise(kw):
    with pytest.raises(SamplerError):
        resolve_generate_kwargs(**kw)


def test_same_value_under_two_aliases_is_fine():
    cfg, _ = resolve_generate_kwargs(temp=0.5, temperature=0.5)
    assert cfg.temperature == 0.5


def test_do_sample_false_means_greedy(caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        cfg, _ = resolve_generate_kwargs(do_sample=False, temperature=0.9)
    assert cfg.greedy and "ignoring temperature" in caplog.text
    cfg, _ = resolve_generate_kwargs(do_sample=True)
    assert cfg.temperature == SamplerConfig().temperature


def test_sampler_config_is_the_base_and_kwargs_override():
    base = SamplerConfig(top_k=5, temperature=0.3)
    cfg, other = resolve_generate_kwargs(sampler=base, temperature=0.9)
    assert (cfg.top_k, cfg.temperature) == (5, 0.9) and other == {}
    cfg, _ = resolve_generate_kwargs(sampler=base.to_dict())
    assert cfg == base


def test_max_tokens_non_positive_means_unbounded_and_hf_ban_lists():
    _, other = resolve_generate_kwargs(max_tokens=-1)
    assert other["max_tokens"] is None
    cfg, _ = resolve_generate_kwargs(bad_words_ids=[[4], [7]], suppress_tokens=[1])
    assert set(cfg.banned_tokens) == {1, 4, 7}
    with pytest.raises(SamplerError):
        resolve_generate_kwargs(bad_words_ids=[[4, 5]])
