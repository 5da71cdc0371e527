"""Continuous batching: many generate() requests share one model, one KV pool and one forward per step.

    with Scheduler(engine, n_seq_max=8) as sched:
        h = sched.submit("The capital of France is", max_tokens=16, temperature=0)
        for piece in h:                  # text as it is produced
            print(piece, end="")
        h.result()                       # the Completion
        async for piece in sched.stream(prompt, max_tokens=32): ...    # on an asyncio loop

A background thread owns the SequencePool and runs steps. Each step, as vLLM's scheduler does:

1. every running sequence in decode gets its one token (its last sampled token is run);
2. prefill chunks of the requests still prefilling, then of waiting ones (admitted in order, up to
   n_seq_max live sequences), fill the rest of max_batch_tokens: a long prompt is prefilled over
   several steps and the decodes keep going meanwhile. With max_decode_slowdown, while requests decode
   the prefill part is also cut to what keeps the step within that many times a decode-only step (both
   costs measured as it runs): a long prompt arriving does not stall the streams already running, at
   the price of its own time to first token (on a CPU a few prompt tokens cost as much as a decode step);
3. when the pool has too few free pages for the step, the newest running request is preempted: its
   pages are freed and it waits at the head of the queue to be recomputed from its prompt and the
   tokens it has generated (its sampler, grammar and text state are kept, so its output is unchanged);
4. the pool runs the step; requests whose last known token was run take their next one through the
   same Decoder.advance as InferenceEngine.generate() (oxillama.runtime.decode);
5. the asyncio streams of the step's requests are woken, one wake-up per event loop; when the forward's
   threads take every core, the next step starts once those loops have sent the tokens (at most LOOP_WAIT
   later; at once if a loop is slow to start: the machine is busy), so a server's HTTP work does not take a
   core from the forward.

A new request whose prompt starts with the tokens cached by a live sequence forks it (the pages are
shared) and runs only the rest. With a prompt_cache (a PrefixKvCache: `oxillama serve --cache-ram`), the
K/V of every finished request (prompt and output) are kept there too, and a request whose prompt starts
with a longer cached prefix than any live sequence holds has those rows copied into its pages: the next
turn of a conversation, or a shared system prompt, prefills only what is new. The rows copied are the
bytes the forward wrote, so the logits are the same, bit for bit, as a cold run's. A request's life: WAITING -> PREFILL -> DECODE -> finished ("stop",
"length" or "cancelled"); preemption sends it back to WAITING.

The pool's forward gives every position the same logits whatever the shape of the step (the project's
invariant), so prompts are chunked freely, decodes batched, and a request's text, greedy or seeded, is the
same as generate()'s for the same prompt and keywords, alone or under any load.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import numpy as np

from oxillama._system import logical_cpus
from oxillama.errors import (BatchError, ContextOverflowError, InvalidArgumentError, KVPoolExhaustedError,
                             OxillamaError, QueueFullError, SchedulerStoppedError)
from oxillama.lora import check_loras
from oxillama.runtime.batch import SequencePool
from oxillama.runtime.completion import Timings, Usage
from oxillama.runtime.decode import Decoder
from oxillama.runtime.prefix_cache import PrefixKvCache
from oxillama.runtime.request import Request

log = logging.getLogger("oxillama.scheduler")

# weight of the newest step in the running estimates of step costs (max_decode_slowdown)
COST_EMA = 0.3
# an idle scheduler's admission wait lasts at most this many admission windows; a window is at most
# MAX_ADMISSION_WINDOW seconds
ADMISSION_WINDOWS = 5
MAX_ADMISSION_WINDOW = 1.0
# the longest the scheduler thread waits, after a step, for the asyncio loops it woke to send that step's
# tokens before it runs the next step, and for a loop to start on them (one that has not is short of a core:
# the machine is busy with other work, and the next forward goes on beside it) (see Scheduler._step)
LOOP_WAIT = 0.005
LOOP_START_WAIT = 0.001

WAITING, PREFILL, DECODE, FINISHED = "waiting", "prefill", "decode", "finished"


class RequestHandle:
    """A submitted request: iterate it for text pieces, result() for the Completion, cancel() to stop it.

    stats (filled as the request runs; times in seconds): queue_time (submit to first scheduled),
    time_to_first_token, inter_token_latencies (list), e2e_latency, n_prompt_tokens, n_generated_tokens,
    n_cached_prompt_tokens (prompt positions shared with a live sequence instead of run).
    """

    def __init__(self, sched: "Scheduler", request_id: str):
        self.id = request_id
        self._sched = sched
        self._cond = threading.Condition()       # pieces: what the iterators wait on
        self._finished = threading.Event()       # done: what result() waits on (a piece does not wake it)
        self._pieces: list[str] = []
        self._marks: list[int] = []    # tokens generated when each piece was pushed
        # the request's generated ids and their logprob entries (None: not asked), appended to by the
        # scheduler thread: entry k is final once a mark > k was pushed
        self.tokens: list[int] = []
        self.token_logprobs: list[dict[int, float]] | None = None
        self._done = False
        self._completion = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.stats = {"queue_time": None, "time_to_first_token": None, "inter_token_latencies": [],
                      "e2e_latency": None, "n_prompt_tokens": 0, "n_generated_tokens": 0,
                      "n_cached_prompt_tokens": 0}

    @property
    def done(self) -> bool:
        return self._done

    @property
    def finish_reason(self) -> str | None:
        return None if self._completion is None else self._completion.finish_reason

    def cancel(self) -> None:
        """Stop the request; its slot is freed at the next step. Idempotent; no effect once finished."""
        if not self._done and not self._cancelled:
            self._cancelled = True
            self._sched._wake()

    # ---- results ----

    def result(self, timeout: float | None = None):
        """The Completion (blocking). Raises TimeoutError after timeout seconds, or the request's error."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._completion

    def __iter__(self) -> Iterator[str]:
        """Text pieces as they are produced (blocking); every iteration starts from the first piece."""
        i = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: i < len(self._pieces) or self._done)
                new, done = self._pieces[i:], self._done
            i += len(new)
            yield from new
            if done:
                if self._error is not None:
                    raise self._error
                return

    async def astream(self) -> AsyncIterator[str]:
        """The pieces on an asyncio loop, without blocking it."""
        async for piece, _ in self.astream_marked():
            yield piece

    async def astream_marked(self) -> AsyncIterator[tuple[str, int]]:
        """(piece, n) on an asyncio loop: n is how many tokens had been generated when the piece was
        produced, so handle.tokens[:n] (and handle.token_logprobs[:n]) are the tokens behind the text so
        far. A token whose text is held back (an unfinished UTF-8 character, a possible stop string)
        counts in the piece that finally carries it; tokens that never show text (the end-of-generation
        token, a matched stop string) are only in handle.tokens once the request is done."""
        loop = asyncio.get_running_loop()
        key = (loop, asyncio.Event())
        with self._cond:
            self._async_waiters.add(key)
        try:
            i = 0
            while True:
                with self._cond:
                    new, marks, done = self._pieces[i:], self._marks[i:], self._done
                    if not new and not done:
                        key[1].clear()      # under the lock: a piece pushed after this sets it again
                if new:
                    i += len(new)
                    for piece, mark in zip(new, marks):
                        yield piece, mark
                elif done:
                    if self._error is not None:
                        raise self._error
                    return
                else:
                    await key[1].wait()
        finally:
            with self._cond:
                self._async_waiters.discard(key)

    async def aresult(self):
        """The Completion, awaited on an asyncio loop."""
        if not self._done:      # (done: a stream has just read every piece; no need to go through them again)
            async for _ in self.astream_marked():
                pass
        if self._error is not None:
            raise self._error
        return self._completion

    # ---- called by the scheduler thread ----

    def _push(self, piece: str | None = None, *, mark: int = 0, completion=None,
              error: BaseException | None = None, wake: dict | None = None) -> None:
        """wake: a step's {loop: [events]} to set in one call per loop when the step's tokens are all out
        (the Scheduler's), else the asyncio waiters are woken now."""
        with self._cond:
            if piece:
                self._pieces.append(piece)
                self._marks.append(mark)
            if completion is not None or error is not None:
                self._completion, self._error, self._done = completion, error, True
                self._finished.set()
            self._cond.notify_all()
            waiters = list(self._async_waiters)
        if wake is not None:
            for loop, event in waiters:
                wake.setdefault(loop, []).append(event)
            return
        _wake_loops({loop: [event] for loop, event in waiters})

    def __repr__(self):
        return f"RequestHandle(id={self.id!r}, done={self._done})"


class _Request:
    """A request's state on the scheduler thread: its sequence in the pool and its Decoder."""

    def __init__(self, handle, ids, decoder: Decoder, t_submit):
        self.handle = handle
        self.prompt = ids
        self.n_prompt = len(ids)
        self.known: list[int] = list(ids)         # prompt + generated: what the sequence must cache
        self.hist = np.zeros(len(ids) + decoder.max_tokens, dtype=np.int32)   # for the sampler's penalties
        self.hist[:len(ids)] = ids
        self.decoder = decoder
        self.seq: int | None = None
        self.n_cached = 0
        self.state = WAITING
        self.admitted_at = 0                      # admission order, for preemption (newest first)
        self.t_submit = t_submit
        self.t_last: float | None = None
        self.loras: list = []                     # [(LoraAdapter, scale)] applied to its rows
        self.lora_key: tuple = ()                 # what its cached positions were computed with


class Scheduler:
    """Continuous batching over one engine (see the module docstring).

    n_seq_max: sequences run at once. max_batch_tokens: tokens per step (decodes first, then prefill
    chunks). max_decode_slowdown: while requests decode, a step with prefill takes at most about this
    many times a decode-only step (None, the default: only max_batch_tokens limits the prefill).
    max_queue: waiting requests (not yet running, beyond the free slots) before submit() raises QueueFullError
    (None: unbounded).
    n_ctx: per-sequence context (default engine.n_ctx). n_pages: KV pages of the pool (default: room
    for n_seq_max full contexts). pool: a SequencePool to use instead of a new one. prompt_cache: a
    PrefixKvCache keeping finished requests' K/V for later prompts (None: only live sequences are shared);
    it then belongs to this scheduler's thread. admission_window: seconds an idle scheduler lets requests
    that arrive together gather before its first step (see _gather; 0, the default: it starts at once).
    """

    def __init__(self, engine, *, n_seq_max: int = 8, max_batch_tokens: int = 512,
                 max_decode_slowdown: float | None = None, max_queue: int | None = None, n_ctx: int | None = None,
                 n_pages: int | None = None, pool: SequencePool | None = None,
                 prompt_cache: PrefixKvCache | None = None, admission_window: float = 0.0):
        for name, v in (("n_seq_max", n_seq_max), ("max_batch_tokens", max_batch_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {v!r}")
        if max_decode_slowdown is not None and (isinstance(max_decode_slowdown, bool)
                                                or not isinstance(max_decode_slowdown, (int, float))
                                                or not 1.0 < max_decode_slowdown < float("inf")):
            raise InvalidArgumentError(f"max_decode_slowdown must be a number > 1 or None, got {max_decode_slowdown!r}")
        if max_queue is not None and (isinstance(max_queue, bool) or not isinstance(max_queue, int)
                                      or max_queue < 0):
            raise InvalidArgumentError(f"max_queue must be an int >= 0 or None, got {max_queue!r}")
        if (isinstance(admission_window, bool) or not isinstance(admission_window, (int, float))
                or not 0.0 <= admission_window <= MAX_ADMISSION_WINDOW):
            raise InvalidArgumentError(f"admission_window must be a number of seconds in [0, {MAX_ADMISSION_WINDOW}], "
                                       f"got {admission_window!r}")
        self.admission_window = float(admission_window)
        self.engine = engine
        self.pool = pool if pool is not None else SequencePool(engine, n_seq_max, n_ctx=n_ctx, n_pages=n_pages)
        self.n_seq_max = self.pool.n_seq_max
        self.n_ctx = self.pool.n_ctx
        self.max_batch_tokens, self.max_queue = max_batch_tokens, max_queue
        if prompt_cache is not None and not isinstance(prompt_cache, PrefixKvCache):
            raise InvalidArgumentError(f"prompt_cache must be a PrefixKvCache or None, "
                                       f"got {type(prompt_cache).__name__}")
        self.prompt_cache = prompt_cache
        self.max_decode_slowdown = None if max_decode_slowdown is None else float(max_decode_slowdown)
        # running estimates (seconds) of a decode-only step's forward and of one prefill token's share of
        # a step, for max_decode_slowdown; None until a step has shown them
        self._cost_decode: float | None = None
        self._cost_token: float | None = None
        self._step_shape = (0, 0)     # (decodes, prefill tokens) of the step being run
        self._admit_next = True       # False for one step after the pool ran out of pages mid-plan
        self._wake_batch: dict | None = None   # during a step's sampling: asyncio wake-ups to make at its end
        self._release: list = []               # and (request, remember) of the sequences to free then
        self._gathering = False                # in _gather: submit() does not wake the thread
        # whether a step waits for the loops it woke to have sent its tokens before the next step: when the
        # forward's threads take every core, a loop serving streams meanwhile takes a core from one of them and
        # the other waits for it at every barrier (see _step)
        self._wait_for_loops = getattr(engine, "n_threads", 1) >= logical_cpus()
        self._lock = threading.Condition()
        self._incoming: deque[_Request] = deque()    # submitted, not yet seen by the thread
        self._waiting: deque[_Request] = deque()     # the thread's queue (preempted ones at the head)
        self._running: list[_Request] = []           # holding a sequence, in admission order
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ids = itertools.count()
        self._admissions = itertools.count()
        self._listeners: list[Callable] = []
        self._m = {"prompt_tokens_total": 0, "generation_tokens_total": 0, "prefix_cache_hits_total": 0,
                   "request_success_total": {"stop": 0, "length": 0, "cancelled": 0}, "request_failure_total": 0,
                   "num_preemptions_total": 0, "num_steps_total": 0, "step_time_total": 0.0,
                   "forward_time_total": 0.0, "step_tokens_total": 0}

    # ---- lifecycle ----

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopping

    def start(self) -> "Scheduler":
        with self._lock:
            if self._thread is not None:
                if self._stopping:
                    raise SchedulerStoppedError("this scheduler was stopped; make a new one")
                return self
            self._thread = threading.Thread(target=self._loop, name="oxillama-scheduler", daemon=True)
            self._thread.start()
        log.info("scheduler started: n_seq_max %d, max_batch_tokens %d, %d KV pages of %d", self.n_seq_max,
                 self.max_batch_tokens, self.pool.n_pages, self.pool.page_size)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread; requests not finished end with finish_reason "cancelled"."""
        with self._lock:
            if self._thread is None:
                self._stopping = True
                return
            self._stopping = True
            self._lock.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> "Scheduler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wake(self) -> None:
        with self._lock:
            self._lock.notify_all()

    # ---- submitting ----

    def submit(self, prompt, **kwargs) -> RequestHandle:
        """Queue a generation of prompt (text or token ids) with engine.generate()'s keywords, plus
        ignore_eos=True (generate past end-of-generation tokens). Bad arguments raise here."""
        self._check_running()
        if self.engine.plan.non_causal:
            raise InvalidArgumentError(f"{self.engine.config.arch} is an encoder (embeddings only): it cannot "
                                       f"generate text; use the embeddings endpoint")
        req = self._prepare(prompt, kwargs)
        with self._lock:
            self._check_running()
            # waiting: the requests not yet running beyond the free slots (a burst an idle scheduler is
            # gathering takes its slots at once)
            queued = len(self._incoming) + len(self._waiting) - max(self.n_seq_max - len(self._running), 0)
            if self.max_queue is not None and queued >= self.max_queue:
                raise QueueFullError(f"{self.max_queue} requests are already waiting (max_queue={self.max_queue})")
            self._incoming.append(req)
            if not self._gathering or len(self._incoming) >= self.n_seq_max:
                self._lock.notify_all()
        return req.handle

    def _check_running(self) -> None:
        if self._stopping:
            raise SchedulerStoppedError("the scheduler was stopped")
        if self._thread is None:
            raise SchedulerStoppedError("the scheduler is not running: call start() (or use it as a context manager)")

    async def stream(self, prompt, **kwargs) -> AsyncIterator[str]:
        """submit() and the request's pieces on an asyncio loop; closing the stream early cancels it."""
        handle = self.submit(prompt, **kwargs)
        try:
            async for piece in handle.astream():
                yield piece
        finally:
            handle.cancel()

    def _prepare(self, prompt, kwargs: dict) -> _Request:
        """Validate a request as engine.generate() does and make its Decoder (sampler, grammar, stop strings)."""
        engine = self.engine
        for name in ("stream", "callback"):
            if name in kwargs:
                raise InvalidArgumentError(f"{name}= is not a submit() argument: iterate the handle for pieces")
        kwargs = dict(kwargs)
        loras = check_loras(kwargs.pop("lora", None))   # [(LoraAdapter, scale)] for this request's rows
        for adapter, _ in loras:
            adapter.bind(engine)
        req = Request.from_kwargs(kwargs, n_vocab=engine.n_vocab)
        if req.decoding != "sample":
            raise InvalidArgumentError("num_beams and speculative are engine.generate() options; the scheduler "
                                       "samples one token per step")
        if prompt is None:
            raise InvalidArgumentError("the scheduler needs a prompt (it does not continue a session)")
        ids = engine.encode_prompt(prompt)
        if len(ids) >= self.n_ctx:
            raise ContextOverflowError(f"the prompt has {len(ids)} tokens and n_ctx={self.n_ctx}: the context "
                                       f"needs room for the prompt and one token more (n_ctx >= {len(ids) + 1})")
        max_tokens = req.token_limit(len(ids), self.n_ctx)
        pages = -(-(len(ids) + max_tokens - 1) // self.pool.page_size)
        if pages > self.pool.n_pages:
            raise KVPoolExhaustedError(f"{len(ids)} prompt tokens + max_tokens={max_tokens} need {pages} KV pages; "
                                       f"the pool has {self.pool.n_pages}")
        decoder = Decoder(req, req.prepare(engine), engine.tokenizer, max_tokens)
        handle = RequestHandle(self, f"req-{next(self._ids)}")
        handle.stats["n_prompt_tokens"] = len(ids)
        r = _Request(handle, ids, decoder, time.perf_counter())
        handle.tokens, handle.token_logprobs = decoder.tokens, decoder.token_logprobs   # shared, appended in order
        r.loras = loras
        r.lora_key = tuple((a.sha256, sc) for a, sc in loras if sc != 0.0)
        return r

    # ---- metrics ----

    def add_listener(self, fn: Callable[[RequestHandle], None]) -> None:
        """fn(handle) is called on the scheduler thread when a request finishes (its stats are final)."""
        self._listeners.append(fn)

    def remove_listener(self, fn) -> None:
        self._listeners.remove(fn)

    def metrics(self) -> dict:
        """Counters since start, and the current load.

        num_requests_running / num_requests_waiting, kv_cache_usage_perc (pages in use / pages, 0..1),
        for a recurrent model recurrent_state_usage_perc (state slots in use / slots) and recurrent_state_bytes,
        prompt_tokens_total (prompt tokens of admitted requests), generation_tokens_total,
        request_success_total (by finish reason), request_failure_total, prefix_cache_hits_total (prompt
        tokens shared with live sequences), num_preemptions_total, and the step timing: num_steps_total,
        step_time_total (s, whole steps), forward_time_total (s, inside pool.step), step_tokens_total.
        With a prompt_cache: prompt_cache_hits_total / prompt_cache_misses_total (admissions it did / did
        not supply positions to), prompt_cache_hit_tokens_total, prompt_cache_bytes, prompt_cache_max_bytes,
        prompt_cache_evictions_total (entries dropped for room), prompt_cache_evicted_tokens_total.
        Per-request latencies are in each handle's stats; add_listener() sees every finished one.
        """
        with self._lock:
            m = dict(self._m)
            m["request_success_total"] = dict(self._m["request_success_total"])
            m["num_requests_running"] = len(self._running)
            m["num_requests_waiting"] = len(self._waiting) + len(self._incoming)
        m["kv_cache_usage_perc"] = 1.0 - self.pool.free_pages / self.pool.n_pages
        rec = self.pool.recurrent
        if rec is not None:   # a recurrent model: its state slots too (one per live sequence)
            m["recurrent_state_usage_perc"] = rec.n_used / rec.n_slots
            m["recurrent_state_bytes"] = rec.n_used * rec.slot_bytes
        cache = self.prompt_cache
        if cache is not None:
            st = cache.stats
            m.update(prompt_cache_hits_total=st.hits, prompt_cache_misses_total=st.misses,
                     prompt_cache_hit_tokens_total=st.hit_tokens, prompt_cache_bytes=cache.nbytes,
                     prompt_cache_max_bytes=cache.max_bytes, prompt_cache_evictions_total=st.evictions,
                     prompt_cache_evicted_tokens_total=st.evicted_tokens)
        return m

    def slots(self) -> list[dict]:
        """One entry per sequence the batch can hold (llama.cpp server's slots): its id, whether a request
        is in it, that request's id and state ("prefill" or "decode"), prompt tokens, tokens generated
        and still allowed (max_tokens left)."""
        with self._lock:
            busy = {r.seq: r for r in self._running if r.seq is not None}
            out = []
            for i in range(self.n_seq_max):
                r = busy.get(i)
                out.append({"id": i, "is_processing": r is not None, "id_task": r.handle.id if r else None,
                            "state": r.state if r else "idle", "n_prompt_tokens": r.n_prompt if r else 0,
                            "n_decoded": len(r.decoder.tokens) if r else 0,
                            "n_remain": r.decoder.max_tokens - len(r.decoder.tokens) if r else 0})
        return out

    # ---- the scheduler thread ----

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while not (self._stopping or self._incoming or self._waiting or self._running):
                        self._lock.wait()
                    if self._stopping:
                        break
                    if not self._running and not self._waiting:
                        self._gather()
                    self._waiting.extend(self._incoming)
                    self._incoming.clear()
                self._step()
        except BaseException as e:      # a bug: fail every request rather than leave them hanging
            log.exception("scheduler thread failed")
            self._fail_all(e)
            raise
        finally:
            with self._lock:
                self._stopping = True
                pending = list(self._running) + list(self._waiting) + list(self._incoming)
                self._incoming.clear()
            for req in pending:
                if req.state != FINISHED:
                    self._finish(req, "cancelled")

    def _gather(self) -> None:
        """An idle scheduler's first request: wait while more keep coming, each within admission_window of
        the one before (at most ADMISSION_WINDOWS windows in all, and no more than n_seq_max requests), so
        that requests sent together share the first step. A server receives them one by one (a burst of 8
        streams reaches the scheduler over ~1-3 ms); starting on the first alone costs a step that prefills
        it alone, then a second for the rest. Called with the lock held; the wait releases it."""
        window = self.admission_window
        if window <= 0.0:
            return
        deadline = time.monotonic() + ADMISSION_WINDOWS * window
        # submit() does not wake this thread for each request meanwhile (each wake-up would take the GIL
        # from the event loop that is handing the rest over), only for the n_seq_max-th
        self._gathering = True
        try:
            while not self._stopping and len(self._incoming) < self.n_seq_max:
                n, left = len(self._incoming), deadline - time.monotonic()
                if left <= 0.0:
                    return
                self._lock.wait(min(window, left))
                if len(self._incoming) == n:     # nobody came within the window
                    return
        finally:
            self._gathering = False

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            pending = list(self._running) + list(self._waiting) + list(self._incoming)
            self._incoming.clear()
        for req in pending:
            if req.state != FINISHED:
                self._finish(req, None, error)

    def _step(self) -> None:
        t0 = time.perf_counter()
        for req in [r for r in list(self._running) + list(self._waiting) if r.handle._cancelled]:
            self._finish(req, "cancelled")
        items, reqs = self._schedule()
        if not items:
            return
        t1 = time.perf_counter()
        try:
            outs = self.pool.step(items)
        except KVPoolExhaustedError:        # the page estimate was short: make room and plan again
            log.debug("pool exhausted by a planned step: preempting")
            self._preempt(self._running[-1])
            # the running ones go on alone for a step: re-admitting the preempted request at once (it
            # forks the same shared pages) would plan the same step again, for ever
            self._admit_next = False
            return
        except OxillamaError as e:
            log.error("a step of %d sequences failed: %s", len(items), e)
            for req in reqs:
                self._finish(req, None, e)
            return
        t2 = time.perf_counter()
        self._record_cost(t2 - t1)
        # the asyncio streams of the step's requests are woken once per loop after every request has its
        # token (a wake-up per token made the server's event loop take the GIL from this thread 8 times a step)
        self._wake_batch = {}
        try:
            for (seq, toks, _), req, logits in zip(items, reqs, outs):
                req.n_cached += len(toks)
                if req.n_cached == self._checkpoint_at(req):
                    self._remember(req)
                if req.n_cached == len(req.known):
                    try:
                        self._advance(req, logits, t2)
                    except Exception as e:     # a logits processor, stopping criterion or grammar raised
                        log.error("request %s failed: %s", req.handle.id, e)
                        self._finish(req, None, e)
        finally:
            wake, self._wake_batch = self._wake_batch, None
            sent = _wake_loops(wake)
            # the next forward starts once the woken loops have sent the step's tokens (after LOOP_WAIT at most;
            # at once if a loop has not started within LOOP_START_WAIT): their work is then done beside nothing
            # but this thread's wait, instead of inside the forward, where it took a core from one of the
            # forward's threads and the other waited for it at every barrier (on 2 cores the server's steps for
            # 8 streams of SmolLM2 took ~2.4 ms more than generate_batch's, 3x the loop's own 0.8 ms of CPU)
            if self._wait_for_loops and sent:
                deadline = time.perf_counter() + LOOP_WAIT
                for started, done in sent:
                    if started.wait(LOOP_START_WAIT):
                        done.wait(max(deadline - time.perf_counter(), 0.0))
            # the sequences of the requests that just ended are freed (and kept in the prompt cache) once
            # their streams have their last tokens
            release, self._release = self._release, []
            for req, remember in release:
                self._release_seq(req, remember)
        t3 = time.perf_counter()
        with self._lock:
            m = self._m
            m["num_steps_total"] += 1
            m["step_time_total"] += t3 - t0
            m["forward_time_total"] += t2 - t1
            m["step_tokens_total"] += sum(len(t) for _, t, _ in items)

    def _schedule(self) -> tuple[list, list[_Request]]:
        """The step's items: decodes first, then prefill chunks within the token budget and free pages.
        Preempts the newest running requests when the decodes need more pages than are free."""
        while True:
            # decoding: all but the token sampled last step are cached
            decodes = [r for r in self._running if r.state == DECODE and r.n_cached == len(r.known) - 1]
            need = sum(self.pool.pages_needed(r.seq, 1) for r in decodes)
            if need <= self.pool.free_pages or not self._running:
                break
            self._preempt(self._running[-1])
        budget = self.max_batch_tokens
        items, reqs = [], []
        for r in decodes[:budget]:
            items.append((r.seq, r.known[r.n_cached:r.n_cached + 1], False))
            reqs.append(r)
        n_dec = len(items)
        budget -= n_dec
        if n_dec:
            budget = min(budget, self._prefill_cap())
        free = self.pool.free_pages - need
        for r in self._running:           # requests already prefilling, oldest first
            if budget <= 0:
                break
            if r in reqs:
                continue
            take = self._chunk(r, budget, free)
            if take:
                free -= self.pool.pages_needed(r.seq, take)
                items.append((r.seq, r.known[r.n_cached:r.n_cached + take], False))
                reqs.append(r)
                budget -= take
        admit, self._admit_next = self._admit_next or not self._running, True
        while admit and self._waiting and budget > 0 and len(self._running) < self.n_seq_max:
            r = self._waiting[0]
            if r.handle._cancelled:
                break               # finished at the next step
            taken = self._admit(r, free)
            if taken is None:
                break
            free -= taken
            take = self._chunk(r, budget, free)
            if not take:
                self._unadmit(r)
                break
            self._waiting.popleft()
            free -= self.pool.pages_needed(r.seq, take)
            items.append((r.seq, r.known[r.n_cached:r.n_cached + take], False))
            reqs.append(r)
            budget -= take
        if not items and self._running:
            # nothing fits: the running sequences hold all pages (prefills that cannot both finish);
            # the newest gives its pages back so the older ones go on
            self._preempt(self._running[-1])
        self._step_shape = (n_dec, sum(len(t) for _, t, _ in items) - n_dec)
        return items, reqs

    def _prefill_cap(self) -> int:
        """Prefill tokens that keep a step with decodes within max_decode_slowdown times a decode-only step
        (at least 1, so a prompt always moves on; unlimited until both costs have been seen)."""
        if self.max_decode_slowdown is None or self._cost_decode is None or self._cost_token is None:
            return self.max_batch_tokens
        room = (self.max_decode_slowdown - 1.0) * self._cost_decode
        return max(1, int(room / max(self._cost_token, 1e-9)))

    def _record_cost(self, seconds: float) -> None:
        """Fold a step's forward time into the running cost estimates."""
        n_dec, n_pre = self._step_shape
        if n_pre == 0:
            if n_dec:
                self._cost_decode = _ema(self._cost_decode, seconds)
            return
        if n_dec == 0:          # prefill alone: its tokens carry the whole step (weights read included)
            share = seconds / n_pre
        elif self._cost_decode is not None:
            share = max(seconds - self._cost_decode, 0.0) / n_pre
        else:
            return
        self._cost_token = _ema(self._cost_token, share)

    def _chunk(self, r: _Request, budget: int, free_pages: int) -> int:
        """Tokens of r to run this step within budget tokens and free_pages pages (0: none now)."""
        end = len(r.known)
        if r.n_cached >= end:
            take = 1 if self.pool.pages_needed(r.seq, 1) <= free_pages else 0
            return min(take, budget)
        remaining = end - r.n_cached
        take = min(remaining, budget)
        if self._checkpoint_at(r) > r.n_cached:   # stop before the prompt's last token (a checkpoint there)
            take = min(take, self._checkpoint_at(r) - r.n_cached)
        # pages: shrink to what fits
        while take and self.pool.pages_needed(r.seq, take) > free_pages:
            fit = take - self.pool.page_size
            take = max(fit, 0) if fit < take else 0
        return max(take, 0)

    def _admit(self, r: _Request, free_pages: int) -> int | None:
        """Give r a sequence, forking the live one that caches the longest prefix of its tokens, then
        copying a longer one from the prompt cache if it has one and free_pages allow it with a page to
        spare for the rest. Returns the pages taken, None when no sequence slot is free."""
        best, shared = None, 0
        for other in self._running:
            if other.lora_key != r.lora_key:   # cached K/V computed with other adapters
                continue
            k = min(_common_prefix(other.known, r.known, other.n_cached), len(r.known) - 1)
            k = self.pool.resumable(other.seq, k)   # a recurrent state: only at the other's end
            if k > shared:
                best, shared = other, k
        try:
            r.seq = self.pool.fork(best.seq, shared) if best is not None else self.pool.add()
        except BatchError:
            return None
        if r.loras:
            self.pool.set_loras(r.seq, r.loras)
        free_before = self.pool.free_pages
        shared = self._restore(r, shared, free_pages)
        r.n_cached = shared
        r.state = PREFILL
        r.admitted_at = next(self._admissions)
        first = r.handle.stats["queue_time"] is None
        if first:
            r.handle.stats["queue_time"] = time.perf_counter() - r.t_submit
            r.handle.stats["n_cached_prompt_tokens"] = min(shared, r.n_prompt)
        with self._lock:
            self._running.append(r)
            if first:
                self._m["prompt_tokens_total"] += r.n_prompt
                self._m["prefix_cache_hits_total"] += min(shared, r.n_prompt)
        return free_before - self.pool.free_pages

    def _restore(self, r: _Request, shared: int, free_pages: int) -> int:
        """Positions of r's sequence cached once the prompt cache has added what it holds beyond the
        `shared` ones (all but the last known token: its logits are needed)."""
        cache = self.prompt_cache
        if cache is None or r.lora_key:     # the cache keys on tokens: rows made with adapters stay out
            return shared
        ids = r.known[:len(r.known) - 1]
        n = cache.match(ids)
        if n > shared and self.pool.pages_needed(r.seq, n - shared + 1) > free_pages:
            return shared                   # no room now: run the prompt rather than wait
        if self.pool.recurrent is not None:  # K/V rows alone cannot resume a recurrent state: a checkpoint
            n, state = cache.restore_state(ids, self.pool.rows(r.seq, ids), start=shared)
            if state is not None:
                self.pool.set_state(r.seq, state)
            return n
        return cache.restore(ids, self.pool.rows(r.seq, ids), start=shared)

    def _checkpoint_at(self, r: _Request) -> int:
        """Recurrent models with a prompt cache: the position before the prompt's last token, where its state
        is kept (a later request with the same prompt resumes there, and runs only its last token); else 0."""
        if self.prompt_cache is None or self.pool.recurrent is None or r.lora_key or r.n_prompt < 2:
            return 0
        return r.n_prompt - 1

    def _remember(self, r: _Request) -> None:
        """Put the K/V of r's cached positions into the prompt cache (r's sequence is still live)."""
        if self.prompt_cache is None or r.lora_key or r.seq is None:
            return
        tokens = self.pool.tokens(r.seq)
        if not tokens:
            return
        # a recurrent model's state after them goes with the rows: a later prompt continuing this
        # conversation resumes there
        state = self.pool.state(r.seq) if self.pool.recurrent is not None else None
        try:
            self.prompt_cache.insert(tokens, self.pool.rows(r.seq, tokens), state=state)
        except OxillamaError as e:      # a cache problem must not fail the request that just finished
            log.warning("could not keep request %s in the prompt cache: %s", r.handle.id, e)

    def _unadmit(self, r: _Request) -> None:
        self.pool.remove(r.seq)
        r.seq, r.n_cached, r.state = None, 0, WAITING
        with self._lock:
            self._running.remove(r)

    def _preempt(self, r: _Request) -> None:
        """Free r's pages; it waits at the head of the queue to be recomputed (its tokens are kept)."""
        log.debug("preempting %s (%d positions cached)", r.handle.id, r.n_cached)
        self.pool.remove(r.seq)
        r.seq, r.n_cached, r.state = None, 0, WAITING
        with self._lock:
            self._running.remove(r)
            self._waiting.appendleft(r)
            self._m["num_preemptions_total"] += 1

    # ---- per request: the step of oxillama.runtime.decode, as InferenceEngine.generate takes it ----

    def _advance(self, r: _Request, logits: np.ndarray, now: float) -> None:
        """r's last known token was run: sample the next one and emit its text; maybe finish."""
        r.state = DECODE
        token, text, finished = r.decoder.advance(logits, r.hist[:len(r.known)])
        stats = r.handle.stats
        if r.t_last is None:
            stats["time_to_first_token"] = now - r.t_submit
        else:
            stats["inter_token_latencies"].append(now - r.t_last)
        r.t_last = now
        r.known.append(token)
        r.hist[len(r.known) - 1] = token
        stats["n_generated_tokens"] = len(r.decoder.tokens)
        with self._lock:
            self._m["generation_tokens_total"] += 1
        if text:
            r.handle._push(text, mark=len(r.decoder.tokens), wake=self._wake_batch)
        if finished:
            # which stop string ended it, if one did (Anthropic's stop_sequence)
            r.handle.stats["stop_string"] = r.decoder.text_out.stops.matched
            self._finish(r, r.decoder.finish_reason)

    def _release_seq(self, r: _Request, remember: bool) -> None:
        """Free a finished request's sequence, its K/V first kept in the prompt cache if remember."""
        if remember:
            self._remember(r)
        self.pool.remove(r.seq)
        r.seq = None

    def _finish(self, r: _Request, reason: str | None, error: BaseException | None = None) -> None:
        """End r: free its sequence, complete its handle (with reason, or with error), tell listeners."""
        if r.state == FINISHED:
            return
        if error is None:
            text = r.decoder.end(reason)    # what the detokenizer and the stop strings held back
            if text:
                r.handle._push(text, mark=len(r.decoder.tokens), wake=self._wake_batch)
        if r.seq is not None:
            if self._wake_batch is not None:
                self._release.append((r, error is None))    # once the step's streams are woken
            else:
                self._release_seq(r, error is None)
        r.state = FINISHED
        with self._lock:
            if r in self._running:
                self._running.remove(r)
            if r in self._waiting:
                self._waiting.remove(r)
            if error is None:
                self._m["request_success_total"][reason] = self._m["request_success_total"].get(reason, 0) + 1
            else:
                self._m["request_failure_total"] += 1
        stats = r.handle.stats
        stats["e2e_latency"] = time.perf_counter() - r.t_submit
        completion = None
        if error is None:
            ttft = stats.get("time_to_first_token") or stats["e2e_latency"]
            n = len(r.decoder.tokens)
            timings = Timings(r.n_prompt - (stats.get("n_cached_prompt_tokens") or 0), ttft * 1e3, n,
                              (stats["e2e_latency"] - ttft) * 1e3, ttft * 1e3)
            completion = r.decoder.completion(Usage(r.n_prompt, n), timings, self.engine.token_text)
        r.handle._push(completion=completion, error=error, wake=self._wake_batch)
        for fn in list(self._listeners):
            try:
                fn(r.handle)
            except Exception:
                log.exception("a scheduler listener raised")


def _set_all(loop, events, started: threading.Event, sent: threading.Event) -> None:
    started.set()
    for event in events:
        event.set()
    # queued after the callbacks those events scheduled (the woken streams' next steps): set once they ran
    loop.call_soon(sent.set)


def _wake_loops(wake: dict) -> list[tuple[threading.Event, threading.Event]]:
    """Set each loop's events with one call_soon_threadsafe per loop (one wake-up of its thread). Returns,
    per loop woken, two events: set once that loop starts on them, and once it has run what they woke."""
    sent = []
    for loop, events in wake.items():
        started, done = threading.Event(), threading.Event()
        try:
            loop.call_soon_threadsafe(_set_all, loop, events, started, done)
        except RuntimeError:    # that loop is closed
            continue
        sent.append((started, done))
    return sent


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1.0 - COST_EMA) * old + COST_EMA * new


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n
