"""One boundary between the twins: `llamafast._engine._twins` lists every twinned name with the
module pair that defines it, and holds the pure twin, the Cython twin (or why it is missing) and the
one the package exports. Nothing else picks a twin by module name."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _recordings import load_expected, stream_recordings
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


# --- the twins read side by side: every step of both assemblers -------------------------------

# What one assembler has that the other has not, and why; every other step is in both, in the
# same order.
PURE_ONLY = {"_choices": "the Cython _fold walks the choices inline, in its hot loop"}
CYTHON_ONLY = {
    "push_into": "the fused ChatStream's C entry: a payload by address, events into its list",
    "_parse_fold": "simdjson's parse of a payload, then _fold",
    "_push_deep": "a payload nested deeper than the shared parser takes, parsed by a deeper one",
}


def _pure_steps() -> list[str]:
    """The pure Assembler's methods and properties, dunders aside, in the order it defines them."""
    return [
        name
        for name, value in vars(_twins.PURE.Assembler).items()
        if not name.startswith("__") and (callable(value) or isinstance(value, property))
    ]


def _cython_steps() -> list[str]:
    """The Cython Assembler's: its class's methods and properties, then the module's cdef
    functions that take the assembler (`Assembler self`), each in the order the source has them."""
    source = (ROOT / "src/llamafast/_engine/_assemble_c.pyx").read_text(encoding="utf-8")
    body = re.search(r"^cdef class Assembler:\n(.*?)^(?=\S)", source, re.M | re.S)
    assert body is not None
    methods = re.findall(r"^    (?:c?p?def) (?:\w+ )?(\w+)\(", body[1], re.M)
    functions = re.findall(r"^cdef [^(\n]*?(\w+)\(\s*Assembler self\b", source, re.M)
    return [name for name in methods if not name.startswith("__")] + functions


@needs_sources
def test_the_assemblers_have_the_same_steps_in_the_same_order() -> None:
    pure, cython = _pure_steps(), _cython_steps()
    assert set(PURE_ONLY) <= set(pure) and not set(PURE_ONLY) & set(cython)
    assert set(CYTHON_ONLY) <= set(cython) and not set(CYTHON_ONLY) & set(pure)
    shared = [name for name in pure if name not in PURE_ONLY]
    # The public ones as the class defines them, then the steps behind them.
    public = [name for name in shared if not name.startswith("_")]
    assert [n for n in cython if n not in CYTHON_ONLY] == public + [
        n for n in shared if n.startswith("_")
    ]


def _outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(*args))
    except Exception as err:  # the twins must agree on every error, whatever it is
        return ("error", type(err).__name__, str(err))


def _every_member(asm: Any) -> list[Any]:
    """What every public member of an assembler says now: its properties, and
    partial_arguments for every call there is and the first there is not."""
    seen = [asm.id, asm.reasoning_tokens, asm.in_reasoning, asm.is_finished]
    index = 0
    while True:
        got = _outcome(asm.partial_arguments, index)
        seen.append(got)
        if got[0] == "error":
            return seen
        index += 1


# The public members `_every_member`, push and finish compare: every one the pure twin has.
COMPARED = {"id", "reasoning_tokens", "in_reasoning", "is_finished", "partial_arguments"}
COMPARED |= {"push", "finish"}


def test_every_public_member_of_the_assembler_is_compared() -> None:
    assert {name for name in _pure_steps() if not name.startswith("_")} == COMPARED


def _tool_piece(arguments: str, **first: Any) -> str:
    call = {"index": 0, **first, "function": {**first.pop("function", {}), "arguments": arguments}}
    return json.dumps({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})


# Beside the recordings: a tool call whose arguments stop being JSON, then a payload that is not.
FAULTS = [
    _tool_piece('{"a": [1, "b', id="c", function={"name": "f"}),
    _tool_piece('", tru'),
    _tool_piece("x]}"),
    json.dumps({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    "not json",
]


def _payloads(name: str) -> list[str]:
    if name == "faults":
        return FAULTS
    return [item["data"] for item in load_expected(name)["items"] if "data" in item]


@pytest.mark.parametrize("name", [*stream_recordings(), "faults"])
def test_both_assemblers_agree_at_every_step_of_every_recording(
    c_impl: _twins.Twin, name: str
) -> None:
    payloads = _payloads(name)
    twins = [_twins.PURE.Assembler(), c_impl.Assembler()]
    for number, payload in enumerate(payloads):
        pure, cython = ([_outcome(asm.push, payload), *_every_member(asm)] for asm in twins)
        assert cython == pure, f"{name}, payload {number}"
    for capped in (False, True):
        assert _outcome(twins[1].finish, capped) == _outcome(twins[0].finish, capped)


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
