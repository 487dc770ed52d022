"""The vectors cost their float32 bytes plus a constant: no Python object per value (tracemalloc
sees every Python allocation; the Cython twin's buffer is C memory, so it is checked through the
Python objects it leaves, and both twins' peaks are bounded by the answer's own size)."""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

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
    # the answer is read once: its text and parsed strings (about its size each), the strict
    # reader's marks (a byte per byte of it, _strict_json.parse), plus the rows
    assert peak <= 3 * len(body) + floats + (1 << 20)


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


# --- resident memory, in a fresh process (docs/client.md, EMBEDDINGS) ------------------------

# One ~57 MB list-of-numbers answer (1,000 rows of 3,072 values), decoded and dropped in a process
# of its own: the resident set is then within 10 MB of what it was before (the Cython twin once
# kept its parser's 114 MB for the life of the process). The answer's text stays alive throughout,
# so only what decoding it left behind counts.
RSS_SCRIPT = """
import gc, os, sys
from llamafast._engine import _twins

twin = _twins.PURE if sys.argv[1] == "python" else _twins.CYTHON
PAGE = os.sysconf("SC_PAGE_SIZE")
try:
    import ctypes
    TRIM = ctypes.CDLL(None).malloc_trim
except (OSError, AttributeError):  # not glibc: no allocator cache to give back
    TRIM = None


def resident():
    # What the process holds, once glibc has given back the free pages it caches: a large
    # temporary (the strict reader's scans of a 57 MB answer) raises glibc's mmap threshold,
    # so later frees stay in its heap (11 to 16 MB in a bare venv, 1 MB in another, for the same
    # code) although nothing holds them; what a value keeps (main's Cython parser: 69 MB) stays.
    if TRIM is not None:
        TRIM(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


ROWS, DIM = 1000, 3072


def answer(rows, dim):
    row = b"[" + b",".join(b"%.17g" % (0.1234567 * (i + 1) / 3) for i in range(dim)) + b"]"
    items = b",".join(b'{"embedding":%s,"index":%d}' % (row, i) for i in range(rows))
    return b'{"model":"m","object":"list","usage":{"prompt_tokens":5},"data":[' + items + b"]}"


def decode(body, rows):
    v = twin.Vectors(rows)
    v.add([body], 0, rows)
    return v.finish().shape


# imports and first-use caches settle before the measure: an answer that takes the same paths
# as the large one (more than MAX_DEPTH brackets, long digit runs), or what they keep for the
# life of the process (about 16 MB in a bare venv) would count as kept by the large answer
decode(answer(300, 8), 300)
body = answer(ROWS, DIM)
gc.collect()
before = resident()
assert decode(body, ROWS) == (ROWS, DIM)
gc.collect()
after = resident()
print(len(body), before, after)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_a_large_answer_leaves_no_resident_memory(impl: Any) -> None:
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, impl.IMPLEMENTATION],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    size, before, after = map(int, out.split())
    assert size > 55_000_000
    assert after - before < 10 << 20, f"{(after - before) >> 20} MB stayed resident"
