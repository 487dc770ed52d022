"""The SSE reader over real HTTP responses: the recordings of fixtures/http, read by the standard
library's `http.client.HTTPResponse` from a socket (its chunked decoding, its read methods),
then `Events`; and live-stream behaviour over a socket that stays open.
"""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

from _recordings import (
    load_expected,
    open_recording,
    recording_bytes,
    serve_bytes,
    stream_recordings,
)
from llamafast import DONE, SseTimeoutError, TruncatedError

STREAMS = stream_recordings()


def as_expected(item: Any) -> dict[str, Any]:
    """An item in the form of fixtures/expected/*.json "items"."""
    return {"done": True} if item is DONE else {"data": item}


def test_the_stream_recordings_are_found() -> None:
    assert len(STREAMS) >= 10
    assert {"content_only", "tool_call", "midstream_error", "sse_ping"} <= set(STREAMS)


@pytest.mark.parametrize("name", STREAMS)
def test_recording_gives_the_expected_items(impl: types.SimpleNamespace, name: str) -> None:
    expected = load_expected(name)
    assert not expected["ends_with_partial_line"]
    with open_recording(name) as response:
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events = impl.Events(response)
        items = [as_expected(item) for item in events]
        assert items == expected["items"]
        assert events.next_item() is None


HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads)


def test_a_live_stream_hands_out_what_has_arrived(impl: types.SimpleNamespace) -> None:
    # docs/sse.md, rule READER: readinto1/read1 first. http.client's read/readinto on a chunked
    # body wait until 64 KiB have arrived: here they would block until the socket's timeout.
    response, server = serve_bytes(HEAD + chunked(b"data: a\n\n"), close=False, timeout=10)
    try:
        events = impl.Events(response)
        start = time.monotonic()
        assert events.next_item() == "a"
        assert time.monotonic() - start < 8  # a hang guard: the socket's timeout is 10 s
        server.sendall(chunked(b"data: b\n", b"\ndata: [DONE]\n\n") + b"0\r\n\r\n")
        assert [events.next_item(), events.next_item(), events.next_item()] == ["b", DONE, None]
    finally:
        server.close()
        response.close()


def test_a_socket_timeout_is_sse_timeout(impl: types.SimpleNamespace) -> None:
    response, server = serve_bytes(HEAD + chunked(b"data: a\n\n"), close=False, timeout=0.2)
    try:
        events = impl.Events(response)
        assert events.next_item() == "a"
        with pytest.raises(SseTimeoutError) as caught:
            events.next_item()
        assert isinstance(caught.value.__cause__, TimeoutError)
        with pytest.raises(SseTimeoutError):
            events.next_item()
    finally:
        server.close()
        response.close()


@pytest.mark.parametrize("name", ["content_only", "tool_call"])
def test_a_body_cut_between_lines_is_truncated(impl: types.SimpleNamespace, name: str) -> None:
    # docs/sse.md, rule READ-ERRORS: http.client.IncompleteRead (a cut chunked body) gives
    # TruncatedError, even when the event stream itself ended between lines: the body did not
    # end, it was cut.
    raw = recording_bytes(name)
    assert raw.endswith(b"\r\n0\r\n\r\n")
    response, _ = serve_bytes(raw[: -len(b"0\r\n\r\n")])
    with response:
        events = impl.Events(response)
        items = []
        with pytest.raises(TruncatedError) as caught:
            while True:
                items.append(as_expected(events.next_item()))
        assert items == load_expected(name)["items"]
        assert caught.value.args == (b"",)


def test_a_body_cut_inside_a_chunk_is_truncated(impl: types.SimpleNamespace) -> None:
    raw = recording_bytes("content_only")
    response, _ = serve_bytes(raw[: len(raw) // 2])
    with response:
        events = impl.Events(response)
        items = []
        with pytest.raises(TruncatedError):
            while True:
                items.append(as_expected(events.next_item()))
        expected = load_expected("content_only")["items"]
        assert 0 < len(items) < len(expected)
        assert items == expected[: len(items)]
