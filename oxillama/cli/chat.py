"""`oxillama chat [-m MODEL] [--system TEXT]`: an interactive multi-turn chat, as `ollama run` and
`llama-cli -cnv` give.

Each turn renders the whole conversation with the model's chat template; the engine keeps the cached
prefix it shares with the previous turn, so only the new messages are run through the model. Answers
stream to stdout; notices and errors go to stderr. Ctrl-C stops the current answer (what was said so
far stays in the conversation) and keeps the session; Ctrl-D (or /bye) quits. Commands: /reset,
/save FILE, /load FILE, /help, /bye. With readline, lines can be edited and recalled, also from
earlier sessions (the history lives next to the model cache).
"""
from __future__ import annotations

import json
import logging
import os
import sys

from oxillama import hub
from oxillama.cli import _options as opt
from oxillama.errors import InvalidArgumentError, OxillamaError

log = logging.getLogger("oxillama.cli")

PROMPT = ">>> "
HELP = """commands:
  /reset        forget the conversation (the system message stays)
  /save FILE    write the conversation to FILE (JSON)
  /load FILE    continue a conversation saved with /save
  /help         this list
  /bye          quit (as Ctrl-D does)
Ctrl-C stops an answer and keeps the session."""
_HISTORY_LENGTH = 1000


def add_parser(sub) -> None:
    p = sub.add_parser("chat", help="talk with a model, turn by turn", formatter_class=opt.formatter,
                       description="An interactive multi-turn chat that streams each answer. Ctrl-C stops "
                                   "the current answer and keeps the session, Ctrl-D quits; /help lists "
                                   "the commands (/reset, /save FILE, /load FILE, /bye).")
    opt.add_model_options(p)
    p.add_argument("--system", default=None, metavar="TEXT", help="system message that starts the conversation")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template file, for models whose GGUF has none")
    opt.add_sampling_options(p, max_tokens=1024)
    p.set_defaults(func=run)


def run(args) -> int:
    template = opt.read_text_file(args.chat_template, "chat template") if args.chat_template else None
    with opt.engine_from_args(args) as engine:
        if template is None:
            opt.warn_if_no_chat_template(engine)
        session = ChatSession(engine, args.system, template, opt.sampling_kwargs(args), opt.show_timings(args))
        if session.timings:
            sys.stderr.write(f"load time = {engine.load_ms:.2f} ms\n")
        return session.repl()


class ChatSession:
    """A conversation with one engine: messages in, streamed answers out."""

    def __init__(self, engine, system: str | None, template: str | None, gen_kwargs: dict, timings: bool = False,
                 out=None, err=None):
        self.engine = engine
        self.system = system
        self.template = template
        self.gen_kwargs = gen_kwargs
        self.timings = timings
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.messages: list[dict] = []
        self.reset()

    # -- conversation --------------------------------------------------------------------------

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def answer(self, text: str) -> str:
        """Add a user message, stream the answer to out and add it; Ctrl-C ends it early."""
        engine = self.engine
        messages = self.messages + [{"role": "user", "content": text}]
        prompt = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                      chat_template=self.template)
        n_prompt = len(engine.tokenize(prompt, add_special=True, parse_special=True))
        room = engine.n_ctx - n_prompt
        if room < 1:
            raise InvalidArgumentError(f"the conversation has {n_prompt} tokens, as many as the context holds "
                                       f"(n_ctx={engine.n_ctx}): /reset, or start again with a larger -c")
        kwargs = dict(self.gen_kwargs)
        n = kwargs.get("max_tokens", -1)
        kwargs["max_tokens"] = room if n is None or n <= 0 else min(n, room)
        stopped = opt.stream_answer(engine, prompt, self.out, **kwargs)
        reply = str(engine.last_completion or "")
        self.messages = messages + [{"role": "assistant", "content": reply}]
        if stopped:
            self.err.write("(stopped)\n")
        if self.timings:
            opt.print_timings(engine, engine.last_completion, load=False)
        return reply

    def save(self, path: str) -> None:
        try:
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"messages": self.messages}, f, ensure_ascii=False, indent=1)
                f.write("\n")
        except OSError as e:
            raise InvalidArgumentError(f"cannot write {path}: {e.strerror or e}") from e

    def load(self, path: str) -> None:
        data = opt.read_text_file(path, "conversation")
        try:
            messages = json.loads(data)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"{path} is not a saved conversation (not JSON: {e})") from e
        if isinstance(messages, dict):
            messages = messages.get("messages")
        if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise InvalidArgumentError(f"{path} is not a saved conversation: expected a list of "
                                       "{\"role\": ..., \"content\": ...} messages")
        self.messages = [{"role": m["role"], "content": m["content"]} for m in messages]

    # -- the loop ------------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run a /command; False when the session should end."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/bye", "/exit", "/quit"):
            return False
        if name == "/reset":
            self.reset()
            self.err.write("(conversation reset)\n")
        elif name in ("/save", "/load"):
            if not arg:
                raise InvalidArgumentError(f"{name} needs a file name: {name} FILE")
            path = os.path.expanduser(arg)
            if name == "/save":
                self.save(path)
                self.err.write(f"(saved {len(self.messages)} messages to {path})\n")
            else:
                self.load(path)
                self.err.write(f"(loaded {len(self.messages)} messages from {path})\n")
        elif name in ("/help", "/?"):
            self.err.write(HELP + "\n")
        else:
            self.err.write(f"unknown command {name}; /help lists them\n")
        return True

    def repl(self, stdin=None) -> int:
        stdin = stdin or sys.stdin
        interactive = stdin.isatty()
        history = _readline_history() if interactive else None
        try:
            while True:
                try:
                    line = input(PROMPT) if interactive else _read_line(stdin)
                except KeyboardInterrupt:
                    self.err.write("\n(Ctrl-D or /bye to quit)\n")
                    continue
                except EOFError:
                    if interactive:
                        self.out.write("\n")
                    return 0
                line = line.strip()
                if not line:
                    continue
                try:
                    if line.startswith("/"):
                        if not self.command(line):
                            return 0
                    else:
                        self.answer(line)
                except OxillamaError as e:
                    self.err.write(f"oxillama: error: {e}\n")
                finally:
                    self.err.flush()
        finally:
            if history is not None:
                history()


def _read_line(stdin) -> str:
    line = stdin.readline()
    if not line:
        raise EOFError
    return line


def _readline_history():
    """Turn on readline editing with a history file next to the model cache; returns the function
    that saves it, or None without readline."""
    try:
        import readline
    except ImportError:     # Windows without pyreadline
        return None
    path = hub.cache_dir().parent / "chat_history"
    try:
        readline.read_history_file(path)
    except (OSError, ValueError):   # none yet, or unreadable
        pass
    readline.set_history_length(_HISTORY_LENGTH)

    def save():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError as e:
            log.info("chat history not saved to %s: %s", path, e)
    return save
