"""`oxillama run [-m MODEL] [--raw] PROMPT`: stream an answer to stdout. A model with a chat template
is chatted with (the prompt is a user message), as ollama does; --raw completes the text as it is."""
from __future__ import annotations

import sys

from oxillama import hub
from oxillama.cli import _options as opt
from oxillama.errors import InvalidArgumentError


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="answer a prompt (a chat with a chat model; --raw: plain completion)",
                       formatter_class=opt.formatter,
                       description="Stream the answer to PROMPT to stdout: with a model that has a chat "
                                   "template, PROMPT is a user message in a chat (as `ollama run`); --raw, or a "
                                   "model without one, completes PROMPT as plain text. Without -m, the default "
                                   f"model ({hub.DEFAULT_MODEL}) is fetched once into the cache. Diagnostics, "
                                   "download progress and --timings go to stderr; Ctrl-C stops the answer.")
    p.add_argument("prompt", help="the prompt text, or - to read it from stdin")
    opt.add_model_options(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--chat", action="store_true", default=None,
                      help="wrap the prompt in a chat template even when the model's GGUF has none (a guessed "
                           "format); by default a model with a chat template is chatted with, others complete "
                           "the text")
    mode.add_argument("--raw", "--no-chat", dest="chat", action="store_false",
                      help="complete the prompt as plain text, without the chat template")
    p.add_argument("--system", default=None, metavar="TEXT", help="system message (a chat; not with --raw)")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template file, for models whose GGUF has none (implies --chat)")
    opt.add_sampling_options(p, max_tokens=256)
    structured = p.add_mutually_exclusive_group()
    structured.add_argument("--grammar-file", default=None, metavar="FILE",
                            help="constrain the output to a GBNF grammar (llama.cpp's format)")
    structured.add_argument("--json-schema", default=None, metavar="FILE_OR_JSON",
                            help="constrain the output to JSON matching a schema (a file, or the schema itself)")
    p.set_defaults(func=run)


def run(args) -> int:
    from oxillama.grammar import Grammar

    if args.chat is False and (args.system is not None or args.chat_template is not None):
        raise InvalidArgumentError("--system and --chat-template are for a chat: leave out --raw")
    template = opt.read_text_file(args.chat_template, "chat template") if args.chat_template else None
    grammar = None
    if args.grammar_file:
        grammar = Grammar.from_file(args.grammar_file)
    elif args.json_schema:
        grammar = Grammar.from_json_schema(opt.json_schema_arg(args.json_schema))
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    with opt.engine_from_args(args) as engine:
        chat = args.chat
        if chat is None:    # the default: chat when the model has a template (or one is given), or a system
            chat = (template is not None or args.system is not None
                    or engine.tokenizer.chat_template is not None)
        if chat:
            if template is None:
                opt.warn_if_no_chat_template(engine)
            messages = [{"role": "system", "content": args.system}] if args.system else []
            messages.append({"role": "user", "content": prompt})
            prompt = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, chat_template=template)
        # after Ctrl-C, what was generated so far is a Completion whose timings --timings still prints; exit 130
        stopped = opt.stream_answer(engine, prompt, sys.stdout, grammar=grammar, **opt.sampling_kwargs(args))
        if opt.show_timings(args):
            opt.print_timings(engine, engine.last_completion)
    return 130 if stopped else 0
