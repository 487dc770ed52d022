"""The house's shape (docs/architecture.md): rooms that import only the rooms below them, modules
a reader can hold in mind, functions that do one thing.

Read from the installed package's .py files (a wheel has them too), so these hold for what users
get as for the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import llamafast

PACKAGE = Path(llamafast.__file__).resolve().parent

# The rooms, lowest first; a module may import its own room and the rooms before it, never one
# after it. The ground floor is the package's own flat modules (values, errors, settings,
# build_body); the top (the package, `pure`, `__main__`) may import any room.
ROOMS = ["ground", "_engine", "_recordings", "_core", "_client", "_cli", "top"]
TOP = {"__init__", "pure", "__main__", "otel"}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
# The engines' hot loops may stay long: one loop over the bytes or characters, its states named
# in a comment at its head (docs/architecture.md, "Where each kind of rule lives").
HOT_LOOPS = {
    "_engine/_assemble_py.py": {"_fold"},
    "_partial_json.py": {"_run"},
    "_engine/_sse_py.py": {"_feed"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _room(dotted: str) -> str:
    """The room of `llamafast.x.y` (a package's module or the package itself)."""
    parts = dotted.split(".")[1:]
    if not parts or parts[0] in TOP:
        return "top"
    return parts[0] if parts[0] in ROOMS else "ground"


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """The package modules `path` imports (absolute or relative, anywhere in it)."""
    here = _dotted(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # `from .. import _twins` imports a module of that package; name it.
            found.update(
                [f"{module}.{a.name}" for a in node.names] if not node.module else [module]
            )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "llamafast" or m.startswith("llamafast.")}


def test_every_room_imports_only_itself_and_the_rooms_below() -> None:
    upward = []
    for path in _modules():
        room = _room(_dotted(path))
        for module in sorted(_imported(path)):
            other = _room(module)
            if room == "_cli" and module == "llamafast":
                continue  # the command line is a user of the public names, as any program is
            if ROOMS.index(other) > ROOMS.index(room):
                upward.append(f"{_name(path)} ({room}) imports {module} ({other})")
    assert not upward, "\n".join(upward)


def test_the_rooms_are_found() -> None:
    # The check above means nothing if the rooms moved and every module fell to the ground floor.
    rooms = {_room(_dotted(p)) for p in _modules()}
    assert rooms == set(ROOMS)


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    # The engines' .pyx (not installed) are exempt; every Python module is held to it.
    long = [
        f"{_name(p)}: {n} lines"
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long)


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno
    ]


def test_no_function_does_more_than_one_screen_of_work() -> None:
    long = [
        f"{_name(p)}: {name} is {n} lines"
        for p in _modules()
        for name, n in _functions(p)
        if n > MAX_FUNCTION_LINES and name not in HOT_LOOPS.get(_name(p), ())
    ]
    assert not long, "\n".join(long)


@pytest.mark.parametrize("module", sorted(HOT_LOOPS))
def test_a_long_hot_loop_names_its_states(module: str) -> None:
    # A hot loop allowed past the bound is long for a reason the comment at its head gives.
    path = PACKAGE / module
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in HOT_LOOPS[module]:
                head = "\n".join(lines[node.lineno - 9 : node.lineno + 12]).lower()
                assert "state" in head, f"{module}: {node.name} has no comment naming its states"
