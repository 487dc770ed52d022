"""Every bench/ path side by side in one process, and the speed ratios checked against targets.

Run:
    python bench/ratios.py                  # 7 interleaved rounds, medians, one table
    python bench/ratios.py --rounds 15      # steadier on a noisy machine
    python bench/ratios.py --check          # exit 1 if a ratio misses its target

Each round runs every measurement once, in turn (so a noisy neighbour slows all of them alike),
after one untimed warm-up round that also checks the results; the table gives the median. The
Cython rows say "not built" until `python setup.py build_ext --inplace` has built the twin.
The openai SDK path runs on a shorter stream from the same generator (the same mix of chunks)
and is compared per chunk.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gen_stream
import workloads
from workloads import Stream


@dataclass
class Row:
    key: str  # the workload's name, for the ratios
    label: str
    impl: str  # "python", "cython", or "" for the reference paths
    run: Callable[[], Any] | None  # None: not available (the reason is in `missing`)
    chunks: int
    missing: str = ""
    times: list[float] = field(default_factory=list)

    @property
    def per_chunk(self) -> float | None:
        """Median seconds per chunk."""
        return statistics.median(self.times) / self.chunks if self.times else None


def rows(stream: Stream, small: Stream) -> list[Row]:
    out: list[Row] = []
    paths = [
        ("SSE reader: SseDecoder.feed, 64 KiB pieces", workloads.sse_feed),
        ("SSE reader: Events over BytesIO", workloads.sse_events),
        ("assembler: push(bytes)", workloads.assemble_bytes),
        ("assembler: push(str)", workloads.assemble_str),
        ("whole path: ChatStream over BytesIO", workloads.whole),
    ]
    twins = workloads.twins()
    for label, fn in paths:
        for name, ns in twins.items():
            reason = workloads.missing(fn, ns)
            run = None if reason else _bind(fn, ns, stream)
            out.append(Row(fn.__name__, label, name, run, stream.chunks, missing=reason or ""))
    references = [
        (f"openai SDK path ({small.chunks:,}-chunk run)", workloads.openai_sdk, small, "openai"),
        (
            "floor: simdjson.Parser().parse per payload",
            workloads.simdjson_floor,
            stream,
            "simdjson",
        ),
    ]
    for label, fn, s, module in references:
        try:
            __import__(module)
        except ImportError:
            out.append(Row(fn.__name__, label, "", None, s.chunks, missing=f"no {module}"))
        else:
            out.append(Row(fn.__name__, label, "", _bind(fn, s), s.chunks))
    return out


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


def measure(table: list[Row], rounds: int) -> None:
    clock = time.perf_counter
    for row in table:  # the warm-up round
        if row.run is not None:
            row.run()
    for r in range(rounds):
        for row in table:
            if row.run is None:
                continue
            gc.collect()
            start = clock()
            row.run()
            row.times.append(clock() - start)
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr)


def find(table: list[Row], key: str, impl: str = "") -> Row:
    return next(r for r in table if r.key == key and r.impl == impl)


def report(table: list[Row], stream: Stream, rounds: int) -> list[bool]:
    """Print the table and the ratios; the pass/fail of each ratio that could be measured."""
    print(
        f"llamafast bench: {stream.chunks:,} chunks, {len(stream.body):,} bytes "
        f"({len(stream.body) / stream.chunks:.0f} B/chunk), {rounds} rounds, medians; "
        f"Python {platform.python_version()} on {platform.machine()}"
    )
    print()
    print(f"{'path':<46} {'impl':<7} {'µs/chunk':>10} {'chunks/s':>12}")
    print("-" * 78)
    for row in table:
        if row.per_chunk is None:
            print(f"{row.label:<46} {row.impl:<7} {row.missing:>10}")
        else:
            us = row.per_chunk * 1e6
            print(f"{row.label:<46} {row.impl:<7} {us:>10.2f} {1 / row.per_chunk:>12,.0f}")
    print()

    whole_py, whole_c = find(table, "whole", "python"), find(table, "whole", "cython")
    openai, floor = find(table, "openai_sdk"), find(table, "simdjson_floor")
    checks = [
        # (what, the slower row, the faster row, target, "at least" (else "at most"))
        ("whole path: cython vs python", whole_py, whole_c, 6.0, True),
        ("whole path: cython vs openai SDK", openai, whole_c, 200.0, True),
        ("SSE reader (feed): cython vs python", *_pair(table, "sse_feed"), 5.0, True),
        ("SSE reader (Events): cython vs python", *_pair(table, "sse_events"), 5.0, True),
        ("whole path: cython / simdjson floor", whole_c, floor, 2.0, False),
    ]
    info = [
        ("assembler (bytes): cython vs python", *_pair(table, "assemble_bytes")),
        ("whole path: python vs openai SDK", openai, whole_py),
        ("whole path: python / simdjson floor", whole_py, floor),
    ]
    print(f"{'ratio':<46} {'target':>8} {'measured':>10}")
    print("-" * 78)
    passed: list[bool] = []
    for what, a, b, target, at_least in checks:
        head = f"{what:<46} {_target(target, at_least):>8}"
        if a.per_chunk is None or b.per_chunk is None:
            print(f"{head} {'n/a':>10}  ({a.missing or b.missing})")
            continue
        ratio = a.per_chunk / b.per_chunk
        ok = ratio >= target if at_least else ratio <= target
        passed.append(ok)
        print(f"{head} {ratio:>9.1f}x  {'ok' if ok else 'MISSED'}")
    for what, a, b in info:
        if a.per_chunk is not None and b.per_chunk is not None:
            print(f"{what:<46} {'':>8} {a.per_chunk / b.per_chunk:>9.1f}x")
    return passed


def _pair(table: list[Row], key: str) -> tuple[Row, Row]:
    return find(table, key, "python"), find(table, key, "cython")


def _target(target: float, at_least: bool) -> str:
    return f"{'>=' if at_least else '<='} {target:g}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    ap.add_argument("--chunks", type=int, default=gen_stream.CHUNKS, help="chunks in the stream")
    ap.add_argument(
        "--openai-chunks",
        type=int,
        default=workloads.OPENAI_CHUNKS,
        help=f"chunks in the openai SDK's stream (default {workloads.OPENAI_CHUNKS:,})",
    )
    ap.add_argument("--check", action="store_true", help="exit 1 if a measured ratio misses")
    args = ap.parse_args(argv)
    stream, small = Stream(chunks=args.chunks), Stream(chunks=args.openai_chunks)
    for ns in workloads.twins().values():
        if not isinstance(ns, str):
            workloads.check(ns, stream)
    table = rows(stream, small)
    measure(table, args.rounds)
    passed = report(table, stream, args.rounds)
    return 1 if args.check and not all(passed) else 0


if __name__ == "__main__":
    sys.exit(main())
