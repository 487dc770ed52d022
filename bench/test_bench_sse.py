"""The SSE reader alone, on the 20,000-chunk generated stream.

Run: python -m pytest bench/test_bench_sse.py --benchmark-enable -q
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
