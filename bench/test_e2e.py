"""The end-to-end harness (bench/e2e) checked end to end: the fake server's framing is the
recordings', its /slots the recorded shape, a busy slot is held, the floors count exactly, and a
short run of run.py reads every answer whole and kills its server.

Run: python -m pytest bench/test_e2e.py -q   (no timing is asserted anywhere)
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import run, wire, worker

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with run.fake_server("asyncio", keep_alive=False, max_seconds=300) as p:
        yield p


def exchange(port: int, raw: bytes) -> bytes:
    """Send `raw`, read until the server closes (it closes after every answer)."""
    with socket.create_connection((HOST, port), timeout=30) as sock:
        sock.sendall(raw)
        parts = []
        while data := sock.recv(1 << 16):
            parts.append(data)
    return b"".join(parts)


def get(port: int, path: str) -> bytes:
    return exchange(port, f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())


def dechunk(body: bytes) -> list[bytes]:
    """The chunks of a chunked body, in order, the last (empty) one included."""
    out = []
    pos = 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        out.append(body[eol + 2 : eol + 2 + size])
        assert body[eol + 2 + size : eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size
        if not size:
            assert pos == len(body), "bytes after the last chunk"
            return out


@pytest.mark.parametrize("mode", [wire.Mode("bulk", 0, 4), wire.Mode("paced", 2000, 4)])
def test_a_stream_is_framed_as_recorded(port: int, mode: wire.Mode) -> None:
    answer = exchange(port, wire.chat_request(HOST, port, mode.prefix, 1, 120))
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head + b"\r\n\r\n" == wire.recorded("content_only")[0]
    chunks = dechunk(body)
    assert chunks[-1] == b"" and chunks[-2] == b"data: [DONE]\n\n"
    data = chunks[:-2]
    assert len(data) == 120  # max_tokens chunks, one SSE event in each HTTP chunk
    assert all(c.startswith(b"data: {") and c.endswith(b"}\n\n") for c in data)
    assert all(c.count(b"\n\n") == 1 for c in data)
    recorded_chunk = dechunk(wire.recorded("content_only")[1])[-3]
    shape = json.loads(recorded_chunk[6:]).keys()
    assert all(json.loads(c[6:]).keys() >= shape for c in data)
    assert len(answer) == wire.response_size(120)
    assert 450 <= len(body) / 120 <= 650  # the recorded chunks' size: about 500 bytes each


def test_slots_answer_in_the_recorded_shape(port: int) -> None:
    answer = get(port, wire.Mode("bulk", 0, 128, "full").prefix + "/slots")
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"Content-Length: {len(body)}\r\n".encode() in head + b"\r\n"
    slots = json.loads(body)
    recorded = json.loads(wire.recorded("get_slots")[1])[0]
    assert [s["id"] for s in slots] == list(range(128))
    assert all(s.keys() == recorded.keys() for s in slots)
    assert all(s["params"] == recorded["params"] for s in slots)
    assert len(body) > 128 * 1200  # the size that breaks a 64 KiB cap
    short = json.loads(
        get(port, wire.Mode("bulk", 0, 3, "short").prefix + "/slots").split(b"\r\n\r\n", 1)[1]
    )
    assert [s["id"] for s in short] == [0, 1, 2] and "params" not in short[0]


def test_health_control_and_unknown_paths_answer_as_recorded(port: int) -> None:
    assert get(port, "/health") == wire.HEALTH
    control = b'{"id":"x","action":"reasoning_end"}'
    raw = (
        f"POST /v1/chat/completions/control HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Content-Length: {len(control)}\r\n\r\n"
    ).encode() + control
    assert exchange(port, raw) == wire.CONTROL_OK
    assert get(port, "/nothing") == wire.NOT_FOUND


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"max_tokens": 5}'])
def test_a_chat_body_the_server_cannot_read_is_answered(port: int, body: bytes) -> None:
    raw = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    assert exchange(port, raw) == wire.BAD_JSON


def test_a_request_the_server_cannot_parse_is_answered(port: int) -> None:
    assert exchange(port, b"NONSENSE\r\n\r\n") == wire.NOT_FOUND
    chunked = b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert exchange(port, chunked + b"2\r\n{}\r\n0\r\n\r\n") == wire.BAD_JSON


def test_a_busy_slot_shows_in_slots_and_holds_the_next_request(port: int) -> None:
    mode = wire.Mode("paced", 1, 8, "short")  # one chunk a second: busy for the whole test
    first = socket.create_connection((HOST, port), timeout=30)
    second = socket.create_connection((HOST, port), timeout=30)
    try:
        first.sendall(wire.chat_request(HOST, port, mode.prefix, 5, 100))
        assert first.recv(1 << 16).startswith(b"HTTP/1.1 200 OK")
        slots = json.loads(get(port, mode.prefix + "/slots").split(b"\r\n\r\n", 1)[1])
        assert [s["id"] for s in slots if s["is_processing"]] == [5]
        second.sendall(wire.chat_request(HOST, port, mode.prefix, 5, 100))
        # Held: not one byte while the slot streams (a wait for silence, not a speed check).
        assert select.select([second], [], [], 0.5)[0] == []
        first.close()  # the slot is freed, and passes to the held request
        assert second.recv(1 << 16).startswith(b"HTTP/1.1 200 OK")
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("cut", range(len(wire.END) + 1))
def test_the_floor_counter_finds_the_last_chunk_however_it_is_split(cut: int) -> None:
    class Done:
        result: int | None = None

        def done(self) -> bool:
            return self.result is not None

        def set_result(self, n: int) -> None:
            self.result = n

    data = wire.body(100)
    done = Done()
    counter = worker._Counter(done)  # type: ignore[arg-type]
    split = len(data) - cut
    for piece in (data[:1000], data[1000:split], data[split:]):
        counter.count(piece)
    assert done.result == len(data)
    early = Done()
    worker._Counter(early).count(data[:-1])  # type: ignore[arg-type]
    assert early.result is None  # one byte short is not the end


def test_a_failing_client_is_reported_not_dropped() -> None:
    s = run.scenarios(quick=True)[0]
    cell = run.Cell(s, "llamafast-async", "asyncio", runs=[{"error": "ProtocolError: no"}])
    assert run.value_or_error(cell) == "fails: ProtocolError"
    cell.runs.append({"cpu": 0.5, "wall": 1.0, "chunks": 1000, "requests": 1})
    assert run.value_or_error(cell) == "500 (1/2 failed)"


def test_a_baseline_interpreter_runs_the_llamafast_rows_again_beside_them() -> None:
    s = run.scenarios(quick=True)[0]
    table = run.cells([s], None, uvloop=False, baseline="/old/python")
    order = [(c.client, c.baseline) for c in table]
    at = order.index(("llamafast-async", False))
    assert order[at + 1] == ("llamafast-async", True)  # side by side in every round
    again = {c.client for c in table if c.baseline}
    assert again == {"llamafast-async", "llamafast-async-complete", "aiohttp-aiter_chat"}
    assert all(c.python == "/old/python" for c in table if c.baseline)
    for c in table:
        c.runs.append({"cpu": 0.1 if c.baseline else 0.05, "wall": 1.0, "chunks": 5000})
    lines = run.scenario_table(s, table, uvloop=False)
    assert any(line.startswith("| llamafast `AsyncClient` (baseline) | 20.0 |") for line in lines)
    assert any(line.startswith("| llamafast `AsyncClient` | 10.0 |") for line in lines)


def test_the_worker_talks_to_loopback_only() -> None:
    with pytest.raises(SystemExit):
        worker.main(["--client=floor-recv_into", "--host=10.0.0.1", "--port=1", "--prefix=/"])


def test_a_quick_run_reads_every_answer_and_kills_its_server(tmp_path: Path) -> None:
    """run.py end to end on the clients that need nothing outside the test extra; its saved
    numbers give the same report again."""
    clients = "llamafast-async,llamafast-sync,aiohttp-json,floor-buffered-protocol,floor-recv_into"
    saved = tmp_path / "e2e.json"
    done = subprocess.run(
        [
            sys.executable,
            str(Path(run.__file__)),
            "--quick",
            "--only=bulk1,seq128",
            f"--clients={clients}",
            f"--json={saved}",
        ],
        capture_output=True,
        timeout=300,
        check=True,
    )
    table = done.stdout.decode()
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ")}
    for name in ("aiohttp-json", "floor-buffered-protocol", "floor-recv_into"):
        cells = rows[run.LABELS[name]].split(" | ")
        float(cells[1].replace(",", ""))  # a number: the run read the whole answer
    assert "llamafast `AsyncClient`" in rows and "llamafast `Client`" in rows
    assert "### The issue's targets" in table
    again = run.rerender(str(saved))
    assert [line for line in again.splitlines() if line.startswith("| ")] == [
        line for line in table.splitlines() if line.startswith("| ")
    ]


def test_the_server_is_gone_after_its_block() -> None:
    with run.fake_server("asyncio", keep_alive=False, max_seconds=60) as p:
        assert get(p, "/health") == wire.HEALTH
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, p), timeout=5).close()
