"""Fuzz targets, one per entry point that takes untrusted input: a hypothesis strategy for inputs and
a `check(state, input)` that runs the entry point and returns normally when it behaved -- it
succeeded, or raised an OxillamaError -- and lets anything else propagate.

Shared by tests/fuzz/test_fuzz.py (a small budget under pytest) and bench/fuzz.py (long runs, each
case in a child process with time and memory limits). `setup()` builds what a target needs once
(a tiny model, its bytes, a snapshot) without running a forward pass, so that bench/fuzz.py can
fork children from a parent that never started OpenMP threads.
"""
from __future__ import annotations

import json
import os
import struct
import tempfile

import msgpack
import numpy as np
from hypothesis import strategies as st

from oxillama.errors import OxillamaError

DATA = os.path.join(os.path.dirname(__file__), "..", "models", "data")
TINY = os.path.join(DATA, "llama.gguf")
TINY_MODELS = ["llama", "gemma2", "gemma3", "phi3", "qwen2", "starcoder2", "command-r"]

INTERESTING_INTS = [0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 255, 256, 4096, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                    2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, -2**31, -2**63, 10**9, 10**18]
INTERESTING_FLOATS = [0.0, -0.0, 1e-320, 5e-324, 1e-38, 1e-7, 0.5, 1.0, 2.0, 1e30, 3.4e38, 1e308,
                      float("inf"), float("-inf"), float("nan")]


def ints():
    return st.sampled_from(INTERESTING_INTS) | st.integers(-2**70, 2**70) | st.integers(-5, 300)


def floats():
    return st.sampled_from(INTERESTING_FLOATS) | st.floats(allow_nan=True, allow_infinity=True)


def scalars():
    return st.none() | st.booleans() | ints() | floats() | st.text(max_size=8) | st.binary(max_size=8)


def values():
    """Anything a JSON body or a careless caller might pass: scalars, lists, dicts, arrays."""
    arrays = st.sampled_from([np.array([1, 2]), np.array(3), np.int64(5), np.float32(0.5), np.bool_(True),
                              np.zeros((2, 2), np.int32), np.array(["a"]), np.array([1.5])])
    return st.recursive(scalars() | arrays, lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(st.text(max_size=4) | ints(), inner, max_size=3), max_leaves=8)


def expect_bounded(fn, *args, **kwargs):
    """Run fn: success and OxillamaError are fine; anything else propagates (a finding)."""
    try:
        return fn(*args, **kwargs)
    except OxillamaError:
        return None


# ---- chat templates ----------------------------------------------------------------------------

_EXPRS = ["messages", "messages[0]", "messages[0]['content']", "m", "m.role", "loop.index", "x", "ns.v",
          "'ab'", "'%s'", "'{}'", "'%5d'", "\"a\\nb\"", "range(N)", "[1, 2, 3]", "{'a': 1}", "1", "N", "-N", "1.5",
          "1e308", "none", "true", "add_generation_prompt", "bos_token", "tools", "lipsum", "cycler()",
          "joiner()", "namespace(v=1)", "dict(a=1)", "raise_exception('x')", "strftime_now('%Y')"]
_BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "<", "in", "and", "or", "is defined", "|length"]
_FILTERS = ["indent(N)", "center(N)", "truncate(N)", "wordwrap(N)", "join('x')", "join(X)", "replace('a', X)",
            "tojson", "tojson(indent=N)", "format(N)", "int", "float", "string", "list", "sort", "unique",
            "reverse", "first", "last", "length", "batch(N)", "slice(N)", "round(N)", "trim", "upper", "title",
            "default(X)", "map(attribute='role')", "selectattr('role')", "items", "dictsort", "sum", "abs",
            "pprint", "urlize", "striptags", "wordcount", "xmlattr", "escape", "safe", "min", "max", "random"]
_METHODS = ["center(N)", "ljust(N)", "zfill(N)", "expandtabs(N)", "replace('a', X)", "join(X)", "format(X)",
            "split()", "upper()", "strip()", "startswith('a')", "items()", "get('a')", "keys()", "__class__",
            "pop()", "append(1)", "mro()"]


@st.composite
def templates(draw):
    """Jinja text built from the constructs that hang, allocate or raise when unbounded."""
    def num():
        return str(draw(st.sampled_from([0, 1, 2, 5, 100, 10**5, 10**6, 10**9, 2**31, 10**18, -5, -(10**9)])))

    def expr(depth=0):
        kind = draw(st.integers(0, 5 if depth < 3 else 0))
        if kind == 0:
            e = draw(st.sampled_from(_EXPRS))
        elif kind == 1:
            e = f"({expr(depth + 1)} {draw(st.sampled_from(_BINOPS))} {expr(depth + 1)})"
        elif kind == 2:
            e = f"{expr(depth + 1)}|{draw(st.sampled_from(_FILTERS))}"
        elif kind == 3:
            e = f"{expr(depth + 1)}.{draw(st.sampled_from(_METHODS))}"
        elif kind == 4:
            e = f"{expr(depth + 1)}[{draw(st.sampled_from(['0', '-1', '1:', '::-1', 'N', ':N']))}]"
        else:
            e = f"[{expr(depth + 1)}] * N"
        return e.replace("N", num()).replace("X", draw(st.sampled_from(["'x'", "'x' * 1000", "messages", "1"])))

    def block(depth=0):
        kind = draw(st.integers(0, 7 if depth < 4 else 1))
        if kind <= 1:
            return "{{ " + expr() + " }}" if kind == 0 else draw(st.text(alphabet="ab\n{}%#", max_size=6))
        body = "".join(block(depth + 1) for _ in range(draw(st.integers(0, 3))))
        if kind == 2:
            return "{% for x in " + expr() + " %}" + body + "{% endfor %}"
        if kind == 3:
            return "{% if " + expr() + " %}" + body + "{% else %}" + block(depth + 1) + "{% endif %}"
        if kind == 4:
            return "{% set ns = namespace(v=" + expr() + ") %}{% for i in range(" + num() + ") %}{% set ns.v = " \
                   "ns.v " + draw(st.sampled_from(["~", "+", "*"])) + " ns.v %}{% endfor %}" + body
        if kind == 5:
            return "{% macro f(n) %}" + body + "{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
        if kind == 6:
            return "{% set y %}" + body + "{% endset %}{{ y }}"
        return draw(st.sampled_from(["{% break %}", "{% continue %}", "{% endfor %}", "{{", "{%", "{# x",
                                     "{% raw %}{{ x }}", "{% filter upper %}a{% endfilter %}"]))

    return "".join(block() for _ in range(draw(st.integers(1, 3))))


def chat_setup():
    from oxillama.tokenizer.chat import RenderLimits
    return RenderLimits(max_seconds=2.0, max_steps=200_000)


def chat_check(limits, source):
    from oxillama.tokenizer.chat import ChatTemplate
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a" * 50}]
    out = expect_bounded(lambda: ChatTemplate(source, limits).render(msgs, tools=[{"name": "t"}], bos_token="<s>"))
    assert out is None or isinstance(out, str)


chat_inputs = templates() | st.text(max_size=60)


# ---- GBNF ----------------------------------------------------------------------------------------

_GBNF_PIECES = ["root ::= ", "a ::= ", "b ::= ", "root", "a", "b", '"x"', '"\\u00e9"', '"\\x41"', "[a-z]", "[^\\n]",
                "[\\u0000-\\U0010FFFF]", "(", ")", "|", "*", "+", "?", "{0,3}", "{2}", "{5,}", "{1000000}",
                "{0,99999999}", " ", "\n", "# c\n", ".", '"', "[", "]", "\\", "::=", "-", "root ::= root root",
                "a ::= a | \"\"", "root ::= (((((((((((((((((((( \"x\" ))))))))))))))))))))", "<", ">"]


@st.composite
def gbnf_texts(draw):
    parts = draw(st.lists(st.sampled_from(_GBNF_PIECES) | st.text(max_size=4), max_size=24))
    text = "".join(parts)
    if draw(st.booleans()):
        text = 'root ::= "a" b\nb ::= ' + text
    return text


def gbnf_setup():
    return None


def gbnf_check(_state, text):
    from oxillama.grammar import Grammar
    g = expect_bounded(Grammar, text)
    if g is not None:
        expect_bounded(g.accepts, "x")
        expect_bounded(g.accepts_prefix, "aaa")


# ---- JSON schema ---------------------------------------------------------------------------------

_SCHEMA_KEYS = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
                "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                "exclusiveMinimum", "exclusiveMaximum", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                "$defs", "definitions", "description"]
_TYPES = ["string", "number", "integer", "boolean", "null", "object", "array", "bogus"]


def schemas():
    leaf = (st.sampled_from(_TYPES).map(lambda t: {"type": t}) | st.booleans() | st.none() | ints() | floats() |
            st.text(max_size=6) | st.sampled_from(["#", "#/$defs/a", "#/properties/x", "^a+$", "(a|b)*", "[", "date"]))
    return st.recursive(leaf, lambda inner: st.dictionaries(st.sampled_from(_SCHEMA_KEYS) | st.text(max_size=3),
                                                            inner, max_size=5) |
                        st.lists(inner, max_size=4) | st.lists(st.text(max_size=4), max_size=4),
                        max_leaves=20)


def schema_setup():
    return None


def schema_check(_state, schema):
    from oxillama.grammar import Grammar, json_schema_to_gbnf, grammar_from_response_format
    text = expect_bounded(json_schema_to_gbnf, schema)
    if text is not None:
        expect_bounded(Grammar, text)
    expect_bounded(grammar_from_response_format, {"type": "json_object", "schema": schema})
    if isinstance(schema, dict):
        try:
            raw = json.dumps(schema)
        except (TypeError, ValueError):
            return
        expect_bounded(json_schema_to_gbnf, raw)


# ---- model files (hyper-parameters and tensor table) ----------------------------------------------

_HP_KEYS = ["block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
            "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
            "rope.freq_base", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
            "attention.sliding_window", "attention.sliding_window_pattern", "rope.scaling.type",
            "rope.scaling.factor", "rope.scaling.original_context_length", "attention.scale", "logit_scale",
            "final_logit_softcapping", "attn_logit_softcapping", "rope.freq_base_swa", "rope.scale_linear"]


@st.composite
def model_edits(draw):
    from oxillama.gguf import GGUFValueType as VT
    model = draw(st.sampled_from(TINY_MODELS))
    edits = {}
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(_HP_KEYS))
        kind = draw(st.sampled_from(["u32", "i32", "u64", "f32", "f64", "str", "arr", "remove"]))
        if kind == "u32":
            edits[key] = (draw(st.sampled_from(INTERESTING_INTS).filter(lambda v: 0 <= v < 2**32)), VT.UINT32)
        elif kind == "i32":
            edits[key] = (draw(st.integers(-2**31, 2**31 - 1) | st.sampled_from([-1, 0, 2**31 - 1])), VT.INT32)
        elif kind == "u64":
            edits[key] = (draw(st.sampled_from(INTERESTING_INTS).filter(lambda v: 0 <= v < 2**64)), VT.UINT64)
        elif kind == "f32":
            edits[key] = (draw(st.sampled_from(INTERESTING_FLOATS)), VT.FLOAT32)
        elif kind == "f64":
            edits[key] = (draw(floats()), VT.FLOAT64)
        elif kind == "str":
            edits[key] = (draw(st.sampled_from(["yarn", "linear", "none", "", "x"])), VT.STRING)
        elif kind == "arr":
            edits[key] = (np.array(draw(st.lists(st.integers(0, 64), min_size=1, max_size=4)), np.int32),
                          (VT.ARRAY, VT.INT32))
        else:
            edits[key] = None
    return model, edits


def model_setup():
    return {m: os.path.join(DATA, f"{m}.gguf") for m in TINY_MODELS}


def write_model(src: str, dst: str, edits: dict) -> None:
    from oxillama.gguf import GGUFFile, GGUFValueType, GGUFWriter
    with GGUFFile(src) as f:
        arch = f.architecture
        full = {f"{arch}.{k}": v for k, v in edits.items()}
        w = GGUFWriter(dst)
        for key, value in f.metadata.items():
            if key in full:
                continue
            vtype, etype = f.metadata_types[key]
            w.add_metadata(key, value, (vtype, etype) if vtype == GGUFValueType.ARRAY else vtype)
        for key, edit in full.items():
            if edit is not None:
                w.add_metadata(key, edit[0], edit[1])
        for t in f.tensors.values():
            w.add_tensor_from(t)
        w.write()


def model_check(paths, case):
    from oxillama import InferenceEngine
    model, edits = case
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "m.gguf")
        try:
            write_model(paths[model], dst, edits)
        except (OxillamaError, OverflowError, ValueError, struct.error):
            return          # the writer refused the value (e.g. 1e308 as FLOAT32): not a model file
        engine = expect_bounded(InferenceEngine.from_gguf, dst, n_ctx=16, n_threads=1)
        if engine is not None:
            with engine:
                expect_bounded(engine.forward, [1, 2])


# ---- snapshots -----------------------------------------------------------------------------------

_SNAP_FIELDS = ["n_ctx", "n_layer", "kv_dim", "n_vocab", "kv_type", "tokens", "pending", "k", "v", "logits",
                "seed", "sampler", "grammar", "arch", "fingerprint"]


@st.composite
def snapshot_edits(draw):
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(_SNAP_FIELDS + ["sampler.config", "sampler.state"]))
        kind = draw(st.sampled_from(["value", "logits", "bytes"]))
        if kind == "logits":
            value = ("fill", draw(st.sampled_from(INTERESTING_FLOATS)))
        elif kind == "bytes":
            value = ("bytes", draw(st.binary(max_size=64)))
        else:
            value = ("value", draw(values().filter(lambda v: not isinstance(v, (np.ndarray, np.generic)))))
        edits.append((field, value))
    return edits


def snapshot_setup():
    from oxillama import InferenceEngine
    engine = InferenceEngine.from_gguf(TINY, n_ctx=32, n_threads=1)
    # a session built without a forward pass (the parent of bench/fuzz.py runs no OpenMP region)
    engine.session.sampler = engine.new_sampler(*_default_sampler_args())
    return engine


def _default_sampler_args():
    from oxillama.sampling import SamplerConfig
    return SamplerConfig(temperature=0.7, top_k=10), 5, None


def snapshot_check(engine, edits):
    from oxillama.runtime import snapshot as snap
    engine.reset()
    engine.forward([1, 2, 3])
    engine.session.sampler = engine.new_sampler(*_default_sampler_args())
    blob = engine.snapshot()
    d = msgpack.unpackb(blob[snap._HEADER.size:], raw=False)
    n_vocab = d["n_vocab"]
    for field, (kind, value) in edits:
        target, key = (d["sampler"], field.split(".")[1]) if field.startswith("sampler.") else (d, field)
        if not isinstance(target, dict):
            continue
        if kind == "fill":
            value = np.full(n_vocab, value, "<f4").tobytes()
        target[key] = value
    try:
        body = msgpack.packb(d, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return
    crafted = snap.frame(body)
    if expect_bounded(engine.load_snapshot, crafted) is None and engine.n_past == 0:
        return
    expect_bounded(engine.generate, None, max_tokens=2)


# ---- generate() keywords -------------------------------------------------------------------------

_KW_NAMES = ["temperature", "temp", "top_k", "top_p", "min_p", "typical_p", "top_a", "xtc_probability",
             "xtc_threshold", "repeat_penalty", "repeat_last_n", "frequency_penalty", "presence_penalty",
             "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
             "mirostat", "mirostat_tau", "mirostat_eta", "mirostat_m", "logit_bias", "banned_tokens",
             "suppress_tokens", "samplers", "stop", "stop_strings", "bad_words_ids", "max_tokens", "max_new_tokens",
             "seed", "logprobs", "num_beams", "tfs_z", "stream", "do_sample", "min_keep", "dynatemp_range",
             "dynatemp_exponent", "epsilon_cutoff", "eta_cutoff", "speculative_k", "logits_processor",
             "stopping_criteria", "callback", "response_format", "grammar", "sampler", "bogus_keyword"]


@st.composite
def generate_calls(draw):
    prompt = draw(st.sampled_from([[1, 2, 3], "hello", None]) | values())
    kwargs = draw(st.dictionaries(st.sampled_from(_KW_NAMES), values(), max_size=4))
    kwargs.setdefault("max_tokens", draw(st.sampled_from([1, 2, 3])))
    return prompt, kwargs


def generate_setup():
    from oxillama import InferenceEngine
    return InferenceEngine.from_gguf(TINY, n_ctx=32, n_threads=1)


def generate_check(engine, call):
    prompt, kwargs = call
    engine.reset()
    out = expect_bounded(engine.generate, prompt, **kwargs)
    if out is not None and kwargs.get("stream") is True:
        expect_bounded(lambda: "".join(out))


# ---- tokenizer -----------------------------------------------------------------------------------

def tokenizer_setup():
    from oxillama.gguf import GGUFFile
    from oxillama.tokenizer import Tokenizer
    with GGUFFile(TINY) as f:
        return Tokenizer.from_gguf(f) if hasattr(Tokenizer, "from_gguf") else Tokenizer(f.metadata)


def _id_value(x):
    """An element decode takes as an id: a Python int, a NumPy integer or a 0-d integer array (as NumPy makes
    of them in an array; bools are not ids); None for anything else."""
    if type(x) is int:
        return x
    if isinstance(x, np.integer) or (isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu"):
        return int(x)
    return None


def _is_id_list(ids, n_vocab) -> bool:
    """A flat list/tuple of ints (see _id_value) or a 1-D integer array, every id in [0, n_vocab): what decode
    takes."""
    if isinstance(ids, np.ndarray):
        return ids.ndim == 1 and ids.dtype.kind in "iu" and bool(((ids >= 0) & (ids < n_vocab)).all())
    return isinstance(ids, (list, tuple)) and all(
        (v := _id_value(x)) is not None and 0 <= v < n_vocab for x in ids)


def _is_empty_nest(x) -> bool:
    return isinstance(x, (list, tuple)) and all(_is_empty_nest(y) for y in x)


def tokenizer_check(tok, case):
    """Valid text encodes to ids in the vocabulary; text with a lone surrogate is a TokenizerError naming it
    and where. Valid ids decode to text; anything else is a TokenizerError naming the bad id or the type."""
    from oxillama.errors import TokenizerError
    text, ids = case
    surrogates = [i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF]
    if surrogates:
        try:
            tok.encode(text, parse_special=True)
        except TokenizerError as e:
            assert f"lone surrogate at index {surrogates[0]}" in str(e), (text, str(e))
        else:
            raise AssertionError(f"{text!r}: a lone surrogate was encoded")
    else:
        got = tok.encode(text, parse_special=True)
        assert all(type(t) is int and 0 <= t < tok.n_vocab for t in got), got
    # decode iterates a mapping like any iterable: over its keys (found by this target; left as it is)
    seq = list(ids) if isinstance(ids, dict) else ids
    if _is_id_list(seq, tok.n_vocab):
        assert isinstance(tok.decode(ids), str)
        return
    if isinstance(seq, (list, tuple)) and _is_empty_nest(seq):
        # [[]], [[], []]: no ids, as lenient as []; a ragged nest ([[], [[]]]) may be refused as not flat
        try:
            assert tok.decode(ids) == ""
        except TokenizerError as e:
            assert "token ids must be" in str(e), (ids, str(e))
        return
    try:
        tok.decode(ids)
    except TokenizerError as e:
        msg = str(e)
        # names an id outside the vocabulary, or what the input is instead of a flat sequence of ints
        vals = [_id_value(x) for x in seq] if isinstance(seq, (list, tuple)) else []
        bad = [v for v in vals if v is not None and not 0 <= v < tok.n_vocab]
        assert "token ids must be" in msg or any(f"token id {x} out of range" in msg for x in bad), (ids, msg)
    else:
        raise AssertionError(f"{ids!r}: decoded although not a list of ids in the vocabulary")


def _with_surrogate(args):
    text, code, at = args
    at = min(at, len(text))
    return text[:at] + chr(code) + text[at:]


tokenizer_inputs = st.tuples(st.text(alphabet=st.characters(), max_size=200) |
                             st.sampled_from(["<s>", "</s><s>", "\x00", "\ud800", "\udfff", "a\ud800\udc00"]) |
                             st.tuples(st.text(max_size=40), st.integers(0xD800, 0xDFFF),
                                       st.integers(0, 40)).map(_with_surrogate),
                             st.lists(ints(), max_size=8) | st.lists(st.integers(0, 287), max_size=8) | values())


TARGETS = {  # name -> (strategy, setup, check)
    "chat_template": (chat_inputs, chat_setup, chat_check),
    "gbnf": (gbnf_texts(), gbnf_setup, gbnf_check),
    "json_schema": (schemas(), schema_setup, schema_check),
    "model_file": (model_edits(), model_setup, model_check),
    "snapshot": (snapshot_edits(), snapshot_setup, snapshot_check),
    "generate": (generate_calls(), generate_setup, generate_check),
    "tokenizer": (tokenizer_inputs, tokenizer_setup, tokenizer_check),
}


# ---- HTTP request bodies ---------------------------------------------------------------------------
# The real server (a child process on a loopback port, the tiny llama model) gets bodies built from a
# valid request per endpoint with fields replaced by odd JSON, removed or added, or raw bytes that are
# not JSON at all. Every answer must be a 2xx with a well-formed body or a 4xx OpenAI error object:
# never a 5xx, never a hang, and the server stays healthy.

HTTP_TIMEOUT_S = 30.0


def json_values():
    """JSON values, odd ones first: huge and negative numbers, non-finite floats (Python's json writes
    them as NaN/Infinity, which strict parsers refuse), long strings, nesting."""
    leaves = (st.none() | st.booleans() | ints() | floats() | st.text(max_size=12) |
              st.sampled_from(["", "x" * 5000, "\x00", "<|im_end|>", "</s>", "{{ 7*7 }}", "\ud7ff", "-1", "1e999"]))
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)


_MESSAGES = [{"role": "user", "content": "hi"}]
_BASES = {
    "/v1/chat/completions": {"model": "m", "messages": _MESSAGES, "max_tokens": 4},
    "/v1/completions": {"model": "m", "prompt": "hello", "max_tokens": 4},
    "/v1/embeddings": {"model": "m", "input": "hello"},
    "/tokenize": {"content": "hello"},
    "/detokenize": {"tokens": [1, 2, 3]},
}
_FIELDS = {
    "/v1/chat/completions": ["messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                             "n", "stream", "stream_options", "stop", "seed", "logit_bias", "logprobs",
                             "top_logprobs", "response_format", "tools", "tool_choice", "parallel_tool_calls",
                             "grammar", "top_k", "min_p", "repeat_penalty", "ignore_eos", "presence_penalty",
                             "frequency_penalty", "user"],
    "/v1/completions": ["prompt", "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                        "stop", "seed", "logit_bias", "logprobs", "echo", "suffix", "best_of", "grammar",
                        "response_format", "top_k", "min_p", "ignore_eos"],
    "/v1/embeddings": ["input", "model", "encoding_format", "dimensions", "user"],
    "/tokenize": ["content", "add_special", "with_pieces"],
    "/detokenize": ["tokens"],
}
# values that reach deeper than random JSON: plausible shapes with a wrong part
_SHAPED = [
    [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}],
    [{"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function",
                                                             "function": {"name": "f", "arguments": "{bad"}}]}],
    [{"role": "tool", "content": "x"}], [{"role": "system"}], [{"role": "user", "content": "x" * 20000}],
    {"type": "json_schema", "json_schema": {"schema": {"type": "object", "minItems": None}}},
    {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}}},
    {"type": "json_object", "schema": {"type": "array", "prefixItems": [{}] * 300}},
    [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties":
                                                                    {"a": {"type": "integer", "minimum": 1e308}}}}}],
    {"type": "function", "function": {"name": "f"}}, "required", 'root ::= root', 'root ::= "a"*',
    [[1, 2], [3]], [2**40], [-1], list(range(5000)), ["a"] * 300, {"1": 1e9}, {str(2**64): 1},
]


@st.composite
def http_requests(draw):
    path = draw(st.sampled_from(sorted(_BASES)))
    headers = {"Content-Type": draw(st.sampled_from(["application/json"] * 4 + ["text/plain", "application/x-www-form-urlencoded", ""]))}
    if draw(st.integers(0, 9)) == 0:    # not JSON
        raw = draw(st.binary(max_size=64) | st.sampled_from([b"", b"{", b"[" * 5000, b'{"a": ' * 3000, b"null",
                                                             b'{"messages": NaN}', b"\xff\xfe{}"]))
        return path, headers, raw
    body = dict(_BASES[path])
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(_FIELDS[path]) | st.text(max_size=6))
        action = draw(st.integers(0, 4))
        if action == 0:
            body.pop(field, None)
        elif action == 1:
            body[field] = draw(st.sampled_from(_SHAPED))
        else:
            body[field] = draw(json_values())
    if draw(st.integers(0, 19)) == 0:
        body = draw(st.sampled_from([[body], "body", 5, None]))
    return path, headers, json.dumps(body).encode()


class HttpServer:
    """`python -m oxillama serve` on the tiny model, for the HTTP fuzz target."""

    def __init__(self):
        import socket
        import subprocess
        import sys
        import time

        import httpx
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        import oxillama
        env = dict(os.environ, OMP_NUM_THREADS="1")
        # the oxillama this process runs (an installed one, or a tree built in place), not the sources
        root = os.path.dirname(os.path.dirname(os.path.abspath(oxillama.__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "oxillama", "serve", "-m", os.path.abspath(TINY),
                                      "--port", str(self.port), "--parallel", "4", "--n-ctx", "64", "--threads", "1"],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=tempfile.gettempdir())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.close()
        self._log.seek(0)
        raise RuntimeError("the fuzz server did not start:\n" + self._log.read().decode(errors="replace")[-3000:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()


def http_setup():
    return HttpServer()


def _check_error_body(r):
    body = r.json()
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str), body
    assert error["code"] is None or isinstance(error["code"], str), body     # OpenAI's: a string or null


def http_check(server, case):
    import httpx
    path, headers, raw = case
    with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT_S) as client:
        try:
            with client.stream("POST", path, content=raw, headers=headers) as r:
                data = r.read()
        except httpx.TimeoutException:
            raise AssertionError(f"no answer within {HTTP_TIMEOUT_S} s") from None
        assert r.status_code < 500, (r.status_code, data[:500])
        if r.status_code >= 400:
            _check_error_body(r)
        elif r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in data.decode().splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    event = json.loads(line[6:])
                    assert "error" not in event or event["error"]["type"] != "server_error", event
        else:
            assert isinstance(r.json(), dict)
        health = client.get("/health")
        assert health.status_code == 200, health.text


TARGETS["http"] = (http_requests(), http_setup, http_check)
