"""Scheduler and engine.generate_batch: many requests at once give each the text generate() gives it alone."""
import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from oxillama import InferenceEngine, Scheduler
from oxillama.errors import (BatchError, ContextOverflowError, InvalidArgumentError, KVPoolExhaustedError,
                             OxillamaError, QueueFullError, SamplerError, SchedulerStoppedError)

DATA = Path(__file__).parents[1] / "models" / "data"
TIMEOUT = 120          # s; a request not done by then is a hang, not slowness
GATE_WAIT = 10         # s

PROMPT_WORDS = ("the cat sat on a mat while seven small birds sang of rivers and stone under grey autumn "
                "skies far away from every town we knew").split()


def _prompts(engine, lengths, seed=0):
    """Token-id prompts of the given lengths (random ids: every tiny model has its own vocabulary)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, engine.n_vocab - 1, n).tolist() for n in lengths]


@pytest.fixture(scope="module", params=["llama", "gemma3", "mamba2", "granitehybrid"])
def tiny(request):
    with InferenceEngine.from_gguf(DATA / f"{request.param}.gguf", n_ctx=256, n_threads=1) as engine:
        yield engine


def _solo(engine, prompts, **kw):
    out = []
    for p in prompts:
        engine.reset()
        out.append(engine.generate(p, **kw))
    return out


def _same(got, want):
    assert [str(c) for c in got] == [str(c) for c in want]
    assert [c.tokens for c in got] == [c.tokens for c in want]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in want]


@pytest.mark.parametrize("kw", [dict(temperature=0), dict(temperature=0.8, seed=11),
                                dict(temperature=1.0, top_k=20, top_p=0.9, min_p=0.02, repeat_penalty=1.2, seed=3)])
def test_generate_batch_equals_solo_generate(tiny, kw):
    prompts = _prompts(tiny, [5, 37, 1, 120, 9, 64, 2, 23])
    want = _solo(tiny, prompts, max_tokens=24, **kw)
    _same(tiny.generate_batch(prompts, max_tokens=24, **kw), want)
    _same(tiny.generate_batch(prompts[::-1], max_tokens=24, **kw), want[::-1])
    # a small token budget: prompts prefill over several steps among the others' decodes
    _same(tiny.generate_batch(prompts, max_tokens=24, n_seq_max=3, max_batch_tokens=20, **kw), want)


def test_per_request_options_match_generate(tiny):
    p = _prompts(tiny, [12, 30, 7, 50], seed=1)
    eog = next(iter(tiny.tokenizer.eog_ids))
    requests = [
        (p[0], dict(max_tokens=16, temperature=0.7, seed=5, logprobs=3)),
        (p[1], dict(max_tokens=20, temperature=0, logit_bias={3: 5.0, 4: -np.inf})),
        (p[2], dict(max_tokens=12, temperature=0.9, seed=8, stop=[tiny.detokenize([7])])),
        (p[3], dict(max_new_tokens=10, do_sample=False, frequency_penalty=0.5)),
        (p[0], dict(max_tokens=6, temperature=0, logit_bias={eog: 100.0})),        # ends at once: "stop"
    ]
    with Scheduler(tiny, n_seq_max=4, max_batch_tokens=32) as sched:
        handles = [sched.submit(prompt, **kw) for prompt, kw in requests]
        got = [h.result(TIMEOUT) for h in handles]
    for (prompt, kw), g in zip(requests, got):
        tiny.reset()
        want = tiny.generate(prompt, **kw)
        _same([g], [want])
        assert g.logprobs == want.logprobs
        assert (g.usage.prompt_tokens, g.usage.completion_tokens, g.usage.total_tokens) == \
            (len(prompt), len(g.tokens), len(prompt) + len(g.tokens))
    assert got[0].logprobs is not None and len(got[0].logprobs) == len(got[0].tokens)
    assert got[4].finish_reason == "stop" and got[4].tokens == [eog]


def test_grammar_per_request_matches_generate(tiny):
    from oxillama.grammar import Grammar
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
              "required": ["a", "b"]}
    p = _prompts(tiny, [5, 18, 9], seed=2)
    requests = [(p[0], dict(max_tokens=40, temperature=0.8, seed=1, response_format={"type": "json_object",
                                                                                     "schema": schema})),
                (p[1], dict(max_tokens=20, temperature=0.9, seed=4)),                     # unconstrained companion
                (p[2], dict(max_tokens=20, temperature=0.8, seed=2, grammar=Grammar.from_string('root ::= [a-c]+ "."')))]
    with Scheduler(tiny, n_seq_max=3) as sched:
        got = [sched.submit(prompt, **kw).result(TIMEOUT) for prompt, kw in requests]
    for (prompt, kw), g in zip(requests, got):
        tiny.reset()
        _same([g], [tiny.generate(prompt, **kw)])
    assert got[0].startswith("{")


def test_ignore_eos_generates_past_end_of_generation(tiny):
    eog = next(iter(tiny.tokenizer.eog_ids))
    prompt = _prompts(tiny, [6])[0]
    stopped, through = tiny.generate_batch([prompt, prompt], max_tokens=5, temperature=0, logit_bias={eog: 100.0},
                                           ignore_eos=True)
    assert through.finish_reason == "length" and through.tokens == [eog] * 5
    (plain,) = tiny.generate_batch([prompt], max_tokens=5, temperature=0, logit_bias={eog: 100.0})
    assert plain.finish_reason == "stop" and plain.tokens == [eog]


def test_streaming_pieces_join_to_the_result(tiny):
    prompt = _prompts(tiny, [10])[0]
    with Scheduler(tiny) as sched:
        h = sched.submit(prompt, max_tokens=30, temperature=0.8, seed=2)
        pieces = list(h)
        assert h.done and "".join(pieces) == h.result(TIMEOUT) and len(pieces) > 1
        assert list(h) == pieces            # a finished handle replays its pieces

        async def consume():
            streamed = [p async for p in sched.stream(prompt, max_tokens=30, temperature=0.8, seed=2)]
            h2 = sched.submit(prompt, max_tokens=30, temperature=0.8, seed=2)
            return streamed, await h2.aresult()
        streamed, awaited = asyncio.run(consume())
    assert streamed == pieces and awaited == h.result() and awaited.tokens == h.result().tokens


def test_stream_does_not_block_the_event_loop(tiny):
    """The scheduler thread waits (in a stopping criterion) for a gate that only another coroutine on
    the loop opens: the stream finishes in time only if waiting for pieces leaves the loop free."""
    prompt = _prompts(tiny, [8])[0]
    gate, opened = threading.Event(), []

    def wait_for_gate(tokens, logits):
        opened.append(gate.wait(GATE_WAIT))
        return False

    async def main(sched):
        consumer = asyncio.ensure_future(_collect(sched.stream(prompt, max_tokens=5, temperature=0,
                                                               stopping_criteria=wait_for_gate)))
        await asyncio.sleep(0.05)
        gate.set()
        return await consumer

    with Scheduler(tiny) as sched:
        text = asyncio.run(main(sched))
    assert opened and all(opened), "the scheduler thread waited out the gate: the loop was blocked"
    assert isinstance(text, str)


async def _collect(stream):
    return "".join([p async for p in stream])


def test_next_step_waits_for_the_loop_to_send_the_tokens(tiny, monkeypatch):
    """When the forward's threads take every core, a step's streams are served before the next forward
    starts (the loop would otherwise take a core from the forward): at each step's start every piece pushed
    so far has reached its stream on the loop. The texts are those of the streams alone."""
    from oxillama.runtime import scheduler as scheduler_module
    monkeypatch.setattr(scheduler_module, "logical_cpus", lambda: tiny.n_threads)
    for name in ("LOOP_WAIT", "LOOP_START_WAIT"):                        # no give-up under a loaded machine
        monkeypatch.setattr(scheduler_module, name, GATE_WAIT)
    prompts = _prompts(tiny, [5, 8, 3], seed=17)
    kw = dict(max_tokens=12, temperature=0.8, seed=5)
    want = _solo(tiny, prompts, **kw)
    received, late = {}, []

    async def consume(sched, prompt):
        handle = sched.submit(prompt, **kw)
        received[handle] = 0
        async for _ in handle.astream():
            received[handle] += 1
        return await handle.aresult()

    async def main(sched):
        return await asyncio.gather(*(consume(sched, p) for p in prompts))

    with Scheduler(tiny, n_seq_max=4) as sched:
        assert sched._wait_for_loops
        step = sched.pool.step

        def checked_step(items):
            late.extend((h.id, n, len(h._pieces)) for h, n in list(received.items()) if n != len(h._pieces))
            return step(items)
        sched.pool.step = checked_step
        got = asyncio.run(main(sched))
    _same(got, want)
    assert not late, f"steps started before the loop had sent their streams' pieces (id, sent, pushed): {late}"


def test_cancel_frees_the_slot(tiny):
    prompt = _prompts(tiny, [10])[0]
    gate, entered = threading.Event(), threading.Event()

    def hold(tokens, logits):
        entered.set()
        gate.wait(GATE_WAIT)
        return False

    with Scheduler(tiny, n_seq_max=1) as sched:
        long = sched.submit(prompt, max_tokens=200, temperature=0.9, seed=1, ignore_eos=True, stopping_criteria=hold)
        waiting = sched.submit(prompt, max_tokens=4, temperature=0)
        assert entered.wait(TIMEOUT)  # it runs (held in its first step)
        assert not waiting.done
        with pytest.raises(TimeoutError, match="did not finish within"):
            long.result(timeout=0.05)
        long.cancel()
        long.cancel()                 # idempotent
        gate.set()
        got = waiting.result(TIMEOUT)
        assert len(got.tokens) == 4
        assert long.result(TIMEOUT).finish_reason == "cancelled" and len(long.result().tokens) < 200
        long.cancel()                 # after the end too
        assert sched.metrics()["request_success_total"]["cancelled"] == 1
        assert sched.metrics()["num_requests_running"] == 0


def test_preemption_under_a_tiny_pool_keeps_every_text(tiny):
    from oxillama import _core
    page = _core.KV_PAGE
    prompts = _prompts(tiny, [page // 3, page // 2, page // 7, page * 5 // 8, page // 4], seed=4)
    kw = dict(max_tokens=page, temperature=0.8, seed=9)
    want = _solo(tiny, prompts, **kw)
    # each request grows to 2 pages; 3 pages hold one or two of them at a time
    with Scheduler(tiny, n_seq_max=4, max_batch_tokens=64, n_pages=3) as sched:
        handles = [sched.submit(p, **kw) for p in prompts]
        got = [h.result(TIMEOUT) for h in handles]
        m = sched.metrics()
    _same(got, want)
    assert m["num_preemptions_total"] > 0
    assert m["request_success_total"]["length"] + m["request_success_total"]["stop"] == len(prompts)


def test_prompts_sharing_a_prefix_share_pages(tiny):
    prefix = _prompts(tiny, [64], seed=5)[0]
    a, b = prefix + [1, 2, 3], prefix + [4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    kw = dict(max_tokens=30, temperature=0)
    want = _solo(tiny, [a, b], **kw)
    gate, entered = threading.Event(), threading.Event()

    def hold_once(tokens, logits):    # a waits after its first token until b is queued
        entered.set()
        gate.wait(GATE_WAIT)
        return False

    with Scheduler(tiny, n_seq_max=2) as sched:
        ha = sched.submit(a, stopping_criteria=hold_once, **kw)
        assert entered.wait(TIMEOUT)  # a is decoding: its prefix is cached
        hb = sched.submit(b, **kw)
        gate.set()
        _same([ha.result(TIMEOUT), hb.result(TIMEOUT)], want)
        m = sched.metrics()
    if tiny.recurrent is not None:   # a's recurrent state is known only at its end, past the shared prefix
        assert hb.stats["n_cached_prompt_tokens"] == 0 and m["prefix_cache_hits_total"] == 0
        return
    assert hb.stats["n_cached_prompt_tokens"] > 0 and m["prefix_cache_hits_total"] == hb.stats["n_cached_prompt_tokens"]


def test_stats_and_metrics_are_consistent(tiny):
    prompts = _prompts(tiny, [15, 40, 3], seed=6)
    finished = []
    with Scheduler(tiny, n_seq_max=2, max_batch_tokens=16) as sched:
        sched.add_listener(finished.append)
        handles = [sched.submit(p, max_tokens=12, temperature=0.5, seed=1) for p in prompts]
        results = [h.result(TIMEOUT) for h in handles]
        m = sched.metrics()
    assert sorted(h.id for h in finished) == sorted(h.id for h in handles) and len({h.id for h in handles}) == 3
    for h, r, p in zip(handles, results, prompts):
        s = h.stats
        assert s["n_prompt_tokens"] == len(p) and s["n_generated_tokens"] == len(r.tokens)
        assert 0 <= s["queue_time"] <= s["time_to_first_token"] <= s["e2e_latency"]
        assert len(s["inter_token_latencies"]) == len(r.tokens) - 1 and min(s["inter_token_latencies"]) >= 0
    assert m["prompt_tokens_total"] == sum(map(len, prompts))
    assert m["generation_tokens_total"] == sum(len(r.tokens) for r in results)
    assert sum(m["request_success_total"].values()) == 3 and m["num_requests_waiting"] == 0
    assert m["kv_cache_usage_perc"] == 0.0 and m["num_steps_total"] > 0
    assert 0 < m["forward_time_total"] <= m["step_time_total"]


@pytest.mark.parametrize("slowdown", [None, 2.5])
def test_decode_slowdown_cuts_prefill_while_others_decode(tiny, slowdown):
    """max_decode_slowdown: while requests decode, a long prompt goes in chunks that keep each step within
    that many decode-only steps (here the measured costs are pinned: a decode step 10 ms, a prompt token
    5 ms, so at 2.5 a step takes 3 prompt tokens); every text stays what generate() gives. The decodes run
    long enough (80 tokens) to outlast the prompt's ~34 capped steps, however far they got before it came."""
    decoding, long_prompt = _prompts(tiny, [6, 9], seed=21), _prompts(tiny, [100], seed=22)[0]
    kw = dict(temperature=0, logit_bias={e: -100.0 for e in tiny.tokenizer.eog_ids})   # no early EOS
    want = _solo(tiny, decoding, max_tokens=80, **kw) + _solo(tiny, [long_prompt], max_tokens=4, **kw)
    step_tokens = []
    with Scheduler(tiny, n_seq_max=3, max_batch_tokens=64, max_decode_slowdown=slowdown) as sched:
        sched._record_cost = lambda seconds: None
        sched._cost_decode, sched._cost_token = 0.010, 0.005
        step = sched.pool.step
        # (tokens, sequences) of each step: the cap applies only to steps that carry decodes beside the prompt
        sched.pool.step = lambda items: step_tokens.append((sum(len(t) for _, t, _ in items), len(items))) or \
            step(items)
        handles = [sched.submit(p, max_tokens=80, **kw) for p in decoding]
        deadline = time.monotonic() + TIMEOUT
        while min(h.stats["n_generated_tokens"] for h in handles) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        n_before = len(step_tokens)
        handles.append(sched.submit(long_prompt, max_tokens=4, **kw))
        got = [h.result(TIMEOUT) for h in handles]
    _same(got, want)
    # prompt tokens in the steps where the prompt ran beside decodes (n tokens over n_seqs sequences, one of them
    # the prompt's chunk: n - (n_seqs - 1) of its tokens). A decode may stop early at EOS, and the steps after the
    # last one carry the prompt alone, uncapped.
    beside = [n - (n_seqs - 1) for n, n_seqs in step_tokens[n_before:] if n_seqs >= 2 and n > n_seqs]
    assert beside, f"the long prompt never ran beside a decode: {step_tokens[n_before:]}"
    if slowdown is None:
        assert max(beside) > 3              # the prompt goes in chunks of up to 62 tokens
    else:
        assert max(beside) <= 3             # at 2.5 decode steps' cost a step takes at most 3 prompt tokens
    with pytest.raises(InvalidArgumentError, match="max_decode_slowdown"):
        Scheduler(tiny, max_decode_slowdown=1.0)
    with pytest.raises(InvalidArgumentError, match="max_decode_slowdown"):
        Scheduler(tiny, max_decode_slowdown="2")


def test_bad_input_raises_at_submit_and_others_continue(tiny):
    with pytest.raises(InvalidArgumentError):
        Scheduler(tiny, n_seq_max=0)
    with pytest.raises(InvalidArgumentError):
        Scheduler(tiny, max_batch_tokens=0)
    prompt = _prompts(tiny, [10])[0]
    sched = Scheduler(tiny, n_seq_max=2)
    with pytest.raises(SchedulerStoppedError):        # not started
        sched.submit(prompt)
    with sched:
        good = [sched.submit(prompt, max_tokens=8, temperature=0.7, seed=s) for s in range(3)]
        with pytest.raises(InvalidArgumentError, match="no_such_option"):
            sched.submit(prompt, no_such_option=1)
        with pytest.raises(SamplerError):
            sched.submit(prompt, temperature=-1)
        with pytest.raises(ContextOverflowError):
            sched.submit([1] * 300)                  # longer than n_ctx=256
        with pytest.raises(ContextOverflowError):
            sched.submit(prompt, max_tokens=250)     # prompt + max_tokens past n_ctx
        with pytest.raises(InvalidArgumentError):
            sched.submit([tiny.n_vocab + 5])
        with pytest.raises(InvalidArgumentError):
            sched.submit("")
        # a request that fails while running (its stopping criterion raises) ends alone
        def broken(tokens, logits):
            raise RuntimeError("criterion failed")
        bad = sched.submit(prompt, max_tokens=8, stopping_criteria=broken, ignore_eos=True)
        with pytest.raises(RuntimeError, match="criterion failed"):
            bad.result(TIMEOUT)
        more = sched.submit(prompt, max_tokens=8, temperature=0)
        results = [h.result(TIMEOUT) for h in good + [more]]
    assert all(len(r.tokens) == 8 for r in results)
    assert results[:3] == _solo(tiny, [prompt] * 3, max_tokens=8, temperature=0.7, seed=0)[:1] + \
        _solo(tiny, [prompt] * 2, max_tokens=8, temperature=0.7, seed=1)[:1] + \
        _solo(tiny, [prompt], max_tokens=8, temperature=0.7, seed=2)
    with pytest.raises(SchedulerStoppedError):        # stopped
        sched.submit(prompt)
    with pytest.raises(SchedulerStoppedError):
        sched.start()
    assert issubclass(SchedulerStoppedError, BatchError) and issubclass(BatchError, OxillamaError)


def test_pool_too_small_for_a_request_and_full_queue(tiny):
    prompt = _prompts(tiny, [10])[0]
    gate, entered = threading.Event(), threading.Event()

    def hold(tokens, logits):         # keeps the scheduler thread inside a step until the gate opens
        entered.set()
        gate.wait(GATE_WAIT)
        return False

    from oxillama import _core
    with Scheduler(tiny, n_seq_max=1, n_pages=2, max_queue=1) as sched:
        with pytest.raises(KVPoolExhaustedError):    # 10 + 2 pages + 1 positions need 3 pages
            sched.submit(prompt, max_tokens=2 * _core.KV_PAGE + 1)
        first = sched.submit(prompt, max_tokens=6, stopping_criteria=hold, ignore_eos=True)
        assert entered.wait(TIMEOUT)
        second = sched.submit(prompt, max_tokens=4, ignore_eos=True)   # waits: the queue is now full
        with pytest.raises(QueueFullError):
            sched.submit(prompt, max_tokens=4)
        gate.set()
        assert len(second.result(TIMEOUT).tokens) == 4 and len(first.result(TIMEOUT).tokens) == 6
        sched.submit(prompt, max_tokens=2).result(TIMEOUT)   # room again


def test_stop_ends_unfinished_requests_as_cancelled(tiny):
    prompt = _prompts(tiny, [10])[0]
    gate, entered = threading.Event(), threading.Event()

    def hold(tokens, logits):
        entered.set()
        gate.wait(GATE_WAIT)
        return False

    sched = Scheduler(tiny, n_seq_max=1).start()
    running = sched.submit(prompt, max_tokens=200, ignore_eos=True, stopping_criteria=hold)
    queued = sched.submit(prompt, max_tokens=200, ignore_eos=True)
    assert entered.wait(TIMEOUT)
    threading.Timer(0.05, gate.set).start()     # stop() waits for the step in progress
    sched.stop()
    assert running.result(TIMEOUT).finish_reason == "cancelled"
    assert queued.result(TIMEOUT).finish_reason == "cancelled" and queued.result().tokens == []


@pytest.mark.parametrize("window", [0.0, 0.25])
def test_admission_window_gathers_a_burst_into_the_first_step(tiny, window):
    """An idle scheduler with an admission window waits while requests keep arriving (each within the window
    of the one before), so a burst shares the first step, as a server's 8 streams arriving one by one over
    HTTP should; a request that comes once the first step runs joins a later one. Without a window the
    first step usually starts on the first request alone (each text is the same either way)."""
    prompts = _prompts(tiny, [6, 9, 4, 11], seed=31)
    kw = dict(max_tokens=5, temperature=0.8, seed=4)
    want = _solo(tiny, prompts, **kw)
    steps = []
    with Scheduler(tiny, n_seq_max=8, admission_window=window) as sched:
        step = sched.pool.step
        sched.pool.step = lambda items: steps.append(sorted(s for s, _, _ in items)) or step(items)
        handles = []
        for p in prompts[:3]:                   # a burst: 20 ms apart, well within a 250 ms window
            handles.append(sched.submit(p, **kw))
            time.sleep(0.02)
        handles[0].result(TIMEOUT)
        handles.append(sched.submit(prompts[3], **kw))
        _same([h.result(TIMEOUT) for h in handles], want)
    if window:
        assert len(steps[0]) == 3, steps[:3]
    assert all(len(s) <= 3 for s in steps[:5]) and any(len(s) == 1 for s in steps), steps
    # the burst an idle scheduler is gathering takes its free slots, it is not its queue: max_queue=1 takes
    # 3 at once, then 1 that waits
    gate = threading.Event()

    def hold(tokens, logits):         # the burst stays running until the gate opens
        gate.wait(GATE_WAIT)
        return False

    with Scheduler(tiny, n_seq_max=3, max_queue=1, admission_window=0.25) as sched:
        burst = [sched.submit(p, max_tokens=3, stopping_criteria=hold, ignore_eos=True) for p in prompts[:3]]
        waits = sched.submit(prompts[3], max_tokens=3, ignore_eos=True)
        with pytest.raises(QueueFullError):
            sched.submit(prompts[3], max_tokens=3)
        gate.set()
        assert [len(h.result(TIMEOUT).tokens) for h in burst + [waits]] == [3] * 4
    for bad in (-0.001, 2.0, "0.01", True, float("nan")):
        with pytest.raises(InvalidArgumentError, match="admission_window"):
            Scheduler(tiny, admission_window=bad)


def test_generate_batch_bad_input(tiny):
    with pytest.raises(InvalidArgumentError):
        tiny.generate_batch("not a list")
    with pytest.raises(InvalidArgumentError):
        tiny.generate_batch([[1, 2]], n_seq_max=0)
    with pytest.raises(ContextOverflowError):
        tiny.generate_batch([[1, 2], [1] * 300], max_tokens=4)
    assert tiny.generate_batch([]) == []


# ---- real models ----

REAL_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
    "Q: What is the boiling point of water at sea level?\nA:",
    "List three colours:",
    "In 1969, the first humans landed on the Moon. " * 12 + "The astronauts were",
    "Hi",
    "Photosynthesis is the process by which plants",
]


@pytest.mark.slow
@pytest.mark.parametrize("model, kw", [("smollm2", dict(temperature=0)),
                                       ("smollm2", dict(temperature=0.8, seed=1234)),
                                       ("gemma3", dict(temperature=0.8, seed=99))])
def test_real_model_batch_equals_solo(request, model, kw):
    engine = request.getfixturevalue(model)
    want = _solo(engine, REAL_PROMPTS, max_tokens=16, **kw)
    _same(engine.generate_batch(REAL_PROMPTS, max_tokens=16, **kw), want)
    # reversed, with two extra companions, fewer slots and a small budget (chunked prefill among decodes)
    extra = ["Water is", "The best way to learn"]
    got = engine.generate_batch(REAL_PROMPTS[::-1] + extra, max_tokens=16, n_seq_max=4, max_batch_tokens=48, **kw)
    _same(got[:len(REAL_PROMPTS)], want[::-1])


def test_invariant_pool_policy(tiny):
    prefix = _prompts(tiny, [40], seed=7)[0]
    prompts = [prefix + q for q in _prompts(tiny, [3, 25, 1, 12], seed=8)] + _prompts(tiny, [30], seed=9)
    from oxillama import _core
    from oxillama.runtime.batch import SequencePool
    pool = SequencePool(tiny, n_seq_max=3, n_pages=max(3, 144 // _core.KV_PAGE))
    gate, entered = threading.Event(), threading.Event()

    def hold(tokens, logits):       # the first request waits after its first token until all are queued
        entered.set()
        gate.wait(GATE_WAIT)
        return False

    with Scheduler(tiny, pool=pool, max_batch_tokens=24) as sched:
        first = sched.submit(prompts[0], max_tokens=30, temperature=0.7, seed=1, ignore_eos=True,
                             stopping_criteria=hold)
        assert entered.wait(TIMEOUT)
        handles = [first] + [sched.submit(p, max_tokens=30, temperature=0.7, seed=1, ignore_eos=True)
                             for p in prompts[1:]]
        gate.set()
        results = [h.result(TIMEOUT) for h in handles]
        m = sched.metrics()
    assert all(len(r.tokens) == 30 and r.finish_reason == "length" for r in results)
    assert ["".join(h) for h in handles] == [str(r) for r in results]
    assert m["prefix_cache_hits_total"] > 0 and m["num_preemptions_total"] > 0
