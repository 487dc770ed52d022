"""The benchmarks run as pytest-benchmark users run them: `--benchmark-only` is accepted (the
project's pytest options do not disable benchmarks), the per-chunk figures are printed as a
table, and a saved run can be compared with a later one. Skipped where bench/ is not beside
tests/ (an installed wheel's test run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _scripts import ROOT, run_script

BENCH = ROOT / "bench" / "test_bench_sse.py"
# One small benchmark, of the pure twin (built everywhere): the run is about a second.
ONE = [str(BENCH), "-k", "sse_decoder_feed and python", "-p", "no:cacheprovider"]


def bench(tmp_path: Path, *args: str) -> str:
    return run_script("-m", "pytest", *ONE, "--benchmark-only", *args)


@pytest.mark.skipif(not BENCH.is_file(), reason="no bench/ beside tests/ (not a source tree)")
def test_benchmark_only_saves_and_compares_per_chunk(tmp_path: Path) -> None:
    storage = f"--benchmark-storage={tmp_path}"
    first = bench(tmp_path, storage, "--benchmark-save=before")
    assert "1 passed" in first
    table = first.split("per chunk", 1)[1].splitlines()
    assert table[1].split() == ["benchmark", "(median)", "us/chunk", "chunks/s"]
    assert table[2].startswith("test_sse_decoder_feed[python]")
    saved = list(tmp_path.glob("*/0001_before.json"))
    assert len(saved) == 1
    second = bench(tmp_path, storage, "--benchmark-compare=0001")
    assert "(0001_before)" in second
    row = second.split("per chunk", 1)[1].splitlines()[2]
    assert row.startswith("test_sse_decoder_feed[python]") and "->" in row and "%" in row
