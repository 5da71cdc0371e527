"""`oxillama run [-m MODEL] [--chat] PROMPT`: stream a completion to stdout."""
from __future__ import annotations

import sys

from oxillama import hub
from oxillama.errors import InvalidArgumentError


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="generate text from a prompt",
                       description="Stream a completion of PROMPT. Without -m, the default model "
                                   f"({hub.DEFAULT_MODEL}) is fetched once into the cache.")
    p.add_argument("prompt", help="the prompt text, or - to read it from stdin")
    p.add_argument("-m", "--model", default=None,
                   help=f"a GGUF path or a known model name ({', '.join(hub.KNOWN_MODELS)})")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--system", default=None, help="system message for --chat")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template file, for models whose GGUF has none (implies --chat)")
    p.add_argument("-n", "--max-tokens", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.8, help="temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("-c", "--ctx-size", type=int, default=0, help="context size (0: the model's, capped)")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from oxillama.runtime import InferenceEngine

    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    path = hub.resolve_model(args.model)
    with InferenceEngine.from_gguf(path, n_ctx=args.ctx_size, n_threads=args.threads, seed=args.seed) as engine:
        if args.chat or args.chat_template:
            messages = [{"role": "system", "content": args.system}] if args.system else []
            messages.append({"role": "user", "content": prompt})
            template = None
            if args.chat_template:
                try:
                    with open(args.chat_template, encoding="utf-8") as f:
                        template = f.read()
                except OSError as e:
                    raise InvalidArgumentError(f"cannot read chat template {args.chat_template}: {e.strerror}") from e
            prompt = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, chat_template=template)
        pieces = engine.generate(prompt, max_tokens=args.max_tokens, temperature=args.temp, top_k=args.top_k,
                                 top_p=args.top_p, min_p=args.min_p, repeat_penalty=args.repeat_penalty,
                                 stream=True)
        for piece in pieces:
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
    return 0
