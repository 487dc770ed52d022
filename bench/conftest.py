"""The benchmarks' fixtures: `impl` over the twins (as tests/conftest.py), `stream` the input.

Run: python -m pytest bench/ --benchmark-only
Save a run and compare a later one with it (pytest-benchmark keeps runs in .benchmarks/):
    python -m pytest bench/ --benchmark-only --benchmark-save=before
    python -m pytest bench/ --benchmark-only --benchmark-compare=0001   # or the run's file name

`impl` runs each benchmark against the pure twin and the Cython twin; a Cython run is skipped
while the module it needs is not built (`python setup.py build_ext --inplace` builds them).
`stream` is the 20,000-chunk stream of bench/gen_stream.py, generated once per session.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from workloads import Stream, missing, twins

TWINS = twins()


@pytest.fixture(scope="session", params=["python", "cython"])
def impl(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    return TWINS[request.param]


@pytest.fixture(scope="session")
def stream() -> Stream:
    return Stream()


@pytest.fixture
def per_chunk(benchmark: Any) -> Any:
    """Run `fn(*args)` under `benchmark` (5 rounds) and note µs per chunk and chunks per second.

    A twin's workload (`fn(impl, stream)`) is skipped when the class it needs is not built.
    """

    def run(fn: Any, *args: Any, chunks: int, rounds: int = 5) -> Any:
        if isinstance(args[0], types.SimpleNamespace) and (reason := missing(fn, args[0])):
            pytest.skip(f"the Cython twin is {reason}")
        result = benchmark.pedantic(fn, args, rounds=rounds, warmup_rounds=1, iterations=1)
        if benchmark.disabled:  # --benchmark-disable: each workload runs once, as a test
            return result
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(
            chunks=chunks,
            us_per_chunk=round(median / chunks * 1e6, 3),
            chunks_per_s=round(chunks / median),
        )
        return result

    return run


def _per_chunk_rows(config: pytest.Config) -> list[tuple[str, str, str, str]]:
    """Name, µs per chunk, chunks per second and, against a compared run, the change."""
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return []
    saved: dict[str, dict[str, Any]] = {}
    for runs in (getattr(session, "compared_mapping", None) or {}).values():
        saved.update(runs)
    rows = []
    for bench in session.benchmarks:
        info = bench.extra_info
        if "us_per_chunk" not in info:
            continue
        now = info["us_per_chunk"]
        before = saved.get(bench.fullname, {}).get("extra_info", {}).get("us_per_chunk")
        change = f"{before:.3f} -> {(now / before - 1) * 100:+.1f}%" if before else ""
        rows.append((bench.name, f"{now:.3f}", f"{info['chunks_per_s']:,}", change))
    return rows


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """After pytest-benchmark's table (whole-stream times), the same runs per chunk: the median
    over the chunks the stream has, the figures the README's tables give."""
    rows = _per_chunk_rows(config)
    if not rows:
        return
    head = ("benchmark (median)", "us/chunk", "chunks/s", "compared: us/chunk -> change")
    if not any(row[3] for row in rows):  # no --benchmark-compare: no change column
        head, rows = head[:3], [row[:3] for row in rows]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    terminalreporter.write_sep("-", "per chunk")
    for row in [head, *rows]:
        cells = [
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        terminalreporter.write_line("  ".join(cells).rstrip())
