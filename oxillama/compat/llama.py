"""`oxillama.Llama`: llama-cpp-python's `llama_cpp.Llama` over an InferenceEngine.

Same constructor keywords, methods and return dicts (llama-cpp-python's `llama_types` shapes, with
plain Python floats), so code written for llama_cpp runs after changing one import. It is a thin
layer: generation, tokenization, embeddings and state are the engine's; the request translation, the
OpenAI shapes and the stream assembly are oxillama.openai's, which the HTTP server shares.
"""
from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Iterator

import numpy as np

from oxillama.errors import ContextOverflowError, DownloadError, InvalidArgumentError, ModelNotFoundError
from oxillama.grammar import Grammar
from oxillama.grammar.json_schema import json_schema_to_gbnf
from oxillama.hub import KNOWN_MODELS
from oxillama.openai import request as openai_request
from oxillama.openai import shapes
from oxillama.openai.chat import chat_plan
from oxillama.openai.stream import ChatChoiceStream, CompletionChoiceStream
from oxillama.runtime import InferenceEngine
from oxillama.runtime.embeddings import hidden_states, pool
from oxillama.tokenizer.chat import BUILTIN_TEMPLATES

log = logging.getLogger("oxillama")

LLAMA_DEFAULT_SEED = 0xFFFFFFFF     # llama.cpp's "pick a random seed"

# llama.cpp's llama_pooling_type values, and the names oxillama's pooling uses
POOLING_TYPES = {-1: "unspecified", 0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}

# llama_cpp.Llama keywords that choose GPU, memory-mapping or perf-counter behaviour: accepted, no effect here
_IGNORED = {"n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "rpc_servers", "vocab_only", "use_mmap",
            "use_mlock", "kv_overrides", "n_ubatch", "rope_scaling_type", "rope_freq_base", "rope_freq_scale",
            "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_ctx",
            "offload_kqv", "flash_attn", "no_perf", "last_n_tokens_size", "numa", "draft_model",
            "spm_infill", "op_offload", "swa_full", "tokenizer"}


class ContextWindowError(ContextOverflowError, ValueError):
    """A prompt does not fit the context (a ValueError, as llama-cpp-python raises)."""


class LlamaGrammar(Grammar):
    """llama_cpp.LlamaGrammar: a GBNF grammar (from_string, from_file) or a JSON schema
    (from_json_schema, given as a JSON string as llama-cpp-python takes it, or a dict)."""

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True, root: str = "root") -> "LlamaGrammar":
        return cls(grammar, root)

    @classmethod
    def from_file(cls, file, verbose: bool = True, root: str = "root") -> "LlamaGrammar":
        return super().from_file(file, root)

    @classmethod
    def from_json_schema(cls, json_schema, verbose: bool = True) -> "LlamaGrammar":
        return cls(json_schema_to_gbnf(json_schema))


class LlamaState:
    """What save_state() returns: the token ids and the engine's session snapshot (bytes)."""

    def __init__(self, input_ids: np.ndarray, scores: np.ndarray, n_tokens: int, llama_state: bytes, seed: int):
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = len(llama_state)
        self.seed = seed


class Llama:
    """A GGUF model with llama_cpp.Llama's interface.

        from oxillama import Llama            # was: from llama_cpp import Llama
        llm = Llama(model_path="model.gguf", n_ctx=2048)
        llm("Q: Name the planets. A:", max_tokens=32, stop=["Q:"])["choices"][0]["text"]
        llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], tools=[...])

    model_path may also be a known model name (see `oxillama pull`). GPU and memory keywords
    (n_gpu_layers, use_mmap, flash_attn, ...) are accepted and have no effect.
    """

    def __init__(self, model_path: str, *, seed: int = LLAMA_DEFAULT_SEED, n_ctx: int = 512, n_batch: int = 512,
                 n_threads: int | None = None, n_threads_batch: int | None = None, pooling_type: int | str = -1,
                 logits_all: bool = False, embedding: bool = False, lora_base: str | None = None,
                 lora_scale: float = 1.0, lora_path: str | None = None, chat_format: str | None = None,
                 chat_handler=None, type_k: int | None = None, type_v: int | None = None, verbose: bool = True,
                 **kwargs):

        unknown = set(kwargs) - _IGNORED
        if unknown:
            raise InvalidArgumentError(f"Llama() got unknown keyword(s): {', '.join(sorted(unknown))}")
        for name in sorted(kwargs):
            log.debug("Llama(%s=%r): no effect on the CPU; ignored", name, kwargs[name])
        if lora_base is not None:
            raise InvalidArgumentError("lora_base is not needed: adapters apply next to the base weights, which are "
                                       "never merged (give lora_path alone)")
        if chat_handler is not None:
            raise InvalidArgumentError("chat_handler is not supported: oxillama renders chats with the model's "
                                       "chat template (or chat_format=)")
        self.model_path = os.fspath(model_path)
        if not os.path.exists(self.model_path):
            if self.model_path not in KNOWN_MODELS:
                raise ModelNotFoundError(f"Model path does not exist: {self.model_path}")
        if n_threads_batch is not None and n_threads is not None and n_threads_batch != n_threads:
            log.debug("Llama(n_threads_batch=%d): one thread count serves prompt and decode; using n_threads=%d",
                      n_threads_batch, n_threads)
        n_threads = n_threads if n_threads is not None else n_threads_batch
        self._seed = None if seed in (None, -1, LLAMA_DEFAULT_SEED) else int(seed)
        self._engine = InferenceEngine.from_gguf(self.model_path, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                                                 seed=self._seed, type_k=type_k, type_v=type_v, lora_path=lora_path,
                                                 lora_scale=lora_scale)
        self.verbose = verbose
        self.logits_all = bool(logits_all)
        self.embedding = bool(embedding)
        self.lora_scale = lora_scale
        self.n_batch = self._engine.n_batch
        self.n_threads = self._engine.n_threads
        self.pooling_type = self._pooling(pooling_type)
        self.chat_format = chat_format
        self._chat_template = self._template_for(chat_format)
        self.metadata = {k: str(v) for k, v in self._engine.metadata.items()
                         if isinstance(v, (str, int, float, bool))}
        self.scores = np.zeros((0, self.n_vocab()), dtype=np.float32)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None = None, additional_files: list[str] | None = None,
                        local_dir: str | None = None, local_dir_use_symlinks="auto", cache_dir: str | None = None,
                        **kwargs) -> "Llama":
        """llama-cpp-python's: a GGUF file of a Hugging Face repository, downloaded once through huggingface_hub
        (its cache or `cache_dir`, or a copy in `local_dir`; HF_TOKEN, HF_ENDPOINT), then `Llama(path, **kwargs)`.
        `filename` is a file name or a glob pattern ("*Q4_K_M.gguf") that must match one file; None picks as
        `hf://ORG/REPO` does (the only GGUF, else Q4_K_M)."""
        from oxillama import hub
        files = hub.hf_repo_files(repo_id, cache_dir=cache_dir)
        if filename is None:
            name = hub.hf_pick_file(repo_id, files, None)
        else:
            matches = [f for f in files if f == filename or fnmatch.fnmatch(f, filename)
                       or fnmatch.fnmatch(f.rsplit("/", 1)[-1], filename)]
            if not matches:
                raise DownloadError(f"{repo_id} has no file matching {filename!r}; its GGUF files: "
                                    f"{', '.join(f for f in files if f.endswith('.gguf')) or 'none'}")
            if len(matches) > 1:
                raise DownloadError(f"{filename!r} matches {len(matches)} files in {repo_id}: {', '.join(matches)}")
            name = matches[0]
        for extra in additional_files or ():
            hub.hf_download(repo_id, extra, cache_dir=cache_dir, local_dir=local_dir)
        path = hub.hf_download(repo_id, name, cache_dir=cache_dir, local_dir=local_dir)
        return cls(model_path=str(path), **kwargs)

    # ---- construction helpers ----

    def _pooling(self, pooling_type) -> str:
        name = POOLING_TYPES.get(pooling_type, pooling_type) if not isinstance(pooling_type, bool) else None
        if name not in POOLING_TYPES.values() or name == "rank":
            raise InvalidArgumentError(f"pooling_type must be one of -1 (unspecified), 0 (none), 1 (mean), 2 (cls), "
                                       f"3 (last) or their names, got {pooling_type!r}")
        if name == "unspecified":      # the model's own, as llama.cpp does; a decoder declares none
            declared = self._engine.metadata.get(f"{self._engine.config.arch}.pooling_type")
            name = POOLING_TYPES.get(int(declared), "none") if declared is not None else "none"
            if name == "rank":
                name = "none"
        return name

    def _template_for(self, chat_format: str | None) -> str | None:
        """chat_format -> a template text (None: the model's own)."""
        if chat_format is None:
            return None
        builtin = {name: src for name, _, src in BUILTIN_TEMPLATES}
        if chat_format in builtin:
            return builtin[chat_format]
        named = self._engine.tokenizer._vocab.chat_templates or {}
        if chat_format in named:
            return chat_format
        raise InvalidArgumentError(f"chat_format {chat_format!r} is not supported; use None (the model's template), "
                                   f"{', '.join(sorted(builtin))} or one of the file's named templates "
                                   f"({', '.join(sorted(named)) or 'none'})")

    # ---- the llama_cpp.Llama basics ----

    @property
    def engine(self):
        """The InferenceEngine underneath (oxillama's own API)."""
        return self._engine

    @property
    def tokenizer_(self):
        return self._engine.tokenizer

    def n_ctx(self) -> int:
        return self._engine.n_ctx

    def n_vocab(self) -> int:
        return self._engine.n_vocab

    def n_embd(self) -> int:
        return int(self._engine.config.n_embd)

    def token_bos(self) -> int:
        bos = self._engine.tokenizer.bos_id
        return -1 if bos is None else int(bos)

    def token_eos(self) -> int:
        eos = self._engine.tokenizer.eos_id
        return -1 if eos is None else int(eos)

    def token_nl(self) -> int:
        ids = self._engine.tokenize("\n", add_special=False)
        return int(ids[-1]) if ids else -1

    @property
    def n_tokens(self) -> int:
        return len(self._engine.tokens)

    @property
    def input_ids(self) -> np.ndarray:
        return np.asarray(self._engine.tokens, dtype=np.intc)

    @property
    def _model_name(self) -> str:
        return self.model_path

    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of UTF-8 text; add_bos adds the model's BOS (if it uses one), special parses
        control-token texts such as "<|im_start|>" as those tokens."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        return self._engine.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens, prev_tokens=None, special: bool = False) -> bytes:
        """The bytes of tokens; control tokens render as their text only with special=True."""
        return self._engine.tokenizer.decode_bytes([int(t) for t in tokens], skip_special=not special)

    def reset(self) -> None:
        self._engine.reset()
        self.scores = np.zeros((0, self.n_vocab()), dtype=np.float32)

    def eval(self, tokens) -> None:
        """Run tokens after the session's; their logits are in self.scores (every position with
        logits_all=True, else the last)."""
        out = self._engine.forward(list(tokens), all_logits=self.logits_all)
        self.scores = out if self.logits_all else out[None, :]

    def save_state(self) -> LlamaState:
        return LlamaState(self.input_ids.copy(), self.scores.copy(), self.n_tokens, self._engine.snapshot(),
                          LLAMA_DEFAULT_SEED if self._seed is None else self._seed)

    def load_state(self, state: LlamaState) -> None:
        self._engine.load_snapshot(state.llama_state)
        self.scores = state.scores.copy()

    def set_seed(self, seed: int) -> None:
        self._seed = None if seed in (None, -1, LLAMA_DEFAULT_SEED) else int(seed)
        self._engine.seed = self._seed

    def close(self) -> None:
        self._engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- generation ----

    def _generate_kwargs(self, *, temperature, top_p, min_p, typical_p, top_k, repeat_penalty, frequency_penalty,
                         presence_penalty, tfs_z, mirostat_mode, mirostat_tau, mirostat_eta, stop, seed,
                         logits_processor, stopping_criteria, grammar, logit_bias, logprobs,
                         response_format=None) -> dict:
        sampling = dict(temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
                        repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat=mirostat_mode,
                        mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, logits_processor=logits_processor,
                        stopping_criteria=stopping_criteria)
        if seed is not None and seed not in (-1, LLAMA_DEFAULT_SEED):
            sampling["seed"] = int(seed)
        return openai_request.generate_kwargs(
            sampling, stop=stop, logit_bias=logit_bias, n_vocab=self.n_vocab(), bias_bound=None, grammar=grammar,
            response_format=response_format, logprobs=None if logprobs is None else int(logprobs))

    def _run(self, prompt, stream: bool, max_tokens, kw):
        """engine.generate on the prompt's token ids; max_tokens None or <= 0 means until the context is
        full, and a larger one is cut to the room left (as llama-cpp-python does). Returns (number of
        prompt tokens, the Completion or the piece iterator)."""
        ids = self._engine.encode_prompt(prompt)
        room = self.n_ctx() - len(ids)
        if room <= 0:
            raise ContextWindowError(f"Requested tokens ({len(ids)}) exceed context window of {self.n_ctx()}")
        n = room if max_tokens is None or max_tokens <= 0 else min(int(max_tokens), room)
        return len(ids), self._engine.generate(ids, stream=stream, **dict(kw, max_tokens=n))

    def _n_generated(self, completion) -> int:
        return shapes.generated_token_count(completion.tokens, self._engine.tokenizer.eog_ids)

    def create_completion(self, prompt: str | list[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False, stop=None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          model: str | None = None, stopping_criteria=None, logits_processor=None, grammar=None,
                          logit_bias: dict | None = None):
        """A text completion dict ({"id", "object": "text_completion", "created", "model", "choices":
        [{"text", "index", "logprobs", "finish_reason"}], "usage"}), or with stream=True an iterator
        of chunk dicts, the last with finish_reason (each with the logprobs of its tokens)."""
        if suffix is not None:
            raise InvalidArgumentError("suffix (fill-in-the-middle) is not supported")
        kw = self._generate_kwargs(
            temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            stop=stop, seed=seed, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
            grammar=grammar, logit_bias=logit_bias, logprobs=logprobs)
        if not isinstance(prompt, str):
            prompt = [int(t) for t in prompt]
        prefix = ""
        if echo:
            prefix = prompt if isinstance(prompt, str) else self.detokenize(prompt).decode("utf-8", "replace")
        response_id, created, name = shapes.new_id("cmpl"), shapes.now(), model or self._model_name
        tok = self._engine.tokenizer

        def logprobs_of(c):
            if logprobs is None:
                return None
            return shapes.completion_logprobs(tok, c.tokens, c.logprobs, int(logprobs), offset=len(prefix))

        if not stream:
            n_prompt, c = self._run(prompt, False, max_tokens, kw)
            n_gen = self._n_generated(c)
            choice = shapes.completion_choice(prefix + str(c), 0, c.finish_reason, logprobs_of(c))
            return shapes.completion_response(response_id, name, [choice], shapes.usage(n_prompt, n_gen), created)
        _, pieces = self._run(prompt, True, max_tokens, kw)
        # each chunk carries the logprobs of the tokens behind its text (the last one those left)
        choice = CompletionChoiceStream(0, lambda: self._engine.streamed, tok, logprobs, prefix)

        def chunks() -> Iterator[dict]:
            for c in choice.opening():
                yield shapes.completion_chunk(response_id, name, created, c)
            for piece in pieces:
                for c in choice.piece(piece):
                    yield shapes.completion_chunk(response_id, name, created, c)
            for c in choice.finish(self._engine.last_completion.finish_reason):
                yield shapes.completion_chunk(response_id, name, created, c)
        return chunks()

    def __call__(self, prompt: str | list[int], *args, **kwargs):
        """create_completion(prompt, ...)."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(self, messages: list[dict], functions: list[dict] | None = None, function_call=None,
                               tools: list[dict] | None = None, tool_choice=None, temperature: float = 0.2,
                               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05, typical_p: float = 1.0,
                               stream: bool = False, stop=None, seed: int | None = None, response_format=None,
                               max_tokens: int | None = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, tfs_z: float = 1.0,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               model: str | None = None, logits_processor=None, grammar=None,
                               logit_bias: dict | None = None, logprobs: bool | None = None,
                               top_logprobs: int | None = None, parallel_tool_calls: bool | None = None):
        """A chat.completion dict, or with stream=True an iterator of chat.completion.chunk dicts.

        messages are rendered with the model's chat template. tools / tool_choice follow OpenAI: "auto"
        (the default when tools are given) reads calls from the output, "required" or a named function
        forces one through a grammar built from the tools' parameter schemas (several calls with
        parallel_tool_calls=True), "none" never calls. Calls come back in message.tool_calls with
        finish_reason "tool_calls"; streamed, as tool-call deltas. functions / function_call (the
        older OpenAI spelling) are read as tools / tool_choice."""
        if functions is not None:
            if tools is not None:
                raise InvalidArgumentError("give tools or functions, not both")
            tools = [{"type": "function", "function": f} for f in functions]
            if isinstance(function_call, dict):
                tool_choice = {"type": "function", "function": {"name": function_call.get("name")}}
            elif function_call is not None:
                tool_choice = function_call
        plan = chat_plan(self._engine.tokenizer, messages, tools, tool_choice,
                                chat_template=self._chat_template, parallel_tool_calls=bool(parallel_tool_calls))
        if plan.grammar is not None and (grammar is not None or response_format is not None):
            raise InvalidArgumentError(f"tool_choice={tool_choice!r} constrains the output itself; "
                                       "it cannot be combined with grammar or response_format")
        n_top = openai_request.chat_logprobs_count(logprobs, top_logprobs)
        kw = self._generate_kwargs(
            temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            stop=stop, seed=seed, logits_processor=logits_processor, stopping_criteria=None,
            grammar=plan.grammar if plan.grammar is not None else grammar, logit_bias=logit_bias, logprobs=n_top,
            response_format=response_format)
        response_id, created, name = shapes.new_id("chatcmpl"), shapes.now(), model or self._model_name
        tok = self._engine.tokenizer

        def logprobs_of(c):
            return None if n_top is None else shapes.chat_logprobs(tok, c.tokens, c.logprobs, n_top)

        if not stream:
            n_prompt, c = self._run(plan.prompt, False, max_tokens, kw)
            n_gen = self._n_generated(c)
            content, calls = plan.parse(str(c))
            choice = shapes.chat_choice(0, content, calls, c.finish_reason, logprobs_of(c))
            return shapes.chat_response(response_id, name, [choice], shapes.usage(n_prompt, n_gen), created)
        _, pieces = self._run(plan.prompt, True, max_tokens, kw)
        # each delta carries the logprobs of the tokens behind it (oxillama.openai.stream)
        choice = ChatChoiceStream(0, plan, lambda: self._engine.streamed, tok, n_top)

        def chunks() -> Iterator[dict]:
            for c in choice.opening():
                yield shapes.chat_chunk(response_id, name, created, c["delta"])
            for piece in pieces:
                for c in choice.piece(piece):
                    yield shapes.chat_chunk(response_id, name, created, c["delta"], logprobs=c["logprobs"])
            for c in choice.finish(self._engine.last_completion.finish_reason):
                yield shapes.chat_chunk(response_id, name, created, c["delta"], finish_reason=c["finish_reason"],
                                        logprobs=c["logprobs"])
        return chunks()

    # ---- embeddings ----

    def embed(self, input: str | list[str] | list[int], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """Embeddings as lists of floats: one vector per text with a pooling type, else (pooling
        "none", what a decoder model's GGUF declares) one vector per token. A str (or a list of token
        ids) gives one result, a list of strs a list of them."""
        single = isinstance(input, str) or (isinstance(input, list) and input and isinstance(input[0], int))
        inputs = [input] if single else list(input)
        out, n_tokens = [], 0
        for text in inputs:
            ids = self.tokenize(text) if isinstance(text, str) else [int(t) for t in text]
            if truncate:
                ids = ids[:self.n_ctx()]
            n_tokens += len(ids)
            h = hidden_states(self._engine, ids)
            if self.pooling_type == "none":
                if normalize:
                    norms = np.linalg.norm(h.astype(np.float64), axis=1, keepdims=True)
                    h = (h / np.where(norms > 0, norms, 1.0)).astype(np.float32)
                out.append(h.tolist())
            else:
                out.append(pool(h, self.pooling_type, normalize).tolist())
        result = out[0] if single else out
        return (result, n_tokens) if return_count else result

    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict:
        """{"object": "list", "data": [{"object": "embedding", "embedding": [...], "index": i}], "model",
        "usage": {"prompt_tokens", "total_tokens"}}."""
        inputs = [input] if isinstance(input, str) else list(input)
        vectors, n_tokens = self.embed(inputs, return_count=True)
        return shapes.embedding_response(model or self._model_name, vectors, n_tokens)

    def __repr__(self) -> str:
        return f"Llama(model_path={self.model_path!r}, n_ctx={self.n_ctx()})"
