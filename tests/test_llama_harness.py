"""The harness that runs a real llama-server for the tests marked `llama_server`."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from _llama import stop


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM and SIGKILL are POSIX signals")
def test_a_server_that_never_ends_on_sigterm_is_killed() -> None:
    # llama-server can deadlock in its own SIGTERM handler; the run must not hang on it
    code = (
        "import signal\nimport time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint()\ntime.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()  # the handler is in place
        stop(proc, grace=0.2)
    assert proc.returncode == -signal.SIGKILL
