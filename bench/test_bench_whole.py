"""The whole path (bytes to Completion), beside the openai SDK's path and the simdjson floor.

Run: python -m pytest bench/test_bench_whole.py --benchmark-only

The openai SDK path runs on a 1,000-chunk stream from the same generator (the same mix of
chunks; at ~500 µs a chunk the whole 20,000 would take ~10 s a round); compare it per chunk
(extra_info `us_per_chunk`), as bench/ratios.py does.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from workloads import OPENAI_CHUNKS, Stream, check, openai_sdk, simdjson_floor, whole


@pytest.mark.benchmark(group="whole path")
def test_chat_stream(impl: types.SimpleNamespace, stream: Stream, per_chunk: Any) -> None:
    """ChatStream over io.BytesIO: bytes in, one Completion out."""
    check(impl, stream)
    completion = per_chunk(whole, impl, stream, chunks=stream.chunks)
    assert len(completion.tool_calls) == 1


@pytest.mark.benchmark(group="whole path")
def test_openai_sdk_path(per_chunk: Any) -> None:
    """openai._streaming.SSEDecoder feeding ChatCompletionStreamState, per chunk."""
    pytest.importorskip("openai")
    small = Stream(chunks=OPENAI_CHUNKS)
    completion = per_chunk(openai_sdk, small, chunks=small.chunks, rounds=3)
    assert completion.choices[0].finish_reason == "tool_calls"


@pytest.mark.benchmark(group="whole path")
def test_simdjson_floor(stream: Stream, per_chunk: Any) -> None:
    """simdjson.Parser().parse of every payload from Python: the floor."""
    pytest.importorskip("simdjson")
    assert per_chunk(simdjson_floor, stream, chunks=stream.chunks) == stream.chunks
