"""`oxillama serve -m MODEL`: an OpenAI-compatible HTTP server with continuous batching."""
from __future__ import annotations

import logging

from oxillama import hub
from oxillama.cli import _options as opt
from oxillama.errors import InvalidArgumentError, OxillamaError


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API", formatter_class=opt.formatter,
                       description="Serve MODEL over HTTP: /v1/chat/completions, /v1/completions, /v1/responses, "
                                   "/v1/messages, /v1/embeddings, /v1/models, /tokenize, /detokenize, /health, "
                                   "/metrics. Requests are batched together (continuous batching); SIGINT/SIGTERM let running requests finish. "
                                   'Needs the server extra: pip install "oxillama[server]". It logs where it '
                                   "listens, the model, and one line per request on stderr (-q: warnings only).")
    p.add_argument("-m", "--model", action="append", default=None,
                   help=f"a GGUF path, a known model name ({', '.join(hub.KNOWN_MODELS)}) or a Hugging Face "
                        "model hf://ORG/REPO[:QUANT]; repeat it to serve several models, which a request picks "
                        "by its \"model\" field (the first is the default and loads at startup, the others on "
                        f"first use); default: {hub.DEFAULT_MODEL}")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="also serve every .gguf file in DIR, each under its file's stem (loaded on first use)")
    p.add_argument("--models-file", default=None, metavar="FILE",
                   help="also serve the models FILE lists, one a line: NAME MODEL [aliases=A,B] [n_ctx=N] "
                        "(MODEL a GGUF path relative to FILE, a known model or hf://ORG/REPO[:QUANT]; "
                        "# comments); loaded on first use")
    p.add_argument("--max-loaded", type=int, default=None, metavar="N",
                   help="with several models: keep at most N loaded, unloading the least recently used idle "
                        "one to load another (default: no limit)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free one)")
    p.add_argument("--parallel", "-np", type=int, default=8, metavar="N",
                   help="sequences generated together in one batch")
    p.add_argument("--n-ctx", "-c", type=int, default=0, metavar="N",
                   help="context size of each sequence (0: the model's, capped)")
    p.add_argument("--threads", "-t", type=int, default=None, metavar="N",
                   help="threads (default: OXILLAMA_NUM_THREADS, else the physical cores)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (not on /health and /metrics)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="accept the keys listed in FILE, one a line, each optionally followed by its limits "
                        "rpm=N (requests a minute) and/or tpm=N (tokens a minute); over a limit: 429 with "
                        "Retry-After; an unknown key: 401 (blank lines and # comments ignored)")
    p.add_argument("--alias", action="append", default=None, metavar="NAME",
                   help="the model id clients see (default: the file's stem); repeated, the i-th names the "
                        "i-th -m")
    p.add_argument("--max-queue", type=int, default=None, metavar="N",
                   help="answer 429 when N requests already wait (default: no limit)")
    p.add_argument("--max-batch-tokens", type=int, default=512, metavar="N",
                   help="tokens run in one batched forward (prompt chunks + decodes)")
    p.add_argument("--max-decode-slowdown", type=float, default=None, metavar="X",
                   help="while requests stream, cut prompt chunks so a step takes at most X times a "
                        "decode-only step (smooth streams; long prompts then wait longer for their first token)")
    p.add_argument("--lora", action="append", default=[], metavar="NAME=PATH",
                   help="serve a LoRA adapter (GGUF) under NAME (repeatable); a request picks it with "
                        '"model": "<model>:NAME" or "lora": [{"name": NAME, "scale": S}]; none applies by default')
    p.add_argument("--max-body-mb", type=int, default=16, metavar="MB",
                   help="refuse request bodies larger than this with 413")
    p.add_argument("--reasoning-format", default="auto", choices=("none", "auto", "deepseek"),
                   help="reasoning models: 'auto' puts thinking the output opens with (<think>...</think> or the "
                        "template's markers) apart from the answer (reasoning_content, reasoning items, thinking "
                        "blocks); 'deepseek' also when the prompt opened it; 'none' leaves it in the answer. "
                        "A request's reasoning_format overrides it")
    p.add_argument("--responses-store", type=int, default=1024, metavar="N",
                   help="/v1/responses kept in memory for GET and previous_response_id: at most N and "
                        "--responses-store-mb MB of JSON; the oldest go first, 0 keeps none")
    p.add_argument("--responses-store-mb", type=int, default=64, metavar="MB", help="see --responses-store")
    p.add_argument("--cache-ram", type=int, default=None, metavar="MiB",
                   help="prompt cache: keep the K/V of finished requests, by token prefix, in up to MiB of RAM "
                        "(least recently used out first), so a request that starts like an earlier one (the "
                        "next turn of a conversation, a shared system prompt) runs only its new tokens; 0 turns "
                        "it off (default: 8192, capped at a quarter of the memory available at start)")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                   help="on SIGINT/SIGTERM, seconds running requests get to finish")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text lines, or one JSON object per line (the access fields as keys) for log collectors")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="log warnings and errors only (no address, model or access lines)")
    ray = p.add_argument_group("scale-out on Ray Serve (needs the ray extra: pip install \"oxillama[ray]\")")
    ray.add_argument("--replicas", type=int, default=None, metavar="N",
                     help="serve with N replicas behind Ray Serve's HTTP proxy, each its own engine")
    ray.add_argument("--ray-address", default=None, metavar="ADDR",
                     help="join this Ray cluster ('auto', 'ray://HOST:10001', 'HOST:6379'); default: start a "
                          "local Ray instance")
    ray.add_argument("--threads-per-replica", type=int, default=None, metavar="T",
                     help="threads (and Ray CPUs) of each replica (default: --threads, else 1)")
    ray.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                     help="let Ray scale between MIN and MAX replicas, aiming at --parallel ongoing requests "
                          "per replica (instead of --replicas)")
    p.set_defaults(func=run)


def run(args) -> int:
    for name in ("parallel", "max_batch_tokens"):
        if getattr(args, name) < 1:
            raise InvalidArgumentError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_queue is not None and args.max_queue < 0:
        raise InvalidArgumentError(f"--max-queue must be >= 0, got {args.max_queue}")
    if args.max_decode_slowdown is not None and not 1.0 < args.max_decode_slowdown < float("inf"):
        raise InvalidArgumentError(f"--max-decode-slowdown must be > 1, got {args.max_decode_slowdown}")
    if args.responses_store < 0 or args.responses_store_mb < 0:
        raise InvalidArgumentError("--responses-store and --responses-store-mb must be >= 0")
    if args.cache_ram is not None and args.cache_ram < 0:
        raise InvalidArgumentError(f"--cache-ram must be >= 0 (MiB; 0 turns the prompt cache off), "
                                   f"got {args.cache_ram}")
    if args.max_loaded is not None and args.max_loaded < 1:
        raise InvalidArgumentError(f"--max-loaded must be >= 1, got {args.max_loaded}")
    if args.max_body_mb < 1:
        raise InvalidArgumentError(f"--max-body-mb must be >= 1, got {args.max_body_mb}")
    if not 0 <= args.port <= 65535:
        raise InvalidArgumentError(f"--port must be in 0..65535, got {args.port}")
    try:
        from oxillama.server import ServerConfig, serve
        from oxillama.server.logs import use_json_format
    except ModuleNotFoundError as e:
        raise InvalidArgumentError(f'`oxillama serve` needs the server extra ({e.name} is missing): '
                                   'pip install "oxillama[server]"') from None
    if args.log_format == "json":
        use_json_format()
    if not args.quiet and args.verbose == 0:
        # the address, the model, draining and one line per request, at INFO; the rest stays at -v's level
        logging.getLogger("oxillama.server").setLevel(logging.INFO)
    scale = _scale_out(args)
    api_keys = None
    if args.api_key_file is not None:
        from oxillama.server.api_keys import parse_key_file
        api_keys = parse_key_file(args.api_key_file)
    if scale is not None:
        try:
            from oxillama.server.ray_serve import serve_replicated
        except ModuleNotFoundError as e:
            raise InvalidArgumentError(f'`oxillama serve --replicas` needs the ray extra ({e.name} is missing): '
                                       'pip install "oxillama[ray]"') from None
    specs = _model_specs(args)
    if scale is not None and len(specs) > 1:
        raise InvalidArgumentError("--replicas/--autoscale serve one model: give -m once")
    model = specs[0].path
    config = ServerConfig(model=model, host=args.host, port=args.port, parallel=args.parallel, n_ctx=args.n_ctx,
                          threads=args.threads, api_key=args.api_key, api_keys=api_keys,
                          alias=specs[0].name, models=specs if len(specs) > 1 or args.models_file else (),
                          max_loaded=args.max_loaded,
                          max_queue=args.max_queue, max_batch_tokens=args.max_batch_tokens,
                          max_decode_slowdown=args.max_decode_slowdown,
                          drain_timeout=args.drain_timeout, loras=_lora_options(args.lora),
                          max_body_mb=args.max_body_mb, reasoning_format=args.reasoning_format,
                          responses_store=args.responses_store, responses_store_mb=args.responses_store_mb,
                          cache_ram_mb=args.cache_ram)
    if scale is not None:
        return serve_replicated(config, scale)
    return serve(config)


def _model_specs(args) -> tuple:
    """ModelSpec of every -m (known models fetched now, before the port opens), --models-file line and
    --models-dir file; names from --alias (in order), else each file's stem; names and aliases unique."""
    import os
    from pathlib import Path

    from oxillama.server.model_slots import ModelSpec
    models = list(args.model or [])
    aliases = list(args.alias or [])
    if len(aliases) > max(len(models), 1):
        raise InvalidArgumentError(f"{len(aliases)} --alias for {len(models)} -m: the i-th --alias names the i-th -m")
    if not models and args.models_dir is None and args.models_file is None:
        models = [None]
    specs, seen = [], set()
    for i, model in enumerate(models):
        path = str(hub.resolve_model(model))
        name = aliases[i] if i < len(aliases) else (_default_alias(model) or _stem(path))
        specs.append(ModelSpec(name, path))
    if args.models_file is not None:
        from oxillama.server.model_slots import parse_models_file
        for name, model, aliases, n_ctx in parse_models_file(args.models_file):
            try:
                path = hub.resolve_model(model)
            except OxillamaError as e:
                raise type(e)(f"--models-file {args.models_file}, model {name!r}: {e}") from None
            specs.append(ModelSpec(name, str(path), aliases, n_ctx))
    if args.models_dir is not None:
        if not os.path.isdir(args.models_dir):
            raise InvalidArgumentError(f"--models-dir {args.models_dir!r} is not a directory")
        found = sorted(Path(args.models_dir).glob("*.gguf"))
        if not found and not specs:
            raise InvalidArgumentError(f"--models-dir {args.models_dir!r} holds no .gguf file")
        for path in found:
            if str(path.resolve()) not in {str(Path(s.path).resolve()) for s in specs}:
                specs.append(ModelSpec(path.stem, str(path)))
    for spec in specs:
        for name in (spec.name, *spec.aliases):
            if name in seen:
                raise InvalidArgumentError(f"two models are served as {name!r}: give each its own --alias")
            seen.add(name)
    return tuple(specs)


def _stem(path: str) -> str:
    from pathlib import Path
    return Path(path).stem if path.endswith(".gguf") else path


def _lora_options(values: list[str]) -> tuple:
    """--lora NAME=PATH ... -> ((name, absolute path), ...); names unique, files present."""
    import os
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path or ":" in name:
            raise InvalidArgumentError(f"--lora takes NAME=PATH (a name without ':'), got {value!r}")
        if name in out:
            raise InvalidArgumentError(f"--lora: the name {name!r} is given twice")
        if not os.path.isfile(path):
            raise InvalidArgumentError(f"--lora {value}: no such file {path!r}")
        out[name] = os.path.abspath(path)
    return tuple(out.items())


def _scale_out(args):
    """The Ray Serve settings when any scale-out flag is given (checked before anything loads), else None."""
    from oxillama.server.state import ScaleOut, parse_autoscale
    if args.replicas is None and args.autoscale is None:
        for flag in ("ray_address", "threads_per_replica"):
            if getattr(args, flag) is not None:
                raise InvalidArgumentError(f"--{flag.replace('_', '-')} needs --replicas N or --autoscale MIN:MAX")
        return None
    if args.replicas is not None and args.autoscale is not None:
        raise InvalidArgumentError("give --replicas or --autoscale, not both")
    if args.replicas is not None and args.replicas < 1:
        raise InvalidArgumentError(f"--replicas must be >= 1, got {args.replicas}")
    threads = args.threads_per_replica if args.threads_per_replica is not None else (args.threads or 1)
    if threads < 1:
        raise InvalidArgumentError(f"--threads-per-replica must be >= 1, got {threads}")
    autoscale = parse_autoscale(args.autoscale) if args.autoscale is not None else None
    return ScaleOut(args.replicas or 1, args.ray_address, threads, autoscale)


def _default_alias(model: str | None) -> str | None:
    """A known model's name, or a Hugging Face model's ORG/REPO[:QUANT], is what clients see (not its cache
    file's name)."""
    if model is None:
        return hub.DEFAULT_MODEL
    if hub.is_hf(model):
        return model[len(hub.HF_PREFIX):]
    return model if model in hub.KNOWN_MODELS else None
