"""The package's import graph (issue 28): imports only point down, so no module-level import circle
anywhere in oxillama, and runtime/ states its dependencies at module top (a function-local import
there hid the engine -> scheduler -> engine circle)."""
from __future__ import annotations

import ast
from pathlib import Path

import oxillama

PACKAGE = Path(oxillama.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path | None]:
    """Every module of the package: name -> source (None for a compiled one)."""
    mods: dict[str, Path | None] = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    for p in PACKAGE.rglob("*.pyx"):
        mods.setdefault(_module_name(p), None)
    return mods


def _module_level(body: list[ast.stmt]):
    """The statements run when the module is imported: not function bodies, not `if TYPE_CHECKING`."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _module_level(inner)


def _imports(name: str, path: Path, mods) -> set[str]:
    """The package's modules that importing `name` imports directly."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in _module_level(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:   # `from pkg import sub` imports the submodule, else pkg itself
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
    return {m for m in out if m in mods and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_the_package():
    mods = _modules()
    graph = {name: (_imports(name, path, mods) if path else set()) for name, path in mods.items()}
    assert len(graph) > 50 and graph["oxillama.runtime.engine"] >= {"oxillama.runtime.model",
                                                                    "oxillama.runtime.session"}
    assert _cycles(graph) == []


def test_runtime_imports_the_package_at_module_top():
    local = []
    for path in sorted((PACKAGE / "runtime").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local += [f"{path.name}:{n.lineno} {ast.unparse(n)}" for n in ast.walk(fn)
                          if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("oxillama"))]
    assert local == []
