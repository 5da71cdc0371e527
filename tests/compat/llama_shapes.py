"""llama-cpp-python's response shapes (its llama_types TypedDicts), as nested specs: a dict spec lists
the keys that must be present and each value's spec; a type or tuple of types checks isinstance;
[spec] is a list whose items follow spec. Keys may be added, never dropped."""
NONE = type(None)

TOP_LOGPROB = {"token": str, "logprob": float, "bytes": [int]}
CHAT_LOGPROBS = {"content": [dict(TOP_LOGPROB, top_logprobs=[TOP_LOGPROB])], "refusal": NONE}
COMPLETION_LOGPROBS = {"text_offset": [int], "token_logprobs": [float], "tokens": [str], "top_logprobs": [dict]}
USAGE = {"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}

COMPLETION = {"id": str, "object": str, "created": int, "model": str, "usage": USAGE,
              "choices": [{"text": str, "index": int, "logprobs": (NONE, dict), "finish_reason": (str, NONE)}]}
COMPLETION_CHUNK = {"id": str, "object": str, "created": int, "model": str,
                    "choices": [{"text": str, "index": int, "logprobs": (NONE, dict),
                                 "finish_reason": (str, NONE)}]}
TOOL_CALL = {"id": str, "type": str, "function": {"name": str, "arguments": str}}
CHAT = {"id": str, "object": str, "created": int, "model": str, "usage": USAGE,
        "choices": [{"index": int, "message": {"role": str, "content": (str, NONE)}, "logprobs": (NONE, dict),
                     "finish_reason": (str, NONE)}]}
CHAT_CHUNK = {"id": str, "object": str, "created": int, "model": str,
              "choices": [{"index": int, "delta": dict, "finish_reason": (str, NONE)}]}
TOOL_CALL_DELTA = {"index": int, "id": str, "type": str, "function": {"name": str, "arguments": str}}
EMBEDDING = {"object": str, "model": str, "usage": {"prompt_tokens": int, "total_tokens": int},
             "data": [{"index": int, "object": str, "embedding": list}]}


def assert_shape(obj, spec, path="$"):
    if isinstance(spec, dict):
        assert isinstance(obj, dict), f"{path}: expected a dict, got {type(obj).__name__}"
        for key, sub in spec.items():
            assert key in obj, f"{path}: missing key {key!r}"
            assert_shape(obj[key], sub, f"{path}.{key}")
    elif isinstance(spec, list):
        assert isinstance(obj, list), f"{path}: expected a list, got {type(obj).__name__}"
        for i, item in enumerate(obj):
            assert_shape(item, spec[0], f"{path}[{i}]")
    else:
        types = spec if isinstance(spec, tuple) else (spec,)
        # JSON has one number type: an int where a float is declared is fine, a numpy scalar is not
        if float in types:
            types = types + (int,)
        assert type(obj) in types or (bool not in types and type(obj) is not bool and isinstance(obj, types)
                                      and type(obj).__module__ == "builtins"), \
            f"{path}: {type(obj).__name__} is not {'/'.join(t.__name__ for t in types)}"


def structure(obj):
    """The recursive keys and value types of a response, for comparing two libraries' outputs."""
    if isinstance(obj, dict):
        return {k: structure(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [structure(obj[0])] if obj else []
    return "number" if isinstance(obj, (int, float)) and not isinstance(obj, bool) else type(obj).__name__
