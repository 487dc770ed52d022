# Python run as a child process, as a user runs it: a benchmark script from the checkout's root
# (no bytecode left in the tree, its exit status checked; bench/ is not an installed package),
# or the CLI as at a terminal, where Ctrl-C interrupts it. One definition for every test module.
"""`ROOT` (the checkout), `run_script` (a Python command run there, its output) and
`interruptible` (a Python child that Ctrl-C interrupts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def interruptible(*args: str, **popen: Any) -> subprocess.Popen[str]:
    """`python *args` started as a child whose SIGINT raises KeyboardInterrupt, as at a
    terminal, even when this process ignores SIGINT (a background job of a shell without job
    control: a child inherits an ignored signal, and Python then installs no handler for it)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:  # (tests run on the main thread, the one that may set a handler)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen([sys.executable, *args], text=True, **popen)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
