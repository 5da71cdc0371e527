"""One road for every chat-shaped API family: /v1/chat/completions, /v1/responses and /v1/messages
each translate their body into a `ChatCompletionRequest`, and `prepare` turns that into the prompt
(the chat template with tools), the tool-call plan and the scheduler's keywords. A seeded request
therefore samples the same tokens whichever family it came through.

`OutputEvents` is the streamed side of the same: text pieces in, a family-neutral sequence of
("reasoning" | "text", delta) and ("call", ToolCall) events out, which each family's stream writer
renders in its own event vocabulary; joined, they equal what `finished_output` reads from the
whole text."""
from __future__ import annotations

import json
import weakref

from oxillama.openai import chat as openai_chat
from oxillama.errors import InvalidArgumentError
from oxillama.server import convert
from oxillama.server.protocol.chat import ChatCompletionRequest, NamedToolChoice
from oxillama.server.state import ServerState
from oxillama.tools.base import ToolCall
from oxillama.tools.reasoning import (check_format, grammar_after_thinking, markers_of, opens_thinking,
                                      reasoning_splitter, split_reasoning)


def chat_plan(state: ServerState, req: ChatCompletionRequest) -> openai_chat.ChatPlan:
    """The prompt, the grammar forcing a call (tool_choice "required" or named) and how to read calls."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice.model_dump() if isinstance(req.tool_choice, NamedToolChoice) else req.tool_choice
    return openai_chat.chat_plan(state.engine.tokenizer, [m.to_dict() for m in req.messages], tools, choice,
                            parallel_tool_calls=req.parallel_tool_calls is True)


def prepare(state: ServerState, req: ChatCompletionRequest) -> tuple[openai_chat.ChatPlan, dict, dict]:
    """(plan, Scheduler.submit keywords without the seed, reasoning options) of a chat request; bad
    input raises here, before anything is queued. A grammar (the request's, its response_format's or
    a forced tool call's) constrains the answer: with thinking split off, the model may think first."""
    plan = chat_plan(state, req)
    kwargs = convert.generate_kwargs(req, state.engine.n_vocab, state.engine.tokenizer.eog_ids)
    loras = convert.request_loras(req, state)
    if loras:
        kwargs["lora"] = loras
    if plan.grammar is not None:
        if "grammar" in kwargs:
            raise InvalidArgumentError(f"tool_choice {req.tool_choice!r} constrains the output itself; it cannot "
                                       "be combined with grammar or response_format")
        kwargs["grammar"] = plan.grammar
    reasoning = reasoning_options(state, plan, req.reasoning_format)
    if "grammar" in kwargs and reasoning["thinks"] and reasoning["fmt"] != "none":
        kwargs["grammar"] = grammar_after_thinking(kwargs["grammar"], reasoning["markers"], reasoning["opened"])
    reasoning.pop("thinks")
    return plan, kwargs, reasoning


def reasoning_options(state: ServerState, plan: openai_chat.ChatPlan, fmt: str | None) -> dict:
    """How to tell thinking from the answer for this request: the format (the request's, else the
    server's --reasoning-format), the template's markers, whether the prompt opened the thinking, and
    whether the template thinks at all (it names a thinking marker)."""
    fmt = check_format(fmt if fmt is not None else getattr(state.config, "reasoning_format", None))
    markers, thinks = _template_thinking(state.engine.tokenizer)
    return {"fmt": fmt, "markers": markers, "opened": opens_thinking(plan.prompt, markers), "thinks": thinks}


def _template_thinking(tokenizer) -> tuple[tuple[str, str], bool]:
    """(thinking markers, whether the chat template writes them) of a model, read once."""
    found = _THINKING.get(tokenizer)
    if found is None:
        source = openai_chat._template_source(tokenizer, None) or ""
        markers = markers_of(source)
        found = _THINKING[tokenizer] = (markers, markers[1] in source)
    return found


_THINKING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def finished_output(plan: openai_chat.ChatPlan, text: str, reasoning: dict | None = None
                    ) -> tuple[str | None, str | None, list[ToolCall]]:
    """(reasoning, content, calls) of a finished output (reasoning: reasoning_options())."""
    thinking, answer = split_reasoning(text, **(reasoning or {}))
    content, calls = plan.parse(answer)
    return thinking, content, calls


class OutputEvents:
    """Streamed output as ("reasoning", text), ("text", text) and ("call", ToolCall) events."""

    def __init__(self, plan: openai_chat.ChatPlan, reasoning: dict | None = None):
        self._reasoning = reasoning_splitter(**(reasoning or {}))
        self._deltas = plan.streamer()
        self._calls: list[ToolCall] = []
        self._plan = plan

    def feed(self, piece: str) -> list[tuple[str, object]]:
        out = []
        for kind, text in self._reasoning.feed(piece):
            if kind == "reasoning":
                out.append(("reasoning", text))
            else:
                out += self._answer(self._deltas.feed(text))
        return out

    def finish(self) -> list[tuple[str, object]]:
        out = []
        for kind, text in self._reasoning.finish():
            if kind == "reasoning":
                out.append(("reasoning", text))
            else:
                out += self._answer(self._deltas.feed(text))
        return out + self._answer(self._deltas.finish())

    def _answer(self, deltas: list[dict]) -> list[tuple[str, object]]:
        out = []
        for delta in deltas:
            if delta.get("content"):
                out.append(("text", delta["content"]))
            for call in delta.get("tool_calls") or ():
                fn = call["function"]
                out.append(("call", ToolCall(fn["name"], json.loads(fn["arguments"]), call["id"])))
        return out


class ChatStreamDeltas:
    """plan.streamer() with the thinking split off: chat delta dicts, {"reasoning_content": ...} for
    the thinking (llama.cpp's and DeepSeek's field), then the answer's content and tool-call deltas."""

    def __init__(self, plan: openai_chat.ChatPlan, reasoning: dict | None = None):
        self._reasoning = reasoning_splitter(**(reasoning or {}))
        self._deltas = plan.streamer()

    @property
    def n_calls(self) -> int:
        return self._deltas.n_calls

    def feed(self, piece: str) -> list[dict]:
        return self._split(self._reasoning.feed(piece))

    def finish(self) -> list[dict]:
        return self._split(self._reasoning.finish()) + self._deltas.finish()

    def _split(self, parts) -> list[dict]:
        out = []
        for kind, text in parts:
            out += [{"reasoning_content": text}] if kind == "reasoning" else self._deltas.feed(text)
        return out

