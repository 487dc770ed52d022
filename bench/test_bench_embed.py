"""Decoding embeddings answers: llamafast's twins against json.loads and base64 + numpy, on the
same 64-vector bodies (bench/embed/bodies.py), 768 and 4,096 dimensions. The whole clients, each
in its own process against a fake server, are bench/embed/run.py.

Run: python -m pytest bench/test_bench_embed.py --benchmark-enable -q
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from llamafast._engine import _twins

sys.path.insert(0, str(Path(__file__).resolve().parent / "embed"))
from bodies import body, vectors

BATCH = 64
DIMS = [768, 4096]
_BODIES: dict[tuple[int, bool], bytes] = {}


def answer(dim: int, b64: bool) -> bytes:
    if (dim, b64) not in _BODIES:
        _BODIES[dim, b64] = body(vectors(BATCH, dim), b64)
    return _BODIES[dim, b64]


@pytest.fixture(params=["python", "cython"])
def twin(request: pytest.FixtureRequest) -> Any:
    if request.param == "python":
        return _twins.PURE
    if _twins.CYTHON is None:
        pytest.skip(_twins.CYTHON_MISSING or "the Cython twin is not built")
    return _twins.CYTHON


def decode(twin: Any, data: bytes) -> Any:
    v = twin.Vectors(BATCH)
    v.add([data], 0, BATCH)
    return v.finish()


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("b64", [True, False], ids=["base64", "numbers"])
def test_llamafast_decode(benchmark: Any, twin: Any, dim: int, b64: bool) -> None:
    benchmark.group = f"embed decode {dim}"
    data = answer(dim, b64)
    e = benchmark(decode, twin, data)
    assert e.shape == (BATCH, dim)


@pytest.mark.parametrize("dim", DIMS)
def test_json_loads(benchmark: Any, dim: int) -> None:
    benchmark.group = f"embed decode {dim}"
    doc = benchmark(json.loads, answer(dim, False))
    assert len(doc["data"]) == BATCH


@pytest.mark.parametrize("dim", DIMS)
def test_base64_numpy(benchmark: Any, dim: int) -> None:
    numpy = pytest.importorskip("numpy")
    benchmark.group = f"embed decode {dim}"
    data = answer(dim, True)

    def run() -> Any:
        out = numpy.empty((BATCH, dim), dtype=numpy.float32)
        for d in json.loads(data)["data"]:
            out[d["index"]] = numpy.frombuffer(base64.b64decode(d["embedding"]), "<f4")
        return out

    assert benchmark(run).shape == (BATCH, dim)
