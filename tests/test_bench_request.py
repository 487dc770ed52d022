"""The per-request benchmark (bench/request/run.py) runs end to end with a few requests: every
cell reads each answer whole, the fake servers count the connections (the floor keeps its one
socket where the server lets it, and opens one per request where the server closes after each
streamed answer), and the tables come out. No time or CPU figure is asserted. The openai rows run
where openai is installed (CI has no openai); https where the `openssl` command is. Skipped where
bench/ is not beside tests/ (an installed wheel's test run)."""

from __future__ import annotations

import http.client
import importlib.util
import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

from _scripts import ROOT, run_script

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
    out = run_script(
        str(RUN),
        *("--requests", str(REQUESTS), "--rounds", "1", "--warm-up", "1"),
        *("--clients", ",".join(CLIENTS + OPENAI), "--schemes", ",".join(schemes)),
        *("--json", str(saved)),
    )
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
        assert heading in out
    assert "llamafast `AsyncClient.complete(req)`" in out
    assert "https ÷ http" in out or schemes == ["http"]


def _read_stream(sock: socket.socket, end: bytes) -> bytes:
    """A streamed answer, read until its last chunk (or the connection's end)."""
    answer = b""
    while not answer.endswith(end) and (got := sock.recv(1 << 16)):
        answer += got
    return answer


def _answers_on_one_socket(extra: str, count: int, streamed: bool) -> tuple[int, int, bytes]:
    """(answers read whole, connections the server counted, the first answer's head) for
    `count` requests sent in turn on one socket to a fake server started with `extra`: streamed
    chats, or `GET /health` (a whole answer)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from e2e import run, wire

    prefix = wire.Mode("bulk", 0, 1, "short").prefix
    chat = wire.chat_request("127.0.0.1", 0, prefix, 0, CHUNKS, keep_alive=True)
    request = chat if streamed else b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    whole, heads = 0, []
    with run.fake_server("asyncio", False, 60, [extra]) as port:
        before = run.server_stats(port)["connections"]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            for _ in range(count):
                try:
                    sock.sendall(request)
                    if streamed:
                        answer = _read_stream(sock, wire.END)
                        whole += answer.endswith(wire.END)
                    else:
                        reply = http.client.HTTPResponse(sock)
                        reply.begin()
                        answer = bytes(reply.msg) + reply.read()
                        whole += reply.status == 200
                except (OSError, http.client.HTTPException):
                    break
                heads.append(answer.split(b"\r\n\r\n", 1)[0])
        return whole, run.server_stats(port)["connections"] - before - 1, heads[0]


@pytest.mark.skipif(not RUN.is_file(), reason="no bench/ beside tests/ (not a source tree)")
def test_the_fake_server_keeps_or_closes_as_asked() -> None:
    # A proxy in front of llama-server keeps the connection, no bound said.
    whole, connections, head = _answers_on_one_socket("--keep-alive", 3, streamed=True)
    assert (whole, connections) == (3, 1)
    assert b"Connection: keep-alive" in head and b"Keep-Alive:" not in head
    assert _answers_on_one_socket("--keep-alive", 120, streamed=False)[:2] == (120, 1)
    # llama-server says `Keep-Alive: timeout=5, max=100` on every answer, and closes after a
    # streamed answer all the same (the second request gets nothing), after 100 whole ones.
    whole, connections, head = _answers_on_one_socket("--close-streams", 3, streamed=True)
    assert (whole, connections) == (1, 1)
    assert b"Keep-Alive: timeout=5, max=100" in head
    whole, connections, head = _answers_on_one_socket("--close-streams", 120, streamed=False)
    assert (whole, connections) == (100, 1)
    assert b"Keep-Alive: timeout=5, max=100" in head
