"""The per-request benchmark (bench/request/run.py) runs end to end with a few requests: every
cell reads each answer whole, the fake servers count the connections (the floor keeps its one
socket where the server lets it, and opens one per request where the server closes after each
streamed answer), and the tables come out. No time or CPU figure is asserted. The openai rows run
where openai is installed (CI has no openai); https where the `openssl` command is. Skipped where
bench/ is not beside tests/ (an installed wheel's test run)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "bench" / "request" / "run.py"
REQUESTS = 3
CHUNKS = 20
CLIENTS = [
    "llamafast-sync",
    "llamafast-sync-complete",
    "llamafast-async",
    "llamafast-async-complete",
    "floor",
]
# One openai row (the async one: it meets stale connections, so its tries again run too),
# so that the test stays within seconds.
OPENAI = ["openai-async"] if importlib.util.find_spec("openai") else []


@pytest.mark.skipif(not RUN.is_file(), reason="no bench/ beside tests/ (not a source tree)")
def test_the_per_request_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    schemes = ["http", "https"] if shutil.which("openssl") else ["http"]
    saved = tmp_path / "run.json"
    done = subprocess.run(
        [
            sys.executable,
            str(RUN),
            *("--requests", str(REQUESTS), "--rounds", "1", "--warm-up", "1"),
            *("--clients", ",".join(CLIENTS + OPENAI), "--schemes", ",".join(schemes)),
            *("--json", str(saved)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads(saved.read_text())["cells"]
    seen = {(c["client"], c["scheme"], c["server"]) for c in cells}
    wanted = {
        (name, scheme, server)
        for name in CLIENTS + OPENAI
        for scheme in schemes
        for server in ("keep-alive", "close-streams")
    }
    assert seen == wanted
    for cell in cells:
        [result] = cell["runs"]
        where = f"{cell['client']} over {cell['scheme']}, {cell['server']}: {result}"
        assert "error" not in result, where
        assert result["requests"] == REQUESTS and result["chunks"] == REQUESTS * CHUNKS, where
        assert result["server_requests"] >= REQUESTS, where
        # No client opens more than a connection per request (none, once it pools them).
        assert 0 <= result["connections"] <= REQUESTS, where
        if cell["client"] == "floor":  # its socket kept from the warm-up, or one per request
            kept = cell["server"] == "keep-alive"
            assert result["connections"] == (0 if kept else REQUESTS), where
            assert result["server_requests"] == REQUESTS, where
    for heading in ("keeps connections", "closes after each streamed answer", "### Ratios"):
        assert heading in done.stdout
    assert "llamafast `AsyncClient.complete(req)`" in done.stdout
    assert "https ÷ http" in done.stdout or schemes == ["http"]


def _answers_on_one_socket(extra: str, count: int) -> tuple[int, int]:
    """(streamed answers read whole, connections the server counted) for `count` chat requests
    sent in turn on one socket to a fake server started with `extra`."""
    sys.path.insert(0, str(ROOT / "bench"))
    from e2e import run, wire

    prefix = wire.Mode("bulk", 0, 1, "short").prefix
    with run.fake_server("asyncio", False, 60, [extra]) as port:
        before = run.server_stats(port)["connections"]
        request = wire.chat_request("127.0.0.1", port, prefix, 0, CHUNKS, keep_alive=True)
        whole = 0
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            for _ in range(count):
                try:
                    sock.sendall(request)
                    answer = b""
                    while not answer.endswith(wire.END) and (got := sock.recv(1 << 16)):
                        answer += got
                except OSError:
                    break
                whole += answer.endswith(wire.END)
        return whole, run.server_stats(port)["connections"] - before - 1


@pytest.mark.skipif(not RUN.is_file(), reason="no bench/ beside tests/ (not a source tree)")
def test_the_fake_server_keeps_or_closes_as_asked() -> None:
    # A proxy in front of llama-server keeps the connection; llama-server closes it after a
    # streamed answer, so the second request on it gets nothing.
    assert _answers_on_one_socket("--keep-alive", 3) == (3, 1)
    assert _answers_on_one_socket("--close-streams", 3) == (1, 1)
