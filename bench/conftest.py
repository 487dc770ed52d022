"""The benchmarks' fixtures: `impl` over the twins (as tests/conftest.py), `stream` the input.

Run: python -m pytest bench/ --benchmark-enable -q

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
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(
            chunks=chunks,
            us_per_chunk=round(median / chunks * 1e6, 3),
            chunks_per_s=round(chunks / median),
        )
        return result

    return run
