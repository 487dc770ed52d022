"""The vectors cost their float32 bytes plus a constant: no Python object per value (tracemalloc
sees every Python allocation; the Cython twin's buffer is C memory, so it is checked through the
Python objects it leaves, and both twins' peaks are bounded by the answer's own size)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from _embed import answer

N, DIM = 1000, 768
VALUES = N * DIM


def traced(fn: Any) -> tuple[Any, int, int]:
    """fn()'s result, the bytes it still holds, and its peak, as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held - base, peak - base


def test_base64_answer_costs_its_floats(impl: Any) -> None:
    rows = [[float(i % 97) / 7 + j for j in range(DIM)] for i in range(N)]
    body = answer(rows, b64=True)
    del rows

    def run() -> Any:
        v = impl.Vectors(N)
        v.add([body], 0, N)
        return v.finish()

    e, held, peak = traced(run)
    assert e.shape == (N, DIM)
    floats = 4 * VALUES
    # a float object per value would be 24 bytes each (plus 8 in a list): 8 times this
    if impl.IMPLEMENTATION == "python":
        assert floats <= held <= floats + (64 << 10)
    else:
        assert held <= 64 << 10  # the rows are C memory; a few small Python objects
    # the answer is read once: its parsed strings (about its size) plus the rows
    assert peak <= 2 * len(body) + floats + (1 << 20)


def test_numbers_answer_keeps_no_float(impl: Any) -> None:
    rows = [[float(i % 97) / 7 + j for j in range(DIM)] for i in range(N // 4)]
    body = answer(rows, b64=False)
    del rows

    def run() -> Any:
        v = impl.Vectors(N // 4)
        v.add([body], 0, N // 4)
        return v.finish()

    e, held, peak = traced(run)
    assert e.shape == (N // 4, DIM)
    floats = 4 * VALUES // 4
    assert held <= floats + (64 << 10)
    if impl.IMPLEMENTATION == "cython":
        # simdjson writes the numbers into its own tape: no Python float at any moment
        assert peak <= 2 * len(body) + floats + (1 << 20)
