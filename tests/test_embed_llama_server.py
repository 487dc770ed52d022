# Against a real llama-server: one started with `--embeddings --pooling mean` (the tiny chat model
# serves embeddings once it pools), one with `--reranking` (the same model: llama-server ranks with
# it), both clients, both twins. Needs LLAMAFAST_LLAMA_SERVER and LLAMAFAST_TEST_MODEL, like
# tests/test_llama_server.py (tests/_llama.py starts the servers).
"""embed and rerank against a real llama-server (marker `llama_server`; skipped without it).

    LLAMAFAST_LLAMA_SERVER=/path/to/llama-server LLAMAFAST_TEST_MODEL=/path/to/model.gguf \\
        python -m pytest -m llama_server tests/test_embed_llama_server.py
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
from collections.abc import Iterator

import pytest

from _llama import NEEDS_SERVER, serve_model
from llamafast import AsyncClient, Client, Embeddings, HttpError, Ranked
from test_llama_server import config

pytestmark = NEEDS_SERVER

TEXTS = [f"memory number {i}: the cat sat on mat {i % 7}" for i in range(37)]


@pytest.fixture(scope="module")
def embedder() -> Iterator[str]:
    with serve_model("--embeddings", "--pooling", "mean") as url:
        yield url


@pytest.fixture(scope="module")
def reranker() -> Iterator[str]:
    with serve_model("--reranking") as url:
        yield url


def floats(url: str, texts: list[str]) -> list[list[float]]:
    """The server's own vectors as JSON numbers (no encoding_format), read with json."""
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=120)
    try:
        conn.request("POST", "/v1/embeddings", json.dumps({"input": texts}))
        data = json.loads(conn.getresponse().read())["data"]
    finally:
        conn.close()
    return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]


def check(e: Embeddings, url: str) -> None:
    assert e.n == len(TEXTS) and e.dim > 0
    assert e.usage is not None and e.usage.prompt_tokens > 0
    want = floats(url, TEXTS[:5])
    got = e.tolist()[:5]
    for row, ref in zip(got, want, strict=True):
        # the same vector: base64 float32 against the server's decimal writing of it
        assert all(
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(row, ref, strict=True)
        )


def test_sync_embed(embedder: str) -> None:
    with Client(config(embedder, embed_batch=8)) as client:
        e = client.embed(TEXTS)
    check(e, embedder)


def test_async_embed_side_by_side(embedder: str) -> None:
    async def go() -> Embeddings:
        async with AsyncClient(config(embedder, embed_batch=5)) as client:
            return await client.embed(TEXTS)

    e = asyncio.run(go())
    check(e, embedder)
    with Client(config(embedder, embed_batch=64)) as client:
        whole = client.embed(TEXTS)
    # the same vectors in the same order however they were batched (the server's sums may
    # differ in the last bits with the batch's shape)
    for a, b in zip(whole.tolist(), e.tolist(), strict=True):
        assert all(
            math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) for x, y in zip(a, b, strict=True)
        )


def test_embed_needs_embeddings() -> None:
    with serve_model() as url, Client(config(url)) as client:
        with pytest.raises(HttpError, match="start llama-server with --embeddings"):
            client.embed(["x"])


def test_rerank(reranker: str) -> None:
    docs = ["a cat", "a dog on a mat", "stock prices", "the cat sat"]
    with Client(config(reranker)) as client:
        ranked = client.rerank("where did the cat sit?", docs)
        top = client.rerank("where did the cat sit?", docs, top_n=2)
    assert sorted(r.index for r in ranked) == [0, 1, 2, 3]
    assert all(isinstance(r, Ranked) and math.isfinite(r.score) for r in ranked)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    assert top == ranked[:2]


def test_rerank_needs_reranking(embedder: str) -> None:
    with Client(config(embedder)) as client:
        with pytest.raises(HttpError, match="start llama-server with --reranking"):
            client.rerank("q", ["a"])
