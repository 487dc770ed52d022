"""The SSE reader alone, on the 20,000-chunk generated stream.

Run: python -m pytest bench/test_bench_sse.py --benchmark-only
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from workloads import Stream, sse_events, sse_feed


@pytest.mark.benchmark(group="sse reader")
def test_sse_decoder_feed(impl: types.SimpleNamespace, stream: Stream, per_chunk: Any) -> None:
    """SseDecoder.feed over 64 KiB pieces: every payload and [DONE]."""
    assert per_chunk(sse_feed, impl, stream, chunks=stream.chunks) == stream.chunks + 1


@pytest.mark.benchmark(group="sse reader")
def test_sse_events_bytesio(impl: types.SimpleNamespace, stream: Stream, per_chunk: Any) -> None:
    """Events over io.BytesIO."""
    assert per_chunk(sse_events, impl, stream, chunks=stream.chunks) == stream.chunks + 1


N_PIECES = 50_000
LONG_LINE = b"data: " + b"x" * (16 * N_PIECES - 6) + b"\n"
SHORT_LINES = b"data: xxxxxxxxx\n" * N_PIECES


def _feed_pieces(impl: types.SimpleNamespace, data: bytes) -> int:
    feed = impl.SseDecoder(max_line=len(data)).feed
    items = 0
    for i in range(0, len(data), 16):
        items += len(feed(data[i : i + 16]))
    return items


@pytest.mark.benchmark(group="sse buffering: 16-byte pieces")
@pytest.mark.parametrize("shape", ["one 800 KB line", "50,000 short lines"])
def test_sse_long_line_in_small_pieces(
    impl: types.SimpleNamespace, benchmark: Any, shape: str
) -> None:
    """Buffering is linear: one long line arriving in 16-byte pieces costs about what
    the same bytes as short lines cost; a decoder that rescanned its buffer on every piece would
    take hundreds of times longer on the long line."""
    data = LONG_LINE if shape.startswith("one") else SHORT_LINES
    expected = 1 if shape.startswith("one") else N_PIECES
    assert benchmark(_feed_pieces, impl, data) == expected
