"""The recordings in fixtures/, served as a real HTTP response would arrive.

The recordings are read by the package's one reader of them (`llamafast._recordings.Folder`):
`FIXTURE_HTTP.raw(name)` is a recording's bytes, `FIXTURE_HTTP.reads(name)` its timing.
`open_recording(name)` writes fixtures/http/NAME.http into one end of a socket pair (from a
thread, so a recording larger than the socket buffer cannot block) and wraps the other end in
`http.client.HTTPResponse`, after `begin()`: the status line, headers and chunked transfer
encoding are decoded by the standard library, as in a live client. `load_expected(name)` is
fixtures/expected/NAME.json.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from pathlib import Path
from typing import Any

from llamafast._recordings import Folder

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_HTTP = Folder(FIXTURES / "http")
"""fixtures/http, read by the package's one reader of recordings (and their timing files)."""

__all__ = [
    "FIXTURES",
    "FIXTURE_HTTP",
    "load_expected",
    "open_recording",
    "recording_bytes",
    "serve_bytes",
    "stream_recordings",
]


def recording_bytes(name: str) -> bytes:
    """The raw bytes of fixtures/http/NAME.http (status line, headers, body)."""
    return FIXTURE_HTTP.raw(name)


def load_expected(name: str) -> dict[str, Any]:
    """fixtures/expected/NAME.json: what an independent reading of the recording produced."""
    with (FIXTURES / "expected" / f"{name}.json").open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def stream_recordings() -> list[str]:
    """The names of the 200 recordings that are event streams (their expected file has items)."""
    names = []
    for path in sorted((FIXTURES / "expected").glob("*.json")):
        expected = json.loads(path.read_text(encoding="utf-8"))
        if expected.get("status") == 200 and "items" in expected:
            names.append(path.stem)
    return names


def serve_bytes(
    raw: bytes, *, close: bool = True, timeout: float | None = None
) -> tuple[http.client.HTTPResponse, socket.socket]:
    """An `HTTPResponse` (after `begin()`) reading `raw` from a socket, and the server's end.

    With `close=False` the server's end stays open after `raw` (a live stream waiting for more);
    the caller closes it. `timeout` is set on the client's end before the response is read.
    """
    server, client = socket.socketpair()
    client.settimeout(timeout)

    def write() -> None:
        try:
            server.sendall(raw)
        except OSError:  # the test closed the client's end before reading everything
            pass
        finally:
            if close:
                server.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    response = http.client.HTTPResponse(client)
    # The response reads through client.makefile(); that file keeps the socket open until the
    # response is closed, so the socket object itself can be released now.
    client.close()
    response.begin()
    if not close:
        writer.join()
    return response, server


def open_recording(name: str) -> http.client.HTTPResponse:
    """fixtures/http/NAME.http as an `HTTPResponse` over a socket, after `begin()`."""
    response, _ = serve_bytes(recording_bytes(name))
    return response


def recorded_times(expected: dict[str, Any]) -> dict[str, float]:
    """`prompt_ms` and `predicted_ms` of the last chunk with timings among an expected file's
    items (the expected files give only the counts; the assembler keeps the latest timings)."""
    times: dict[str, float] = {}
    for item in expected.get("items", []):
        if '"timings"' in item.get("data", ""):
            found = json.loads(item["data"]).get("timings")
            if isinstance(found, dict):
                times = {k: float(found.get(k, 0.0)) for k in ("prompt_ms", "predicted_ms")}
    return times


def recorded_reports(expected: dict[str, Any]) -> dict[str, Any]:
    """`model` (of the first chunk that names one) and `usage` (of the last chunk with one, as
    `Usage`) among an expected file's items, as Completion keywords (the expected files predate
    these fields; the assembler reports them: docs/assembler.md, rules MODEL and USAGE)."""
    from llamafast import Usage

    reports: dict[str, Any] = {}
    for item in expected.get("items", []):
        if "data" not in item or not item["data"].startswith("{"):
            continue
        chunk = json.loads(item["data"])
        if "model" in chunk and "model" not in reports:
            reports["model"] = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details") or {}
            reports["usage"] = Usage(
                usage["prompt_tokens"], usage["completion_tokens"], details.get("cached_tokens", 0)
            )
    return reports
