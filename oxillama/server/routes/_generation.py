"""What /v1/completions and /v1/chat/completions share: submitting n requests to the scheduler,
awaiting them while watching for the client going away, and merging their streams."""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

from fastapi import Request

from oxillama.errors import OxillamaError
from oxillama.server.protocol.common import UsageInfo

log = logging.getLogger("oxillama")


def submit_all(scheduler, prompts: list, n: int, seed: int | None, kwargs: dict) -> list:
    """Submit every (prompt, choice) pair: choice j of prompt i is handle i * n + j. If one submission
    fails (bad argument, full queue), the ones made are cancelled and the error propagates."""
    from oxillama.server.convert import choice_seed
    handles = []
    try:
        for prompt in prompts:
            for j in range(n):
                handles.append(scheduler.submit(prompt, seed=choice_seed(seed, j), **kwargs))
    except BaseException:
        for h in handles:
            h.cancel()
        raise
    return handles


async def _wait_disconnect(request: Request) -> None:
    """Returns when the client has gone away (the request body is already read, so the next ASGI
    message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def results_or_cancel(request: Request, handles: list) -> list | None:
    """The handles' Completions; None if the client disconnected first. Whenever this does not return
    every result (disconnect, an error in one of them), the unfinished handles are cancelled, which
    frees their slots at the scheduler's next step."""
    gathered = asyncio.ensure_future(asyncio.gather(*(h.aresult() for h in handles)))
    gone = asyncio.ensure_future(_wait_disconnect(request))
    ok = False
    try:
        await asyncio.wait({gathered, gone}, return_when=asyncio.FIRST_COMPLETED)
        if gathered.done():
            results = gathered.result()       # raises the first request's error, if any
            ok = True
            return results
        log.info("client disconnected: cancelling %s", ", ".join(h.id for h in handles))
        return None
    finally:
        gone.cancel()
        if not ok:
            gathered.cancel()
            for h in handles:
                if not h.done:
                    h.cancel()


async def merged_stream(handles: list) -> AsyncIterator[tuple[int, str | None, object]]:
    """(index, piece, None) for each text piece of any handle as it comes, then (index, None,
    Completion) once that handle is done. Cancelling the consumer cancels every unfinished handle."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, h) -> None:
        try:
            async for piece in h.astream():
                await queue.put((i, piece, None))
            await queue.put((i, None, await h.aresult()))
        except BaseException as e:      # handed to the consumer, which re-raises it
            await queue.put((i, None, e))

    tasks = [asyncio.ensure_future(pump(i, h)) for i, h in enumerate(handles)]
    remaining = len(handles)
    try:
        while remaining:
            i, piece, final = await queue.get()
            if isinstance(final, BaseException):
                raise final
            if final is not None:
                remaining -= 1
            yield i, piece, final
    finally:
        for t in tasks:
            t.cancel()
        for h in handles:
            if not h.done:
                h.cancel()


def error_event(exc: BaseException):
    """The SSE event that ends a stream whose request failed after the headers were sent (the openai
    client raises an APIError on an event with an "error" member)."""
    from sse_starlette import ServerSentEvent

    from oxillama.server.errors import classify, error_body
    status, kind = classify(exc)
    if status >= 500:
        log.error("a streamed request failed: %s: %s", type(exc).__name__, exc)
    message = str(exc) if isinstance(exc, OxillamaError) else f"internal error ({type(exc).__name__})"
    return ServerSentEvent(data=json.dumps(error_body(status, message, kind)))


def prompt_usage(handles: list, n: int) -> tuple[int, int]:
    """(prompt tokens, of which served from cached prefixes), counting each prompt once (as OpenAI
    does for n > 1)."""
    prompt = cached = 0
    for h in handles[::n]:
        s = h.stats
        prompt += int(s.get("n_prompt_tokens") or 0)
        cached += int(s.get("n_cached_prompt_tokens") or 0)
    return prompt, cached


def usage_info(handles: list, n: int, completions, eog_ids) -> UsageInfo:
    """The response's exact usage: each prompt once, every completion's generated tokens (without the
    end-of-generation token that ended one, as llama.cpp and `oxillama.Llama` count)."""
    from oxillama.compat.openai_shapes import generated_token_count
    prompt, cached = prompt_usage(handles, n)
    generated = sum(generated_token_count(c.tokens, eog_ids) for c in completions)
    return UsageInfo(prompt_tokens=prompt, completion_tokens=generated, total_tokens=prompt + generated,
                     prompt_tokens_details={"cached_tokens": cached})
