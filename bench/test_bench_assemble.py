"""The assembler alone: every payload of the 20,000-chunk stream pushed, then finish().

Run: python -m pytest bench/test_bench_assemble.py --benchmark-only
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from workloads import Stream, assemble_bytes, assemble_str


@pytest.mark.benchmark(group="assembler")
def test_assembler_push_bytes(impl: types.SimpleNamespace, stream: Stream, per_chunk: Any) -> None:
    """Payloads as bytes, as the fused path hands them over."""
    completion = per_chunk(assemble_bytes, impl, stream, chunks=stream.chunks)
    assert completion == assemble_str(impl, stream)


@pytest.mark.benchmark(group="assembler")
def test_assembler_push_str(impl: types.SimpleNamespace, stream: Stream, per_chunk: Any) -> None:
    """Payloads as str, as the SSE reader hands them out."""
    completion = per_chunk(assemble_str, impl, stream, chunks=stream.chunks)
    assert completion == assemble_bytes(impl, stream)
