"""Tool-call arguments asked for after every piece: incremental vs one parse vs re-parsing.

Run: python -m pytest bench/test_bench_partial.py --benchmark-only
(bench/partial_args.py prints the same comparison, with more rows, as one table.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamafast import ToolCall
from partial_args import document, incremental, pieces, reparse_json_lower_bound

DOC = document()
PARTS = pieces(DOC)


@pytest.mark.benchmark(group="partial arguments")
def test_incremental_value_after_every_piece(benchmark: Any) -> None:
    got = benchmark.pedantic(incremental, (PARTS,), rounds=5, warmup_rounds=1)
    assert got == json.loads(DOC)


@pytest.mark.benchmark(group="partial arguments")
def test_one_full_parse(benchmark: Any) -> None:
    got = benchmark.pedantic(ToolCall("c", "f", DOC).parse_arguments, rounds=5, warmup_rounds=1)
    assert got == json.loads(DOC)


@pytest.mark.benchmark(group="partial arguments")
def test_reparse_every_prefix_json_loads_lower_bound(benchmark: Any) -> None:
    got = benchmark.pedantic(reparse_json_lower_bound, (PARTS,), rounds=3, warmup_rounds=0)
    assert got["content"] == json.loads(DOC)["content"][: len(got["content"])]
