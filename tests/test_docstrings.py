"""Every public name documents itself: help() on any name in `llamafast.__all__` says what it is.

Classes and functions carry their own docstring (a dataclass without one would show only its
generated signature, an enum nothing). The values that cannot carry one (`DONE`,
`IMPLEMENTATION`, the type aliases) have a string right after their assignment, where editors
and documentation tools look for it. Every field of a public dataclass is named in its class's
docstring, and for `Limits` and `InferConfig` the explanation of each field, kept once in the
field's `doc` metadata, is in the docstring help() shows. Comments and docstrings cite only
documents in the repository.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import pydoc
import re
from pathlib import Path
from typing import Any

import pytest

import llamafast
import llamafast.pure
from llamafast import Config, InferConfig, Limits
from llamafast._engine import _twins

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(llamafast.__file__).resolve().parent  # the installed package's .py files

PUBLIC = sorted(
    {(mod.__name__, name) for mod in (llamafast, llamafast.pure) for name in mod.__all__}
)


def _words(text: str) -> str:
    """`text` with every run of white space (and help()'s `|` margin) as one space."""
    return " ".join(text.replace("|", " ").split())


def _attribute_docstrings() -> dict[str, str]:
    """Module-level `NAME = value` (or `NAME: T = value`) followed by a string, in the package."""
    found: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for stmt, nxt in itertools.pairwise(body):
            targets = (
                stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            )
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                continue
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                if isinstance(nxt.value.value, str) and nxt.value.value.strip():
                    for target in targets:
                        if isinstance(target, ast.Name):
                            found[target.id] = nxt.value.value
    return found


ATTRIBUTE_DOCS = _attribute_docstrings()


def _own_doc(obj: Any) -> str | None:
    """The docstring `obj` itself was given, or None (not one inherited or generated)."""
    if isinstance(obj, type):
        doc = vars(obj).get("__doc__")
        if doc and dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            return None  # the signature dataclasses writes when the class has no docstring
        return doc
    if inspect.ismodule(obj) or callable(obj):
        return getattr(obj, "__doc__", None)
    return None


@pytest.mark.parametrize(("module", "name"), PUBLIC)
def test_every_public_name_has_a_docstring(module: str, name: str) -> None:
    obj = getattr(llamafast if module == "llamafast" else llamafast.pure, name)
    if isinstance(obj, type) or inspect.ismodule(obj) or callable(obj):
        doc = _own_doc(obj)
        assert doc and doc.strip(), f"{module}.{name} has no docstring of its own"
    else:  # a value: DONE, IMPLEMENTATION, a type alias
        assert name in ATTRIBUTE_DOCS, f"{module}.{name} has no docstring after its assignment"


PUBLIC_DATACLASSES = sorted(
    {
        obj
        for name in llamafast.__all__
        if dataclasses.is_dataclass(obj := getattr(llamafast, name)) and isinstance(obj, type)
    },
    key=lambda cls: cls.__name__,
)


def test_the_dataclasses_are_found() -> None:
    names = {cls.__name__ for cls in PUBLIC_DATACLASSES}
    assert {"Config", "InferConfig", "Limits", "ChatRequest", "Completion", "Timings"} <= names


@pytest.mark.parametrize("cls", PUBLIC_DATACLASSES, ids=lambda cls: cls.__name__)
def test_every_field_is_named_in_its_class_docstring(cls: type) -> None:
    doc = _own_doc(cls) or ""
    missing = [
        f.name for f in dataclasses.fields(cls) if not re.search(rf"\b{re.escape(f.name)}\b", doc)
    ]
    assert not missing, f"{cls.__name__}'s docstring does not name {missing}"


@pytest.mark.parametrize("cls", [Limits, InferConfig], ids=lambda cls: cls.__name__)
def test_help_shows_each_config_fields_explanation(cls: type) -> None:
    shown = _words(pydoc.plain(pydoc.render_doc(cls)))
    for f in dataclasses.fields(cls):
        text = f.metadata.get("doc", "")
        assert text.strip(), f"{cls.__name__}.{f.name} has no doc metadata"
        assert f"{f.name} ({f.default!r}): {_words(text)}" in shown, (
            f"help({cls.__name__}) does not show {f.name}'s explanation {text!r}"
        )


def test_config_names_its_tables() -> None:
    doc = _words(Config.__doc__ or "")
    assert "[infer]" in doc and "[limits]" in doc and "from_toml" in doc


# --- citations -----------------------------------------------------------------------------------

# What a citation of a document outside the repository looks like: the old reference pages, the
# notes, issue numbers and numbered rules (the docs/ pages name their rules instead).
OUTSIDE = re.compile(
    r"\bAPI\.md|\bCOMMON\.md|\b0[567]-[a-z-]+\.md|\bissue [0-9]|\brules? [0-9]|\bRule [0-9]"
)
# Files other branches are rewriting while their citations are replaced: they are fixed when
# those branches are merged, and leave this set then. None is left.
BEING_EDITED: set[str] = set()


@pytest.mark.skipif(
    not (ROOT / "src").is_dir(), reason="no source tree here (no src/ beside tests/)"
)
def test_no_comment_cites_a_document_outside_the_repository() -> None:
    found = []
    for top in ("src", "tests", "bench", "fuzz"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in {".py", ".pyx", ".pxd"}:
                continue
            rel = path.relative_to(ROOT).as_posix()
            if rel in BEING_EDITED:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "cite docs/ (e.g. 'docs/sse.md, rule BOM') instead:\n" + "\n".join(found)


def test_the_citation_pattern_finds_what_it_forbids() -> None:
    # Spelt in pieces, so that this file does not match the pattern itself.
    for line in ("see API" + ".md", "(COMMON" + ".md, Events)", "05-loopd-sse" + ".md"):
        assert OUTSIDE.search(line), line
    for line in ("issue" + " 4", "07 rule" + " 6", "rules" + " 1-8", "Rule" + " 3"):
        assert OUTSIDE.search(line), line
    for line in ("docs/sse.md, rule BOM", "a misuse", "rules of docs/client.md"):
        assert not OUTSIDE.search(line), line


# --- signatures: help() on the Cython twin shows the real parameters ---------------------------

# Every twinned name, with the Cython module and the pure module that define it.
TWINS = [(f"{stem}_c", f"{stem}_py", name) for name, stem in _twins.STEMS.items()]


def _shown(obj: Any) -> dict[str, Any]:
    """The parameters (name -> default, or `inspect.Parameter.empty`) help() shows for a Cython
    name. A cdef class's `__init__` is a slot wrapper that inspect cannot read, so for a class
    they are the signature the `embedsignature` directive writes as the docstring's first line
    (`Events(reader, max_line=MAX_LINE)`), its defaults looked up in the class's module."""
    if not isinstance(obj, type):
        return {n: p.default for n, p in inspect.signature(obj).parameters.items()}
    first = (obj.__doc__ or "").split("\n", 1)[0]
    match = re.fullmatch(rf"{obj.__name__}\((.*)\)", first)
    assert match, f"help({obj.__name__}) does not start with its signature: {first!r}"
    module = vars(importlib.import_module(obj.__module__))
    shown: dict[str, Any] = {}
    for param in filter(None, match[1].split(", ")):
        head, _, default = param.partition("=")
        name = head.split()[-1]  # a C-typed parameter reads `Py_ssize_t size`
        if not default:
            shown[name] = inspect.Parameter.empty
        else:  # a module constant (`MAX_LINE`) or a literal
            shown[name] = module[default] if default.isidentifier() else ast.literal_eval(default)
    return shown


def _pure(obj: Any) -> dict[str, Any]:
    """The pure twin's parameters: its `__init__`'s for a class (the pure Assembler's `__new__`
    takes `*args, **kwargs` only to be callable as `Assembler.__new__(Assembler)`)."""
    params = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
    return {n: p.default for n, p in params.items() if n != "self"}


@pytest.mark.parametrize(("c_module", "py_module", "name"), TWINS, ids=[t[2] for t in TWINS])
def test_the_cython_twin_shows_its_real_signature(
    c_impl: object, c_module: str, py_module: str, name: str
) -> None:
    # Without `# cython: embedsignature=True` a Cython class shows no parameters at all (help()
    # and inspect give `*args, **kwargs`): the directive writes them into the docstring.
    c_obj = getattr(importlib.import_module(f"llamafast._engine.{c_module}"), name)
    py_obj = getattr(importlib.import_module(f"llamafast._engine.{py_module}"), name)
    assert _shown(c_obj) == _pure(py_obj)
