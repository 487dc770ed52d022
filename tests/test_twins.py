"""One boundary between the twins: `llamafast._engine._twins` lists every twinned name with the
module pair that defines it, and holds the pure twin, the Cython twin (or why it is missing) and the
one the package exports. Nothing else picks a twin by module name."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import llamafast
import llamafast.pure
from llamafast._engine import _twins

ROOT = Path(__file__).resolve().parent.parent
# The tests that read the package's sources (not the installed package) need the source tree;
# a wheel's test run (the tests copied beside fixtures/ and docs/, not src/) skips them.
needs_sources = pytest.mark.skipif(
    not (ROOT / "src" / "llamafast").is_dir(), reason="no source tree here (no src/ beside tests/)"
)


def test_the_public_names_are_twinned_names() -> None:
    assert set(_twins.PUBLIC) <= set(_twins.STEMS)
    assert set(_twins.PUBLIC) <= set(llamafast.__all__)
    # The rest are the transport's, internal.
    assert not (set(_twins.STEMS) - set(_twins.PUBLIC)) & set(llamafast.__all__)


@pytest.mark.parametrize("name", sorted(_twins.STEMS))
def test_the_pure_twin_of_each_name_is_its_py_module_s(name: str) -> None:
    module = importlib.import_module(f"llamafast._engine.{_twins.STEMS[name]}_py")
    assert getattr(_twins.PURE, name) is getattr(module, name)
    assert getattr(_twins.PURE, name).__module__ == module.__name__


@pytest.mark.parametrize("name", sorted(_twins.STEMS))
def test_the_cython_twin_of_each_name_is_its_c_module_s(c_impl: _twins.Twin, name: str) -> None:
    module = importlib.import_module(f"llamafast._engine.{_twins.STEMS[name]}_c")
    assert getattr(c_impl, name) is getattr(module, name)
    assert c_impl is _twins.CYTHON and c_impl.IMPLEMENTATION == "cython"


def test_cython_is_there_or_says_why() -> None:
    assert (_twins.CYTHON is None) == (_twins.CYTHON_MISSING is not None)
    assert _twins.PURE.IMPLEMENTATION == "python"


def test_the_package_exports_the_selected_twin() -> None:
    expected = _twins.CYTHON if _twins.USE_EXTENSIONS else _twins.PURE
    assert _twins.SELECTED is expected
    assert llamafast.IMPLEMENTATION == _twins.SELECTED.IMPLEMENTATION
    for name in _twins.PUBLIC:
        assert getattr(llamafast, name) is getattr(_twins.SELECTED, name), name
        assert getattr(llamafast.pure, name) is getattr(_twins.PURE, name), name


def test_a_twin_lists_every_name_and_is_read_only() -> None:
    assert [name for name, _ in _twins.PURE] == list(_twins.STEMS)
    with pytest.raises(AttributeError, match="read-only"):
        _twins.PURE.Assembler = object  # type: ignore[misc]
    assert repr(_twins.PURE) == "<llamafast twin 'python'>"


# Files exempt from the check below (none: every module reads `_twins`).
BEING_REWRITTEN: set[str] = set()
# Where the compiled modules are listed, where the choice is made, proved (in fresh
# interpreters, by module name) and checked (this file), and where each module's own constants
# are checked against `_limits`.
DECIDE = {"_extensions.py", "_twins.py", "test_selection.py", "test_twins.py", "test_limits.py"}
# `from ._sse_c import`, `llamafast._http_c`, `"_chat_c"`: a twin picked by its module's name.
PICKS = re.compile(r"""(\bimport\b.*|[."'])_(sse|assemble|chat|http)_c\b""")


@needs_sources
def test_no_other_module_picks_a_twin_by_module_name() -> None:
    # The Cython twin's own modules cimport each other, and a test of one module's internals
    # (its C-level helpers, a leak check in a child interpreter) names that module: those are
    # not a choice between the twins. The lines allowed say so with "internals".
    found = []
    for top in ("src/llamafast", "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in BEING_REWRITTEN or path.name in DECIDE:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PICKS.search(line) and "internals" not in line:
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "read llamafast._engine._twins instead:\n" + "\n".join(found)


@needs_sources
def test_no_cython_module_imports_a_pure_twin() -> None:
    # What both twins need (the head's rules, the reader contract, the JSON readers) lives in
    # modules neither twin owns, so each twin stands on its own.
    found = []
    for path in sorted((ROOT / "src/llamafast/_engine").glob("_*_c.p[yx][xd]")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bc?import\b", line) and re.search(r"\b_\w+_py\b", line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


# The verbatim C of `cdef extern from *:`, the string Cython pastes into the generated source.
C_BLOCK = re.compile(r'^cdef extern from \*:\n    """\n(.*?)^    """', re.M | re.S)


@needs_sources
def test_no_long_c_block_is_a_string_inside_a_pyx() -> None:
    # C and C++ helpers of more than a few lines live in headers beside the .pyx (shipped in
    # the sdist, found by the build), where a C reader and a C tool see them as C.
    found = []
    for path in sorted((ROOT / "src/llamafast/_engine").glob("*.pyx")):
        text = path.read_text(encoding="utf-8")
        for block in C_BLOCK.findall(text):
            if block.count("\n") > 40:
                found.append(f"{path.name}: a {block.count(chr(10))}-line C block")
    assert not found, "\n".join(found)


# --- the twins read side by side: the assembler's steps ----------------------------------------

STEPS = ["_fold", "_delta", "_tool_calls", "_commit"]


@needs_sources
def test_the_pure_assembler_has_the_cython_assembler_s_steps_in_its_order() -> None:
    # The Cython twin's cdef functions, in the order its source defines them...
    source = (ROOT / "src/llamafast/_engine/_assemble_c.pyx").read_text(encoding="utf-8")
    defined = re.findall(r"^cdef \w+ (_\w+)\(", source, flags=re.MULTILINE)
    assert [name for name in defined if name in STEPS] == STEPS
    # ...are the pure twin's methods, in the same order.
    methods = [name for name in vars(_twins.PURE.Assembler) if name in STEPS]
    assert methods == STEPS


# --- the stubs: what both twins offer, for a type checker and for stubtest ---------------------


@needs_sources
@pytest.mark.parametrize("stem", sorted(set(_twins.STEMS.values())))
def test_each_extension_module_has_a_stub_with_its_twinned_names(stem: str) -> None:
    # .ci/stubtest.py checks each stub against both twins; here, that it is there and declares
    # every name `_twins` puts in that module pair (so a name moved to another pair moves in
    # its stub too).
    stub = ROOT / "src/llamafast/_engine" / f"{stem}_c.pyi"
    declared = {
        node.name
        for node in ast.parse(stub.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef | ast.FunctionDef)
    }
    assert {name for name, s in _twins.STEMS.items() if s == stem} <= declared
    public = importlib.import_module(f"llamafast._engine.{stem}_py").__all__
    assert ast.literal_eval(_assigned(stub, "__all__")) == public


def _assigned(stub: Path, name: str) -> str:
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == [name]:
            return ast.unparse(node.value)
    raise AssertionError(f"{stub.name} does not assign {name}")
