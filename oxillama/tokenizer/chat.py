"""Chat templates: the jinja2 text in `tokenizer.chat_template`, rendered in a bounded sandbox.

Templates come from model files, i.e. from strangers (CVE-2024-34359 was a chat template in a GGUF
file), so they run in jinja2's ImmutableSandboxedEnvironment -- no attribute starting with "_", no
unsafe callables, no mutation of lists/dicts passed in -- with bounds on top (`RenderLimits`):

- compile: the source's size and its nesting depth (blocks and brackets) are capped before parsing;
- render: one budget per render counts steps (loop iterations, calls, filter applications), the
  characters written and the characters of every value built (strings, lists, big ints), and a
  deadline; whatever runs out aborts the render;
- operators, filters and str methods that can build a value far larger than their inputs
  (`'a' * n`, `2 ** n`, `'%*d' % ...`, `indent(n)`, `center(n)`, `join`, `replace`, `tojson(indent=n)`,
  str.format widths, ...) are checked *before* they run; `range()` is capped; `lipsum` is gone.

Everything that goes wrong -- syntax, nesting, a sandbox violation, `raise_exception(...)` from the
template, a bound, any error while rendering -- comes out as ChatTemplateError naming the template's
line. The environment matches the one Hugging Face `transformers` renders with (trim_blocks,
lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII), so prompts come out the same.
"""
from __future__ import annotations

import contextvars
import datetime
import functools
import json
import logging
import re
import time
from dataclasses import dataclass

from oxillama.errors import ChatTemplateError

logger = logging.getLogger("oxillama.tokenizer")

__all__ = ["ChatTemplate", "RenderLimits", "make_environment", "builtin_template", "BUILTIN_TEMPLATES"]


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on one chat template. Real templates stay far below them (a 1,000-turn conversation
    renders in ~10k steps); a template that reaches one gets a ChatTemplateError."""

    max_source_chars: int = 256 * 1024      # template text (real ones: under 30k)
    max_nesting: int = 32                   # open blocks + open brackets at any point
    max_seconds: float = 5.0                # wall time of one render
    max_steps: int = 2_000_000              # loop iterations + calls + filter applications
    max_output_chars: int = 8 << 20         # characters written, buffered (macros, set blocks) or not
    max_value_chars: int = 8 << 20          # one string (or its text form) a template builds
    max_items: int = 1 << 20                # one list, tuple or dict a template builds
    max_alloc_chars: int = 64 << 20         # every value built during one render, summed
    max_range: int = 100_000                # one range()
    max_int_bits: int = 16_384              # one integer (~4,900 digits)
    max_width: int = 100_000                # a format width/precision, indent, center, tojson indent


DEFAULT_LIMITS = RenderLimits()


class _TemplateBoundError(ChatTemplateError):
    """A render or compile bound was reached (the message says which)."""


class _Budget:
    """What one render may still spend; checked by every hook below."""

    __slots__ = ("limits", "deadline", "steps", "output", "alloc")

    def __init__(self, limits: RenderLimits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_seconds
        self.steps = limits.max_steps
        self.output = limits.max_output_chars
        self.alloc = limits.max_alloc_chars

    def step(self, n: int = 1) -> None:
        self.steps -= n
        if self.steps < 0:
            raise _TemplateBoundError(f"chat template ran more than {self.limits.max_steps} steps "
                                      "(loop iterations, calls, filters)")
        if time.monotonic() > self.deadline:
            raise _TemplateBoundError(f"chat template ran longer than {self.limits.max_seconds} s")

    def spend_output(self, n: int) -> None:
        self.output -= n
        if self.output < 0:
            raise _TemplateBoundError(f"chat template wrote more than {self.limits.max_output_chars} characters")

    def value(self, v):
        """Charge a value the template just built; too big a value aborts."""
        lim = self.limits
        if isinstance(v, (str, bytes)):
            n = len(v)
            if n > lim.max_value_chars:
                raise _TemplateBoundError(f"chat template built a string of {n} characters "
                                          f"(limit {lim.max_value_chars})")
        elif isinstance(v, (list, tuple, dict, set, frozenset)):
            n = len(v)
            if n > lim.max_items:
                raise _TemplateBoundError(f"chat template built a collection of {n} items (limit {lim.max_items})")
        elif isinstance(v, int):
            n = v.bit_length() // 8
            if v.bit_length() > lim.max_int_bits:
                raise _TemplateBoundError(f"chat template built an integer of {v.bit_length()} bits "
                                          f"(limit {lim.max_int_bits})")
        else:
            return v
        self.alloc -= n
        if self.alloc < 0:
            raise _TemplateBoundError(f"chat template built more than {lim.max_alloc_chars} characters of values")
        return v


# The budget of the render running in this thread (or task); None outside a render (compile time).
_current: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("oxillama_chat_budget", default=None)


def _budget() -> _Budget:
    b = _current.get()
    if b is None:   # outside ChatTemplate.render (make_environment used directly): each check stands alone
        b = _Budget(DEFAULT_LIMITS)
    return b


def _text_size(value, limit: int) -> int:
    """An upper estimate of len(str(value)), walking containers; stops once past `limit`, so its cost
    is bounded by the limit whatever the value."""
    from jinja2.utils import Namespace

    total, stack, seen = 0, [value], set()
    while stack and total <= limit:
        x = stack.pop()
        if isinstance(x, str):
            total += len(x) + 2
        elif isinstance(x, (bool, float)) or x is None:
            total += 24
        elif isinstance(x, int):
            total += x.bit_length() * 3 // 10 + 2
        elif isinstance(x, (list, tuple, set, frozenset, dict, Namespace)):
            if id(x) in seen:
                total += 5
                continue
            seen.add(id(x))
            if isinstance(x, Namespace):
                x = object.__getattribute__(x, "_Namespace__attrs")
                total += 12
            total += 2 + 4 * len(x)
            if total > limit:
                break
            if isinstance(x, dict):
                stack.extend(x.keys())
                stack.extend(x.values())
            else:
                stack.extend(x)
        else:
            total += 64
    return total


def _check_text(value, what: str) -> None:
    b = _budget()
    lim = b.limits.max_value_chars
    n = _text_size(value, lim)
    if n > lim:
        raise _TemplateBoundError(f"chat template would build text of more than {lim} characters ({what})")


def _check_width(n, what: str) -> None:
    lim = _budget().limits.max_width
    if isinstance(n, bool) or not isinstance(n, int):
        return      # the operation itself rejects it
    if abs(n) > lim:
        raise _TemplateBoundError(f"chat template asked for a {what} of {n} (limit {lim})")


# printf-style conversions: %(key)flags width.precision length type
_PRINTF = re.compile(r"%(?:\(([^)]*)\))?([-#0 +]*)(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_FORMAT_SPEC_NUMBERS = re.compile(r"\d+")


def _check_printf(fmt: str, args) -> None:
    """Refuse `fmt % args` if a width or precision (written or `*`) is beyond the limit, and bound the
    text the arguments turn into."""
    lim = _budget().limits.max_width
    positional = list(args) if isinstance(args, tuple) else [args]
    i = 0
    for m in _PRINTF.finditer(fmt):
        key, _, width, precision, conv = m.groups()
        if conv == "%":
            continue
        for part in (width, precision):
            if part == "*":
                n = positional[i] if i < len(positional) else 0
                i += 1
            else:
                n = int(part) if part else 0
            if isinstance(n, int) and not isinstance(n, bool) and abs(n) > lim:
                raise _TemplateBoundError(f"chat template asked for a format width of {n} (limit {lim})")
        if key is None:
            i += 1
    _check_text(args, "format arguments")


def _guarded_binop(op: str, left, right):
    """The sandbox's binary operators with the checks that must come first: repetition, powers and
    products of integers, printf formatting."""
    import operator

    b = _budget()
    b.step()
    lim = b.limits
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                size = len(seq) * max(n, 0)
                cap = lim.max_value_chars if isinstance(seq, str) else lim.max_items
                if size > cap:
                    raise _TemplateBoundError(f"chat template would build a sequence of {size} items/characters "
                                              f"with '*' (limit {cap})")
        if isinstance(left, int) and isinstance(right, int) and \
                left.bit_length() + right.bit_length() > lim.max_int_bits:
            raise _TemplateBoundError(f"chat template would build an integer of more than {lim.max_int_bits} bits")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 and \
                (abs(left).bit_length() - 1) * right > lim.max_int_bits:
            raise _TemplateBoundError(f"chat template would build an integer of more than {lim.max_int_bits} bits "
                                      "with '**'")
        if isinstance(left, int) and isinstance(right, int) and right > lim.max_int_bits and abs(left) > 1:
            raise _TemplateBoundError(f"chat template would build an integer of more than {lim.max_int_bits} bits "
                                      "with '**'")
    elif op == "%" and isinstance(left, str):
        _check_printf(left, right)
    table = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
             "//": operator.floordiv, "**": operator.pow, "%": operator.mod}
    return b.value(table[op](left, right))


# filters whose result is text made from the whole value: the value's text form is bounded first
_TEXT_FILTERS = frozenset({"string", "join", "tojson", "pprint", "format", "center", "indent", "truncate",
                           "wordwrap", "replace", "urlize", "title", "upper", "lower", "trim", "striptags",
                           "capitalize", "escape", "e", "forceescape", "urlencode", "xmlattr", "wordcount",
                           "safe", "list", "unique", "sort", "reverse"})


def _filter_prechecks(name: str, args: tuple, kwargs: dict) -> None:
    """Arguments that would make a filter build far more than its inputs (args[0] is the value;
    pass_context/eval_context filters get their context first, stripped by the caller)."""
    def arg(i, key, default=None):
        if key in kwargs:
            return kwargs[key]
        return args[i] if len(args) > i else default

    value = arg(0, "value")
    if name in _TEXT_FILTERS and not isinstance(value, str):
        _check_text(value, f"the value of filter {name!r}")
    if name == "indent":
        width = arg(1, "width", 4)
        if isinstance(width, str):
            _check_width(len(width), "indent")
        else:
            _check_width(width, "indent")
        lines = str(value).count("\n") + 1 if value is not None else 1
        w = len(width) if isinstance(width, str) else (width if isinstance(width, int) else 0)
        _check_text_size(lines * abs(w) + (len(value) if isinstance(value, str) else 0), "indent")
    elif name == "center":
        _check_width(arg(1, "width", 80), "center width")
    elif name == "truncate":
        _check_width(arg(1, "length", 255), "truncate length")
    elif name == "wordwrap":
        _check_width(arg(1, "width", 79), "wordwrap width")
    elif name == "tojson":
        indent = arg(1, "indent", None)
        if isinstance(indent, str):
            indent = len(indent)
        _check_width(indent, "tojson indent")
        if isinstance(indent, int) and indent > 0:
            size = _text_size(value, _budget().limits.max_value_chars)
            _check_text_size(size * (1 + min(indent, 64)), "tojson")
    elif name == "format":
        fmt = value if isinstance(value, str) else str(value)
        _check_printf(fmt, tuple(args[1:]) if not kwargs else kwargs)
    elif name == "join":
        sep = arg(1, "d", "")
        seq = value
        if isinstance(seq, (list, tuple)):
            _check_text_size(_text_size(seq, _budget().limits.max_value_chars) + len(str(sep)) * len(seq), "join")
        elif isinstance(seq, dict):
            _check_text_size(_text_size(list(seq), _budget().limits.max_value_chars) + len(str(sep)) * len(seq),
                             "join")
    elif name == "replace":
        s, old, new = value, arg(1, "old", ""), arg(2, "new", "")
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            count = arg(3, "count", None)
            hits = s.count(old) if old else len(s) + 1
            if isinstance(count, int) and count >= 0:
                hits = min(hits, count)
            _check_text_size(len(s) + hits * len(new), "replace")
    elif name in ("slice", "batch"):
        n = arg(1, "slices" if name == "slice" else "linecount", 1)
        if isinstance(n, int) and n > _budget().limits.max_range:
            raise _TemplateBoundError(f"chat template asked filter {name!r} for {n} parts "
                                      f"(limit {_budget().limits.max_range})")


def _check_text_size(n: int, what: str) -> None:
    lim = _budget().limits.max_value_chars
    if n > lim:
        raise _TemplateBoundError(f"chat template would build text of {n} characters with {what} (limit {lim})")


def _materialize(value):
    """An iterator (range, generator, dict view...) as a list, at most max_items long, so that its
    text can be bounded before a filter joins or prints it."""
    if isinstance(value, (str, list, tuple, dict)) or not hasattr(value, "__iter__") or \
            type(value).__module__.startswith("jinja2"):
        return value
    import itertools

    cap = _budget().limits.max_items
    items = list(itertools.islice(value, cap + 1))
    if len(items) > cap:
        raise _TemplateBoundError(f"chat template built a sequence of more than {cap} items")
    return _budget().value(items)


def _guard_filter(name: str, func):
    from jinja2.utils import _PassArg

    skip = 1 if _PassArg.from_obj(func) is not None else 0

    @functools.wraps(func)
    def guarded(*args, **kwargs):
        b = _budget()
        b.step()
        if name in _TEXT_FILTERS and len(args) > skip:
            args = (*args[:skip], _materialize(args[skip]), *args[skip + 1:])
        _filter_prechecks(name, args[skip:], kwargs)
        return b.value(func(*args, **kwargs))
    return guarded


# str methods that can build far more than their inputs, and what bounds them
_STR_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


def _check_str_method(obj, args, kwargs) -> tuple:
    """Check a str method call before it runs; the arguments to call it with (an iterator given to
    str.join comes back as a list)."""
    name = getattr(obj, "__name__", "")
    owner = getattr(obj, "__self__", None)
    if not isinstance(owner, str):
        return args
    if name in _STR_WIDTH_METHODS and args:
        _check_width(args[0], f"str.{name} width")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            _check_text_size(len(owner) + owner.count("\t") * max(size, 0), "str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = owner.count(args[0]) if args[0] else len(owner) + 1
        _check_text_size(len(owner) + hits * len(args[1]), "str.replace")
    elif name == "join" and args:
        seq = args[0]
        if not isinstance(seq, (str, list, tuple)):
            seq = _materialize(seq)
            args = (seq, *args[1:])
        if isinstance(seq, (list, tuple)):
            _check_text_size(_text_size(seq, _budget().limits.max_value_chars) + len(owner) * len(seq), "str.join")
    return args


def _raise_exception(message):
    text = message if isinstance(message, str) else repr(message) if _text_size(message, 10_000) <= 10_000 \
        else f"<{type(message).__name__}>"
    raise ChatTemplateError(f"chat template raised: {text[:10_000]}")


def _strftime_now(fmt) -> str:
    if not isinstance(fmt, str):
        raise ChatTemplateError(f"strftime_now needs a format string, got {type(fmt).__name__}")
    _check_text_size(len(fmt) * 16, "strftime_now")
    return datetime.datetime.now().strftime(fmt)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _bounded_range(*args):
    b = _budget()
    b.step()
    for a in args:
        if isinstance(a, bool) or not isinstance(a, int):
            raise ChatTemplateError(f"range() needs integers, got {type(a).__name__}")
    r = range(*args)
    if len(r) > b.limits.max_range:
        raise _TemplateBoundError(f"chat template asked for range() of {len(r)} items (limit {b.limits.max_range})")
    return r


# ---- the AST pass: hooks where jinja2's sandbox has none ----

def _instrument(tree):
    """Route what the sandbox does not intercept through budget filters: every piece of output (text
    and `{{ }}`), every for loop's items, every `~` concatenation and every slice."""
    from jinja2 import nodes

    def hook(name, node):
        return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)

    for out in tree.find_all(nodes.Output):
        out.nodes = [hook("_oxl_out", nodes.Const(n.data, lineno=n.lineno) if isinstance(n, nodes.TemplateData)
                          else n) for n in out.nodes]
    for loop in tree.find_all(nodes.For):
        loop.iter = hook("_oxl_iter", loop.iter)
    # Concat and slices: replace the node in its parent (collected first: the tree changes as we go)
    targets = [n for n in tree.find_all((nodes.Concat, nodes.Getitem))
               if isinstance(n, nodes.Concat) or isinstance(n.arg, nodes.Slice)]
    targets_ids = {id(n) for n in targets}
    for parent in [tree, *tree.find_all(nodes.Node)]:
        for field in parent.fields:
            child = getattr(parent, field, None)
            if isinstance(child, nodes.Node) and id(child) in targets_ids:
                setattr(parent, field, hook("_oxl_value", child))
            elif isinstance(child, list):
                setattr(parent, field, [hook("_oxl_value", c) if isinstance(c, nodes.Node) and id(c) in targets_ids
                                        else c for c in child])
    for concat in targets:
        if isinstance(concat, nodes.Concat):
            concat.nodes = [hook("_oxl_text", n) for n in concat.nodes]
    return tree


def _hook_filters():
    from jinja2 import pass_context

    @pass_context
    def out(_ctx, value):
        b = _budget()
        if isinstance(value, str):
            text = value
        else:
            _check_text(value, "output")
            text = str(value)
        b.spend_output(len(text))
        return text

    @pass_context
    def text(_ctx, value):
        if not isinstance(value, str):
            _check_text(value, "'~'")
        return value

    @pass_context
    def iterate(_ctx, iterable):
        b = _budget()
        b.step()
        for item in iterable:
            b.step()
            yield item

    @pass_context
    def value(_ctx, v):
        return _budget().value(v)

    return {"_oxl_out": out, "_oxl_text": text, "_oxl_iter": iterate, "_oxl_value": value}


def _strict_sandbox_class():
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter, SecurityError

    class BoundedFormatter(SandboxedFormatter):
        def format_field(self, value, format_spec):
            for n in _FORMAT_SPEC_NUMBERS.findall(format_spec):
                _check_width(int(n), "str.format width")
            if not isinstance(value, str):
                _check_text(value, "str.format")
            return _budget().value(super().format_field(value, format_spec))

    class StrictSandbox(ImmutableSandboxedEnvironment):
        """jinja2's immutable sandbox, bounded (see the module docstring). Unsafe attribute access
        raises at once (jinja2's default yields an Undefined that prints as "")."""

        intercepted_binops = frozenset(["+", "-", "*", "/", "//", "%", "**"])

        def unsafe_undefined(self, obj, attribute):
            raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

        def _parse(self, source, name, filename):
            return _instrument(super()._parse(source, name, filename))

        def call_binop(self, context, operator, left, right):
            return _guarded_binop(operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
            b = _budget()
            b.step()
            args = _check_str_method(__obj, args, kwargs)
            return b.value(super().call(__context, __obj, *args, **kwargs))

        def wrap_str_format(self, value):
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            f_self = value.__self__
            formatter = BoundedFormatter(self)

            def bounded_format(*args, **kwargs):
                if value.__name__ == "format_map":
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    args, kwargs = (), args[0]
                return _budget().value(str(formatter.vformat(f_self, args, kwargs)))
            return bounded_format

    return StrictSandbox


def make_environment(sandboxed: bool = True):
    """The jinja2 environment chat templates render in (sandboxed=False only for comparisons in tests)."""
    import jinja2
    import jinja2.ext

    cls = _strict_sandbox_class() if sandboxed else jinja2.Environment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols],
              undefined=jinja2.Undefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    if sandboxed:
        env.globals.pop("lipsum", None)     # lipsum(10**9) never returns; no chat template uses it
        env.globals["range"] = _bounded_range
        env.filters = {name: _guard_filter(name, f) for name, f in env.filters.items()}
        env.filters.update(_hook_filters())
    return env


# ---- compile-time bounds ----

_BLOCK_OPENERS = frozenset({"for", "if", "macro", "call", "filter", "with", "block", "autoescape", "trans", "raw"})
_BRACKETS_OPEN, _BRACKETS_CLOSE = frozenset("([{"), frozenset(")]}")
_MAX_NESTED_LOOPS = 16      # CPython refuses more than 20 statically nested blocks


def _check_structure(env, source: str, limits: RenderLimits) -> None:
    """Nesting depth from the token stream (the lexer is not recursive; the parser and Python's
    compiler are), so a too-deep template is refused with its line instead of a RecursionError."""
    if len(source) > limits.max_source_chars:
        raise _TemplateBoundError(f"chat template is {len(source)} characters long "
                                  f"(limit {limits.max_source_chars})")
    blocks: list[str] = []
    brackets = 0
    in_block, block_tokens, block_line = False, [], 0
    for lineno, kind, value in env.lex(source):
        if kind == "block_begin":
            in_block, block_tokens, block_line = True, [], lineno
        elif kind == "block_end":
            in_block = False
            if block_tokens:
                word = block_tokens[0]
                if word in _BLOCK_OPENERS or (word == "set" and "=" not in block_tokens):
                    blocks.append(word)
                elif word.startswith("end") and blocks:
                    blocks.pop()
        elif in_block and kind in ("name", "operator", "assign"):
            block_tokens.append(value if kind != "assign" else "=")
        if kind == "operator" and value in _BRACKETS_OPEN:
            brackets += 1
        elif kind == "operator" and value in _BRACKETS_CLOSE:
            brackets = max(0, brackets - 1)
        depth = len(blocks) + brackets
        if depth > limits.max_nesting:
            raise _TemplateBoundError(f"chat template nests blocks and brackets {depth} deep "
                                      f"(limit {limits.max_nesting}) (line {block_line if kind == 'block_end' else lineno})")
        if blocks.count("for") > _MAX_NESTED_LOOPS:
            raise _TemplateBoundError(f"chat template nests more than {_MAX_NESTED_LOOPS} for loops (line {lineno})")


def _template_line(exc: BaseException) -> int | None:
    """The template line an exception was raised at: jinja2 rewrites tracebacks so that template
    frames carry the template's file name ("<template>") and line."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _python_line_to_template(env, source: str, python_line) -> int | None:
    """The template line of a line of the Python code jinja2 generated (its `debug_info` maps them),
    for errors Python's compiler raises, such as `{% break %}` outside a loop."""
    if not isinstance(python_line, int):
        return None
    try:
        code = env.compile(source, raw=True)
    except Exception:   # noqa: BLE001 (the same error again: no line to give)
        return None
    m = re.search(r"^debug_info = '([0-9=&]*)'", code, re.M)
    best = None
    for pair in (m.group(1).split("&") if m and m.group(1) else ()):
        tpl, py = (int(x) for x in pair.split("="))
        if py <= python_line:
            best = tpl
    return best


def _with_line(message: str, line: int | None) -> str:
    return message if line is None or "(line " in message else f"{message} (line {line})"


def _check_messages(messages) -> list:
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ChatTemplateError(f"messages[{i}] must be a dict, got {type(msg).__name__}")
        if "role" not in msg:
            raise ChatTemplateError(f"messages[{i}] has no 'role'")
    return list(messages)


class ChatTemplate:
    """One chat template; compiled on first use. `limits` bounds its compile and every render."""

    def __init__(self, source: str, limits: RenderLimits = DEFAULT_LIMITS):
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError(f"a chat template must be a non-empty string, got {type(source).__name__}")
        if not isinstance(limits, RenderLimits):
            raise ChatTemplateError(f"limits must be a RenderLimits, got {type(limits).__name__}")
        self.source = source
        self.limits = limits
        self._template = None

    def __getstate__(self):   # the compiled template holds a sandbox class: pickle the source only
        return {"source": self.source, "limits": self.limits, "_template": None}

    def __setstate__(self, state):
        state.setdefault("limits", DEFAULT_LIMITS)
        self.__dict__.update(state)

    def _compiled(self):
        if self._template is None:
            import jinja2

            env = make_environment()
            token = _current.set(_Budget(self.limits))
            try:
                _check_structure(env, self.source, self.limits)
                self._template = env.from_string(self.source)
            except ChatTemplateError:
                raise
            except jinja2.TemplateSyntaxError as exc:
                raise ChatTemplateError(f"chat template has a syntax error (line {exc.lineno}): {exc.message}") \
                    from None
            except (Exception, RecursionError) as exc:   # the parser or Python's compiler gave up
                line = _python_line_to_template(env, self.source, getattr(exc, "lineno", None))
                text = exc.msg if isinstance(exc, SyntaxError) else str(exc)[:200]   # not Python's line
                raise ChatTemplateError(_with_line(f"chat template does not compile: {type(exc).__name__}: {text}",
                                                   line)) from None
            finally:
                _current.reset(token)
        return self._template

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **kwargs) -> str:
        from jinja2.sandbox import SecurityError

        template = self._compiled()
        context = dict(kwargs)
        context.update(messages=_check_messages(messages), add_generation_prompt=bool(add_generation_prompt))
        if tools is not None:
            context["tools"] = tools
        token = _current.set(_Budget(self.limits))
        try:
            return template.render(**context)
        except ChatTemplateError as exc:
            raise type(exc)(_with_line(str(exc), _template_line(exc))) from None
        except SecurityError as exc:
            raise ChatTemplateError(_with_line(f"chat template tried to leave its sandbox: {exc}",
                                               _template_line(exc))) from None
        except (Exception, RecursionError) as exc:   # anything the template's code raised: a failed render
            message = str(exc)[:500]
            raise ChatTemplateError(_with_line(f"chat template failed to render: {type(exc).__name__}: {message}",
                                               _template_line(exc))) from None
        finally:
            _current.reset(token)
# For GGUF files that carry no template, one is picked by the turn tokens the vocabulary holds, as
# llama-cpp-python guesses a chat format. Gemma folds a system message into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' }}"
    "{{ (prefix if loop.first else '') + m['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# gpt-oss's harmony, for files without their template: the system message the model expects (its channels), a
# system prompt as developer instructions, past answers as final-channel messages; the answer is read by
# oxillama.tools.harmony
HARMONY_TEMPLATE = (
    "{{ '<|start|>system<|message|>Reasoning: medium\n\n# Valid channels: analysis, commentary, final. "
    "Channel must be included for every message.<|end|>' }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ '<|start|>developer<|message|># Instructions\n\n' + m['content'] + '<|end|>' }}"
    "{% elif m['role'] == 'assistant' %}"
    "{{ '<|start|>assistant<|channel|>final<|message|>' + m['content'] + '<|end|>' }}"
    "{% else %}{{ '<|start|>' + m['role'] + '<|message|>' + m['content'] + '<|end|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}"
)
BUILTIN_TEMPLATES = [  # (name, tokens the vocabulary must have, template)
    ("gemma", ("<start_of_turn>", "<end_of_turn>"), GEMMA_TEMPLATE),
    ("chatml", ("<|im_start|>", "<|im_end|>"), CHATML_TEMPLATE),
    ("harmony", ("<|start|>", "<|channel|>", "<|message|>", "<|end|>"), HARMONY_TEMPLATE),
]


def builtin_template(special_texts) -> tuple[str, str] | None:
    """(name, template) of the first built-in format whose turn tokens are all among `special_texts`."""
    for name, needed, source in BUILTIN_TEMPLATES:
        if all(t in special_texts for t in needed):
            return name, source
    return None
