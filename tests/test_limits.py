"""The limits both twins enforce are defined once, in `llamafast._limits`: each twin's module
reads them from there (the Cython twin's compile-time copies equal them), and the package's
modules import each other without a cycle."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from llamafast import _limits
from llamafast._engine import _twins

SRC = Path(_limits.__file__).resolve().parent

# (module, name there, name in _limits): where each twin reads a shared limit.
READS = [
    ("llamafast._engine._sse_py", "MAX_LINE", "MAX_LINE"),
    ("llamafast._engine._sse_py", "READ_SIZE", "READ_SIZE"),
    ("llamafast._engine._sse_py", "SHOW_BYTES", "SHOW_BYTES"),
    ("llamafast._engine._assemble_py", "MAX_DEPTH", "MAX_DEPTH"),
    ("llamafast._strict_json", "MAX_DEPTH", "MAX_DEPTH"),
    ("llamafast._partial_json", "MAX_DEPTH", "MAX_DEPTH"),
    ("llamafast._engine._http_py", "BUFFER", "BUFFER"),
    ("llamafast._engine._http_py", "BACKLOG", "BACKLOG"),
]
C_READS = [
    ("llamafast._engine._sse_c", "MAX_LINE", "MAX_LINE"),
    ("llamafast._engine._chat_c", "MAX_LINE", "MAX_LINE"),
    ("llamafast._engine._http_c", "BUFFER", "BUFFER"),
    ("llamafast._engine._http_c", "BACKLOG", "BACKLOG"),
]


@pytest.mark.parametrize(("module", "name", "limit"), READS)
def test_the_pure_twin_reads_each_limit_from_limits(module: str, name: str, limit: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(_limits, limit)


@pytest.mark.parametrize(("module", "name", "limit"), C_READS)
def test_the_cython_twin_reads_each_limit_from_limits(
    c_impl: _twins.Twin, module: str, name: str, limit: str
) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(_limits, limit)


def test_the_cython_read_size_is_the_limit(c_impl: _twins.Twin) -> None:
    # A C constant (it sizes buffers at compile time): equal, since it cannot be the same object.
    sse_c = importlib.import_module("llamafast._engine._sse_c")
    assert sse_c.READ_SIZE == _limits.READ_SIZE


@pytest.mark.parametrize("name", ["SseDecoder", "Events", "iter_events", "aiter_events"])
def test_the_default_max_line_is_the_limit(name: str) -> None:
    obj = getattr(_twins.PURE, name)
    params = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
    assert params["max_line"].default == _limits.MAX_LINE == 1 << 20


def test_the_guard_errors_are_defined_once() -> None:
    from llamafast import _errors
    from llamafast._engine import _assemble_py, _sse_py

    assert _sse_py.busy_error is _errors.busy_error
    assert _sse_py.uninitialised_error is _errors.uninitialised_error
    assert _assemble_py.busy_error is _errors.assembler_busy_error


def _module(path: Path) -> str:
    """The dotted name of the package's module at `path`."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports, anywhere in it (a function-level import too)."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            if node.module:
                base = f"{base}.{node.module}"
            for alias in node.names:  # `from .pkg import mod` imports the module pkg.mod
                name = f"{base}.{alias.name}"
                found.add(name if name in modules else base)
    return found & modules


def test_no_import_cycle_between_the_package_s_modules() -> None:
    # A cycle (the values importing the assembler's parser inside a method, the assembler
    # importing the values) makes import order matter and hides a dependency.
    paths = sorted(SRC.rglob("*.py"))
    modules = {_module(p) for p in paths}
    graph = {_module(p): _imports(p, modules) - {_module(p)} for p in paths}
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for dep in graph.get(node, ()):
                if dep == start:
                    cycles.append(" -> ".join([*path, dep]))
                elif dep not in path:
                    stack.append((dep, [*path, dep]))
    assert not cycles, cycles
