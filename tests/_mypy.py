# The tests that type-check a user's code run mypy the one way written here: strict, once over all
# their files, its cache in the test's own folder, against the llamafast under test (the installed
# package, or this source tree's src/ shown to mypy). mypy is in the [dev] extra, not the [test]
# one: without it those tests skip, unless LLAMAFAST_REQUIRE_MYPY is set (.ci/run sets it in the
# stage that installs mypy beside the wheel), where a missing mypy fails them.
"""`strict_mypy`: one `mypy --strict` run over a user's files, against the llamafast under test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import llamafast


def strict_mypy(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict over `files` (run in `tmp_path`, its cache there); skips when mypy is not
    installed and LLAMAFAST_REQUIRE_MYPY is not set."""
    if importlib.util.find_spec("mypy") is None:
        if os.environ.get("LLAMAFAST_REQUIRE_MYPY", "") not in ("", "0"):
            pytest.fail("LLAMAFAST_REQUIRE_MYPY is set, but mypy is not installed")
        pytest.skip("mypy is not installed (it is in the [dev] extra)")
    env = dict(os.environ)
    package_root = Path(llamafast.__file__).resolve().parent.parent
    if "site-packages" not in package_root.parts:  # a source checkout: show mypy where it is
        env["MYPYPATH"] = str(package_root)
    cache = str(tmp_path / "cache")
    command = [sys.executable, "-m", "mypy", "--strict", "--no-pretty", "--no-error-summary"]
    return subprocess.run(
        [*command, "--cache-dir", cache, *map(str, files)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
