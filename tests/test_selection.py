"""Which twin runs: the Cython one by default whenever it is built; the switch picks the pure one.

Each check runs in a fresh interpreter, since the choice is made once, at import
(multidict's tests/test_circular_imports.py::test_c_extension_preferred_by_default).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llamafast

PUBLIC_TWINS = [
    "Assembler",
    "ChatStream",
    "AsyncChatStream",
    "Events",
    "SseDecoder",
    "aiter_chat",
    "aiter_events",
    "iter_events",
]


def run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "LLAMAFAST_NO_EXTENSIONS"}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def c_twin_built() -> bool:
    probe = "import llamafast._sse_c, llamafast._assemble_c, llamafast._chat_c"
    env = {k: v for k, v in os.environ.items() if k != "LLAMAFAST_NO_EXTENSIONS"}
    return (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    )


def test_the_cython_twin_is_the_default_when_it_is_built() -> None:
    if not c_twin_built():
        if os.environ.get("LLAMAFAST_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            pytest.fail("the Cython twin is not built, and LLAMAFAST_REQUIRE_EXTENSIONS is set")
        pytest.skip("the Cython twin is not built")
    out = run("import llamafast; print(llamafast.IMPLEMENTATION, llamafast.Assembler.__module__)")
    assert out == "cython llamafast._assemble_c"


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_switch_selects_the_pure_twin(value: str) -> None:
    out = run(
        "import llamafast; print(llamafast.IMPLEMENTATION, llamafast.Assembler.__module__)",
        LLAMAFAST_NO_EXTENSIONS=value,
    )
    assert out == "python llamafast._assemble_py"


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


def _pure_copy(tmp_path: Path, failed: str | None) -> Path:
    """The package's Python files alone (as an install without a compiler has them)."""
    pkg = tmp_path / "llamafast"
    shutil.copytree(
        Path(llamafast.__file__).parent, pkg, ignore=shutil.ignore_patterns("*.so", "*.pyd")
    )
    (pkg / "_build_failed.txt").unlink(missing_ok=True)
    if failed is not None:
        (pkg / "_build_failed.txt").write_text(failed)
    return tmp_path


def test_an_install_that_could_not_compile_says_so_at_import(tmp_path: Path) -> None:
    # No compiler gives a working pure install, with a warning: pip hides the build's
    # own output, so setup.py leaves a note that the import turns into a RuntimeWarning.
    root = _pure_copy(tmp_path, "CompileError: command 'g++' failed")
    done = subprocess.run(
        [sys.executable, "-c", "import llamafast; print(llamafast.IMPLEMENTATION)"],
        env={**os.environ, "PYTHONPATH": str(root), "LLAMAFAST_NO_EXTENSIONS": ""},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert done.stdout.strip() == "python"
    assert "RuntimeWarning" in done.stderr
    assert "could not be built" in done.stderr and "g++" in done.stderr


def test_a_pure_install_by_choice_is_silent(tmp_path: Path) -> None:
    root = _pure_copy(tmp_path, None)
    done = subprocess.run(
        [sys.executable, "-c", "import llamafast; print(llamafast.IMPLEMENTATION)"],
        env={**os.environ, "PYTHONPATH": str(root), "LLAMAFAST_NO_EXTENSIONS": ""},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert (done.stdout.strip(), done.stderr) == ("python", "")
