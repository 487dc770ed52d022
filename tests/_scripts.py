# The benchmark scripts are tested as a user runs them: a fresh interpreter started from the
# checkout's root, no bytecode left in the tree, its exit status checked. One definition for
# every test module that runs one (bench/ is not an installed package).
"""`ROOT` (the checkout) and `run_script`: a Python command run there, its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args: str, timeout: float = 300) -> str:
    """`python *args` from ROOT; its stdout. Fails the test, with both outputs, unless it
    exits 0 within `timeout` seconds."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
