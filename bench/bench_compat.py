"""What the llama-cpp-python face costs on top of the engine: the same greedy chat on SmolLM2 through
engine.generate and through Llama.create_chat_completion (stream and not), alternated within each
round so the ratio holds on a noisy machine; and a forced tool call (grammar from the tool's schema).
Target: Llama within 3% of the engine's time for a 48-token chat.

    python -m pytest bench/bench_compat.py --benchmark-only --benchmark-columns=mean,rounds

The ratio to the engine and tokens/s are in each row's extra_info.
"""
import statistics
import time

import pytest

from oxillama import Llama

N_NEW = 48
MESSAGES = [{"role": "user", "content": "Write a short paragraph about rivers."}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}}}


def _pulled(name: str) -> str:
    from oxillama import hub
    from oxillama.errors import DownloadError
    try:
        return str(hub.pull(name, progress=False))
    except DownloadError as e:
        pytest.skip(f"model {name} unavailable: {e}")


@pytest.fixture(scope="module")
def llm():
    with Llama(_pulled("smollm2-135m"), n_ctx=1024, verbose=False) as m:
        yield m


def _engine_chat(llm):
    prompt = llm.engine.tokenizer.apply_chat_template(MESSAGES)
    return llm.engine.generate(prompt, max_tokens=N_NEW, temperature=0, logit_bias=_no_eog(llm))


def _no_eog(llm):
    return {int(t): float("-inf") for t in llm.engine.tokenizer.eog_ids}


def _llama_chat(llm, stream):
    out = llm.create_chat_completion(MESSAGES, max_tokens=N_NEW, temperature=0, logit_bias=_no_eog(llm),
                                     stream=stream)
    return list(out) if stream else out


def test_llama_chat_against_engine_interleaved(benchmark, llm):
    """Each round runs the engine's chat, then Llama's (not streamed), then Llama's streamed; the
    benchmark times the whole round, extra_info has each path's median and the ratios."""
    times = {"engine": [], "llama": [], "llama_stream": []}

    def one_round():
        for name, fn in (("engine", lambda: _engine_chat(llm)), ("llama", lambda: _llama_chat(llm, False)),
                         ("llama_stream", lambda: _llama_chat(llm, True))):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    benchmark.pedantic(one_round, rounds=7, warmup_rounds=1)
    med = {k: statistics.median(v[-7:]) for k, v in times.items()}
    benchmark.extra_info.update({f"{k}_tokens_per_s": N_NEW / v for k, v in med.items()})
    benchmark.extra_info["llama_ratio_to_engine"] = med["llama"] / med["engine"]
    benchmark.extra_info["llama_stream_ratio_to_engine"] = med["llama_stream"] / med["engine"]


def test_forced_tool_call(benchmark, llm):
    r = benchmark.pedantic(llm.create_chat_completion, args=([{"role": "user", "content": "Weather in Oslo?"}],),
                           kwargs=dict(tools=[TOOL], tool_choice="required", max_tokens=64, temperature=0),
                           rounds=3, warmup_rounds=1)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    benchmark.extra_info["completion_tokens"] = r["usage"]["completion_tokens"]
