"""Options `run` and `chat` share: the model and engine, sampling, structured output, timings."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from oxillama import hub
from oxillama.errors import InvalidArgumentError

log = logging.getLogger("oxillama.cli")


class _DefaultsFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to an option's help unless the help already says it or there is none."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


def formatter(prog: str) -> argparse.HelpFormatter:
    return _DefaultsFormatter(prog, max_help_position=32)


def max_tokens_arg(text: str) -> int:
    """-n: N > 0 tokens at most, or -1 for as many as the context holds; 0 and others are refused."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n == 0 or n < -1:
        raise argparse.ArgumentTypeError(f"{n}: give N > 0 tokens, or -1 to generate until the end of "
                                         "the answer or a full context")
    return n


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default=None, metavar="MODEL",
                   help=f"a GGUF path, a known model name ({', '.join(hub.KNOWN_MODELS)}) or a Hugging Face "
                        "model hf://ORG/REPO[:QUANT]; "
                        f"default: {hub.DEFAULT_MODEL}")
    p.add_argument("-c", "--ctx-size", type=int, default=0, metavar="N",
                   help="context size in tokens (0: the model's trained context, capped at 4096)")
    p.add_argument("-t", "--threads", type=positive_int, default=None, metavar="N",
                   help="threads (default: OXILLAMA_NUM_THREADS, else the physical cores); more than the "
                        "logical CPUs are lowered to them")
    p.add_argument("--threads-oversubscribe", action="store_true",
                   help="run -t threads even when they are more than the logical CPUs")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: a random one)")
    p.add_argument("--no-repack", action="store_true", help="keep the weights in the file's layout only: no repacked copy for the faster kernels (saves its RAM; the output is the same)")


def add_sampling_options(p: argparse.ArgumentParser, max_tokens: int) -> None:
    p.add_argument("-n", "--max-tokens", type=max_tokens_arg, default=max_tokens, metavar="N",
                   help="tokens to generate at most; -1: until the end of the answer or a full context "
                        "(0 and other negatives are refused)")
    p.add_argument("--temp", type=float, default=0.8, help="temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=40, help="keep the K most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling threshold (1.0: off)")
    p.add_argument("--min-p", type=float, default=0.05, help="drop tokens below P x the top probability (0: off)")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="penalty on repeated tokens (1.0: off)")
    p.add_argument("--timings", action="store_true",
                   help="print load time, prompt and generation tokens/s and time to first token on stderr "
                        "after the run (also with -v)")


def engine_from_args(args):
    from oxillama._system import OVERSUBSCRIBE_ENV
    from oxillama.runtime import InferenceEngine
    if args.threads_oversubscribe:
        os.environ[OVERSUBSCRIBE_ENV] = "1"
    path = hub.resolve_model(args.model)
    return InferenceEngine.from_gguf(path, n_ctx=args.ctx_size, n_threads=args.threads, seed=args.seed,
                                     repack=not args.no_repack)


def sampling_kwargs(args) -> dict:
    # max_tokens=-1: until the end of the answer or a full context (llama-cpp-python's meaning)
    return dict(max_tokens=args.max_tokens, temperature=args.temp,
                top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, repeat_penalty=args.repeat_penalty)


def show_timings(args) -> bool:
    return args.timings or args.verbose >= 1


def print_timings(engine, completion, load: bool = True) -> None:
    """llama.cpp's end-of-run figures, on stderr (stdout holds the answer)."""
    if completion is None or completion.timings is None:
        return
    sys.stderr.write(completion.timings.report(engine.load_ms if load else None) + "\n")
    sys.stderr.flush()


def read_text_file(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or e}") from e


def json_schema_arg(value: str) -> dict:
    """--json-schema: a file holding a JSON schema, or the schema itself as JSON text."""
    text = value
    if not value.lstrip().startswith(("{", "[")) or os.path.exists(value):
        text = read_text_file(value, "JSON schema file")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"--json-schema {value!r} is not valid JSON: {e}") from e
    if not isinstance(schema, dict):
        raise InvalidArgumentError(f"--json-schema must be a JSON object, got {type(schema).__name__}")
    return schema


def warn_if_no_chat_template(engine) -> None:
    """Chat on a model whose GGUF file has no template: the format is a guess (often a base model)."""
    if engine.tokenizer.chat_template is None:
        log.warning("this model's GGUF file has no chat template, so it is probably a base model, not a chat "
                    "model: guessing a chat format from its special tokens (pass --chat-template FILE to "
                    "choose one); expect poor answers")


class StopOnInterrupt:
    """While an answer streams (`run`, `chat`), Ctrl-C sets .hit (checked between pieces) instead of
    raising, so the engine is never interrupted half-way through a step. Outside the main thread it does
    nothing."""

    def __init__(self):
        self.hit = False
        self._old = None

    def _handler(self, signum, frame):
        self.hit = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def stream_answer(engine, prompt, out, **generate_kwargs) -> bool:
    """Writes engine.generate(prompt)'s pieces to `out` as they come, then a newline; Ctrl-C stops the answer
    between two pieces (the engine is never cut mid-step: what came so far is engine.last_completion, with
    its timings). Returns whether Ctrl-C stopped it."""
    with StopOnInterrupt() as interrupt:     # from the prompt's prefill on
        pieces = engine.generate(prompt, stream=True, **generate_kwargs)
        try:
            for piece in () if interrupt.hit else pieces:
                out.write(piece)
                out.flush()
                if interrupt.hit:
                    break
        finally:
            pieces.close()
    out.write("\n")
    out.flush()
    return interrupt.hit
