"""Which twin runs: the Cython one by default whenever it is built; the switch picks the pure one.

Each check runs in a fresh interpreter, since the choice is made once, at import
(multidict's tests/test_circular_imports.py::test_c_extension_preferred_by_default).
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llamafast
from llamafast._engine import _twins
from llamafast._engine._extensions import EXTENSIONS

PUBLIC_TWINS = _twins.PUBLIC


def run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "LLAMAFAST_NO_EXTENSIONS"}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def c_twin_built() -> bool:
    """Whether `_twins` finds the whole Cython twin in a fresh interpreter with no switch set."""
    return run("from llamafast._engine import _twins; print(_twins.CYTHON is not None)") == "True"


def test_the_cython_twin_is_the_default_when_it_is_built() -> None:
    if not c_twin_built():
        if os.environ.get("LLAMAFAST_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            pytest.fail("the Cython twin is not built, and LLAMAFAST_REQUIRE_EXTENSIONS is set")
        pytest.skip("the Cython twin is not built")
    out = run("import llamafast; print(llamafast.IMPLEMENTATION, llamafast.Assembler.__module__)")
    assert out == "cython llamafast._engine._assemble_c"
    # Every twinned name, the transport's too: the Cython one, from its `_c` module.
    out = run(
        "from llamafast._engine import _twins\n"
        "assert _twins.SELECTED is _twins.CYTHON, _twins.SELECTED\n"
        "print(sorted({o.__module__ for _, o in _twins.SELECTED}))"
    )
    assert out == str(sorted(f"llamafast._engine.{stem}_c" for stem in set(_twins.STEMS.values())))


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_switch_selects_the_pure_twin(value: str) -> None:
    out = run(
        "import llamafast; print(llamafast.IMPLEMENTATION, llamafast.Assembler.__module__)",
        LLAMAFAST_NO_EXTENSIONS=value,
    )
    assert out == "python llamafast._engine._assemble_py"


def test_switch_set_to_zero_or_empty_does_not_force_pure() -> None:
    for value in ("0", ""):
        out = run(
            "import llamafast; print(llamafast.IMPLEMENTATION)", LLAMAFAST_NO_EXTENSIONS=value
        )
        assert out == ("cython" if c_twin_built() else "python")


def test_pure_is_always_importable_and_has_the_same_names() -> None:
    for name in PUBLIC_TWINS:
        assert hasattr(llamafast.pure, name), name
        assert getattr(llamafast.pure, name).__module__.endswith("_py"), name
    assert llamafast.pure.IMPLEMENTATION == "python"


def test_implementation_names_the_running_twin() -> None:
    expected = "cython" if llamafast.Assembler.__module__.endswith("_c") else "python"
    assert llamafast.IMPLEMENTATION == expected


def _pure_copy(tmp_path: Path, broken: str | None = None) -> Path:
    """The package's Python files alone (as the py3-none-any wheel has them); with `broken`, the
    file of that extension module for this interpreter, which does not import (a damaged binary
    install)."""
    pkg = tmp_path / "llamafast"
    shutil.copytree(
        Path(llamafast.__file__).parent, pkg, ignore=shutil.ignore_patterns("*.so", "*.pyd")
    )
    if broken:
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        (pkg / "_engine" / f"{broken}{suffix}").write_bytes(b"not a shared library")
    return tmp_path


def _import_from(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import llamafast; print(llamafast.IMPLEMENTATION)"],
        env={**os.environ, "PYTHONPATH": str(root), "LLAMAFAST_NO_EXTENSIONS": ""},
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )


def test_a_pure_install_is_silent(tmp_path: Path) -> None:
    # The pure wheel is a choice (the build fails rather than drop the extensions): no warning.
    done = _import_from(_pure_copy(tmp_path))
    assert (done.stdout.strip(), done.stderr) == ("python", "")


def test_extensions_that_do_not_import_say_so_at_import(tmp_path: Path) -> None:
    done = _import_from(_pure_copy(tmp_path, broken="_sse_c"))
    assert done.stdout.strip() == "python"
    assert "RuntimeWarning" in done.stderr
    assert "installed but do not import" in done.stderr and "_sse_c" in done.stderr


@pytest.mark.parametrize("name", EXTENSIONS)
def test_any_extension_that_does_not_import_says_so(tmp_path: Path, name: str) -> None:
    # Every compiled module of the one list, the embeddings decoder's (_vectors_c) too: none
    # falls back to the pure twin silently.
    done = _import_from(_pure_copy(tmp_path, broken=name))
    assert done.stdout.strip() == "python"
    assert "RuntimeWarning" in done.stderr
    assert "installed but do not import" in done.stderr
