"""embed and rerank: the decoder twins (`Vectors`), the `Embeddings` value, and both clients
against a loopback server (tests/_embed.py), with the recorded llama-server answers."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import pickle
import struct
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _embed import MODEL, EmbedServer, answer, embed_handler, item, pack, vector_for
from llamafast import (
    AsyncClient,
    Client,
    Config,
    Embeddings,
    HttpError,
    InferConfig,
    Limits,
    ProtocolError,
    Ranked,
    Usage,
)

HTTP = Path(__file__).resolve().parent.parent / "fixtures" / "http"


def recorded_body(name: str) -> bytes:
    raw = (HTTP / f"{name}.http").read_bytes()
    return raw.split(b"\r\n\r\n", 1)[1]


def f32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", pack(values)))


def decode(impl: Any, bodies: list[tuple[bytes, int, int]], n: int) -> Embeddings:
    vectors = impl.Vectors(n)
    for body, first, count in bodies:
        vectors.add([body], first, count)
    return vectors.finish()


def fault(impl: Any, body: bytes, first: int = 0, count: int = 2, n: int | None = None) -> str:
    vectors = impl.Vectors(first + count if n is None else n)
    with pytest.raises(ProtocolError) as info:
        vectors.add([body], first, count)
    return str(info.value)


ROWS = [[0.5, -1.25, 3.0, 1e-8], [2.0, 0.0, -0.0, 7.5]]


# --- the decoder ---------------------------------------------------------------------------------


@pytest.mark.parametrize("b64", [True, False], ids=["base64", "numbers"])
def test_rows_in_order(impl: Any, b64: bool) -> None:
    e = decode(impl, [(answer(ROWS, b64=b64, tokens=5), 0, 2)], 2)
    assert e.shape == (2, 4) and len(e) == 2
    assert e.tolist() == [f32(r) for r in ROWS]
    assert e.model == MODEL
    assert e.usage == Usage(5, 0)


def test_recorded_answers_agree(impl: Any) -> None:
    b64 = decode(impl, [(recorded_body("embeddings_base64"), 0, 2)], 2)
    nums = decode(impl, [(recorded_body("embeddings_float"), 0, 1)], 1)
    assert b64.dim == nums.dim == 256
    # the same text, the same server: the float list is the float32 vector written as doubles
    assert b64.tolist()[0] == nums.tolist()[0]
    assert b64.usage == Usage(8, 0)


def test_several_answers_fill_their_rows(impl: Any) -> None:
    first = answer(ROWS, tokens=3)
    second = answer([[9.0, 8.0, 7.0, 6.0]], tokens=4)
    e = decode(impl, [(second, 2, 1), (first, 0, 2)], 3)  # any order of arrival
    assert e.tolist() == [f32(r) for r in ROWS] + [[9.0, 8.0, 7.0, 6.0]]
    assert e.usage == Usage(7, 0)


def test_pieces_split_anywhere(impl: Any) -> None:
    body = answer(ROWS)
    for cut in range(0, len(body), 7):
        vectors = impl.Vectors(2)
        vectors.add([body[:cut], body[cut:]], 0, 2)
        assert vectors.finish().tolist() == [f32(r) for r in ROWS]


def test_rows_go_to_their_index(impl: Any) -> None:
    items = [item(ROWS[1], 1), item(ROWS[0], 0)]
    e = decode(impl, [(answer([], items=items), 0, 2)], 2)
    assert e.tolist() == [f32(r) for r in ROWS]


def test_no_usage_no_model(impl: Any) -> None:
    body = json.dumps({"data": [item(ROWS[0], 0)]}).encode()
    e = decode(impl, [(body, 0, 1)], 1)
    assert e.usage is None and e.model is None


@pytest.mark.parametrize("number", [b"18446744073709551616", b"-9223372036854775809", b"1e400"])
def test_a_number_simdjson_cannot_hold_is_not_json_in_both_twins(impl: Any, number: bytes) -> None:
    # An integer beyond 64 bits or a float beyond a double: simdjson refuses the answer, and
    # the pure twin, whose json would read it, refuses it the same way.
    body = b'{"data":[{"embedding":[1.0,%s],"index":0}]}' % number
    assert "is not valid JSON" in fault(impl, body, count=1)


def _faulty(**changes: Any) -> bytes:
    items = [item(ROWS[0], 0), item(ROWS[1], 1)]
    items[1].update(changes)
    return answer([], items=items)


FAULTS = {
    "wrong length": (
        _faulty(embedding=base64.b64encode(pack([1.0, 2.0])).decode()),
        "has 2 values, not 4",
    ),
    "not finite (base64)": (
        _faulty(embedding=base64.b64encode(pack([1.0, math.inf, 0, 0])).decode()),
        "not finite (at 1)",
    ),
    "NaN (base64)": (
        _faulty(embedding=base64.b64encode(pack([1.0, 2.0, 3.0, math.nan])).decode()),
        "not finite (at 3)",
    ),
    "float32 overflow (numbers)": (_faulty(embedding=[1.0, 2.0, 1e39, 0.0]), "not finite (at 2)"),
    "repeated index": (_faulty(index=0), "repeats index 0"),
    "index out of range": (_faulty(index=2), "not one of its request's 2 texts"),
    "index not an int": (_faulty(index=1.0), "not one of its request's 2 texts"),
    "index missing": (
        answer(
            [], items=[item(ROWS[0], 0), {"embedding": base64.b64encode(pack(ROWS[1])).decode()}]
        ),
        "not one of",
    ),
    "not base64": (_faulty(embedding="AAA*"), "not valid base64"),
    "base64 without padding": (_faulty(embedding="AAAAAA"), "not valid base64"),
    "partial float": (
        _faulty(embedding=base64.b64encode(b"\0" * 6).decode()),
        "6 bytes, not a whole number",
    ),
    "empty vector": (_faulty(embedding=""), "is empty"),
    "empty list": (_faulty(embedding=[]), "is empty"),
    "not a number": (_faulty(embedding=[1.0, "2", 3.0, 4.0]), "not a number (at 1)"),
    "a bool": (_faulty(embedding=[1.0, 2.0, True, 4.0]), "not a number (at 2)"),
    "no embedding": (_faulty(embedding=None), "neither a base64 string nor a list"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_faults_name_the_text(impl: Any, name: str) -> None:
    body, words = FAULTS[name]
    message = fault(impl, body, first=10, count=2)
    assert words in message
    assert "text 11" in message  # the caller's text: the second of a request starting at 10


def test_missing_vector_named(impl: Any) -> None:
    body = answer([ROWS[0]])
    assert "no vector for text 4" in fault(impl, body, first=3, count=2)


def test_extra_vector(impl: Any) -> None:
    body = answer(ROWS + ROWS)
    assert "more vectors than its 2 texts" in fault(impl, body, count=2)


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b"[1,2]", b'{"data": 3}', b'{"data": [1]}', b'{"data": [{"embedding": NaN}]}'],
)
def test_shape_faults(impl: Any, body: bytes) -> None:
    message = fault(impl, body, count=1)
    assert "not valid JSON" in message or "no `data` list" in message


def test_twins_agree_on_faults(c_impl: Any, py_impl: Any) -> None:
    for body, _ in FAULTS.values():
        assert fault(c_impl, body, first=5) == fault(py_impl, body, first=5)


def test_nothing_added(impl: Any) -> None:
    with pytest.raises(ProtocolError, match="no vector for text 0"):
        impl.Vectors(3).finish()


# --- the value -----------------------------------------------------------------------------------


def test_view_and_rows() -> None:
    e = Embeddings(array("f", [1, 2, 3, 4, 5, 6]), 2, 3, model="m", usage=Usage(1, 0))
    view = e.view
    assert view.shape == (2, 3) and view.format == "f" and view.readonly
    assert e[1].tolist() == [4.0, 5.0, 6.0] and e[-2].tolist() == [1.0, 2.0, 3.0]
    assert [r.tolist() for r in e] == e.tolist()
    with pytest.raises(IndexError):
        e[2]
    with pytest.raises(AttributeError):
        e.model = "x"  # type: ignore[misc]


def test_value_semantics() -> None:
    a = Embeddings(array("f", [1, 2, 3, 4]), 2, 2, model="m")
    b = Embeddings(bytes(array("f", [1, 2, 3, 4])), 2, 2, model="m")
    assert a == b and hash(a) == hash(b)
    assert a != Embeddings(array("f", [1, 2, 3, 5]), 2, 2, model="m")
    assert a != Embeddings(array("f", [1, 2, 3, 4]), 1, 4, model="m")
    assert pickle.loads(pickle.dumps(a)) == a


def test_wrong_size_refused() -> None:
    with pytest.raises(ValueError, match="needs 24 bytes, not 16"):
        Embeddings(array("f", [1, 2, 3, 4]), 2, 3)


# A Python class exports a buffer from 3.12 on (PEP 688); on 3.11 Embeddings takes its export
# from the Cython twin, so only 3.11 with the pure twin forced goes without (and has `e.view`).
BUFFER = sys.version_info >= (3, 12) or llamafast.IMPLEMENTATION == "cython"


@pytest.mark.skipif(not BUFFER, reason="3.11, pure twin forced: no buffer protocol, e.view")
def test_buffer_protocol(impl: Any) -> None:
    made = Embeddings(array("f", [1, 2, 3, 4, 5, 6]), 3, 2)
    decoded = decode(impl, [(answer(ROWS), 0, 2)], 2)
    for e, rows in ((made, [[1, 2], [3, 4], [5, 6]]), (decoded, ROWS)):
        view = memoryview(e)  # type: ignore[arg-type]
        assert (view.shape, view.strides, view.format, view.itemsize) == (
            (e.n, e.dim),
            (e.dim * 4, 4),
            "f",
            4,
        )
        assert view.readonly and view.c_contiguous and view.nbytes == e.n * e.dim * 4
        assert view.tolist() == [f32(row) for row in rows]
        assert view.cast("B").tobytes() == e.tobytes()
        assert bytes(e) == e.tobytes()  # type: ignore[call-overload]
        del e
        assert view.tolist() == [f32(row) for row in rows]  # the view keeps the rows alive
        view.release()


@pytest.mark.skipif(not BUFFER, reason="3.11, pure twin forced: no buffer protocol, e.view")
def test_buffer_protocol_is_read_only() -> None:
    import ctypes

    e = Embeddings(array("f", [1, 2, 3, 4]), 2, 2)
    assert memoryview(e).readonly  # type: ignore[arg-type]
    with pytest.raises((BufferError, TypeError)):
        (ctypes.c_float * 4).from_buffer(e)  # asks for a writable buffer
    assert e.tolist() == [[1, 2], [3, 4]]


@pytest.mark.skipif(not BUFFER, reason="3.11, pure twin forced: no buffer protocol, e.view")
def test_numpy_reads_the_buffer_itself() -> None:
    numpy = pytest.importorskip("numpy")
    e = Embeddings(array("f", [1, 2, 3, 4, 5, 6]), 2, 3)
    arr = numpy.asarray(e)
    assert arr.shape == (2, 3) and arr.dtype == numpy.float32 and not arr.flags.writeable
    assert numpy.shares_memory(arr, numpy.asarray(e.view))


def test_to_numpy_shares_memory(impl: Any) -> None:
    numpy = pytest.importorskip("numpy")
    e = decode(impl, [(answer(ROWS), 0, 2)], 2)
    arr = e.to_numpy()
    assert arr.shape == (2, 4) and arr.dtype == numpy.float32
    assert not arr.flags.writeable and not arr.flags.owndata
    assert numpy.shares_memory(arr, numpy.asarray(e.view))
    assert arr.tolist() == e.tolist()


# --- values that cannot change (docs/client.md, EMBEDDINGS) -----------------------------------


def reachable_buffers(e: Embeddings) -> list[Any]:
    """Every buffer a user can reach from `e`: its views, their rows, and what they view."""
    views = [e.view, e[0], e[-1], *e, e._view, e._flat]
    if BUFFER:
        views.append(memoryview(e))  # type: ignore[arg-type]
    return [*views, *(v.obj for v in views)]


def made_ways(impl: Any) -> list[Embeddings]:
    decoded = decode(impl, [(answer(ROWS), 0, 2)], 2)
    numbers = decode(impl, [(answer(ROWS, b64=False), 0, 2)], 2)
    source = bytearray(array("f", [1, 2, 3, 4]))
    made = [Embeddings(x, 2, 2) for x in (array("f", [1, 2, 3, 4]), source, bytes(source))]
    source[:4] = b"\xff" * 4  # the caller's buffer is theirs: Embeddings copied it
    assert made[1].tolist() == [[1, 2], [3, 4]]
    return [decoded, numbers, *made, pickle.loads(pickle.dumps(decoded))]


def test_no_reachable_buffer_can_be_written(impl: Any) -> None:
    import ctypes

    for e in made_ways(impl):
        before, digest = e.tobytes(), hash(e)
        for buffer in reachable_buffers(e):
            if type(buffer).__name__ == "_buffer_wrapper":
                # 3.12+: memoryview(e).obj is CPython's wrapper of e.__buffer__, which offers
                # no buffer of its own: nothing can be written through it
                with pytest.raises(TypeError):
                    memoryview(buffer)
                continue
            view = memoryview(buffer)
            assert view.readonly, type(buffer)
            with pytest.raises(TypeError):
                view.cast("B")[0] = 0xFF
            with pytest.raises((TypeError, BufferError)):
                (ctypes.c_char * 1).from_buffer(buffer)
        assert e.tobytes() == before and hash(e) == digest


def test_numpy_cannot_make_the_rows_writable(impl: Any) -> None:
    numpy = pytest.importorskip("numpy")
    for e in made_ways(impl):
        for arr in (e.to_numpy(), numpy.asarray(e.view), numpy.frombuffer(e.view.obj, "f")):
            with pytest.raises(ValueError):
                arr.flags.writeable = True


# --- sizes at the edge: the internal decoder checks every size product (EMBEDDINGS) ---------
# A count outside 0 to sys.maxsize is a ValueError; rows of more bytes than sys.maxsize (what one
# buffer can hold) an OverflowError; rows that fit but cannot be had a MemoryError: in both twins,
# with the same message (docs/client.md, rule EMBEDDINGS).

MAX = sys.maxsize


@pytest.mark.parametrize("n", [-1, -(2**63), MAX + 1, 2**64, 2**64 + 1])
def test_a_count_past_the_sizes_is_refused(c_impl: Any, py_impl: Any, n: int) -> None:
    messages = set()
    for impl in (py_impl, c_impl):
        with pytest.raises(ValueError) as info:
            impl.Vectors(n)
        messages.add(str(info.value))
    assert len(messages) == 1 and str(n) in messages.pop()


@pytest.mark.parametrize(
    ("n", "dim"),
    [(2**63 // 4, 1), (MAX, 1), (2**62, 2), (MAX // 3 + 1, 3), (2**61, 4), (MAX // 4 + 1, 1)],
    ids=["2**63/4", "maxsize", "wraps to 2 bytes", "maxsize/dim", "2**61x4", "one past"],
)
def test_rows_past_one_buffer_overflow(c_impl: Any, py_impl: Any, n: int, dim: int) -> None:
    body = answer([[1.0] * dim])
    messages = set()
    for impl in (py_impl, c_impl):
        vectors = impl.Vectors(n)
        with pytest.raises(OverflowError) as info:
            vectors.add([body], 0, 1)
        messages.add(str(info.value))
    assert messages == {f"{n} vectors of {dim} float32 need {n * dim * 4} bytes, more than {MAX}"}


@pytest.mark.parametrize(("n", "dim"), [(MAX // 4, 1), (MAX // 8, 2), (2**60, 1)])
def test_rows_that_fit_but_cannot_be_had(impl: Any, n: int, dim: int) -> None:
    with pytest.raises(MemoryError):
        impl.Vectors(n).add([answer([[1.0] * dim])], 0, 1)


@pytest.mark.parametrize(
    ("first", "count"),
    [(-1, 1), (0, 0), (0, 11), (10, 1), (2**62, 2**62), (MAX, MAX), (2**64, 1), (0, 2**64)],
)
def test_texts_outside_the_call_are_refused(
    c_impl: Any, py_impl: Any, first: int, count: int
) -> None:
    messages = set()
    for impl in (py_impl, c_impl):
        with pytest.raises(ValueError) as info:
            impl.Vectors(10).add([answer(ROWS)], first, count)
        messages.add(str(info.value))
    assert messages == {f"texts {first} to {first + count - 1} are not among 10"}


# --- the clients ---------------------------------------------------------------------------------

CLIENTS = [
    pytest.param((Client, False), id="sync"),
    pytest.param((AsyncClient, True), id="async"),
    pytest.param((llamafast.pure.Client, False), id="pure-sync"),
    pytest.param((llamafast.pure.AsyncClient, True), id="pure-async"),
]


def run(kind: tuple[type, bool], url: str, method: str, *args: Any, **kw: Any) -> Any:
    cls, is_async = kind
    cfg = Config(InferConfig(url=url), Limits(retries=0, **kw.pop("limits", {})))
    if not is_async:
        with cls(cfg) as client:
            return getattr(client, method)(*args, **kw)

    async def go() -> Any:
        async with cls(cfg) as client:
            return await getattr(client, method)(*args, **kw)

    return asyncio.run(go())


@pytest.fixture(params=CLIENTS)
def kind(request: pytest.FixtureRequest) -> tuple[type, bool]:
    return request.param  # type: ignore[no-any-return]


def test_embed_in_batches_in_order(kind: tuple[type, bool]) -> None:
    texts = [f"text number {i}" for i in range(23)]
    with EmbedServer(embed_handler(dim=6)) as server:
        e = run(kind, server.url, "embed", texts, limits={"embed_batch": 5})
    assert e.shape == (23, 6)
    assert e.tolist() == [f32(vector_for(t, 6)) for t in texts]
    assert e.usage == Usage(sum(len(t) for t in texts), 0)
    posts = [b for p, b in server.bodies if p == "/v1/embeddings"]
    assert sorted(len(b["input"]) for b in posts) == [3, 5, 5, 5, 5]
    assert all(b["encoding_format"] == "base64" and b["model"] == "default" for b in posts)


def test_embed_reads_numbers_too(kind: tuple[type, bool]) -> None:
    texts = ["a", "bb", "ccc"]
    with EmbedServer(embed_handler(dim=4, b64=False)) as server:
        e = run(kind, server.url, "embed", texts, model="nomic")
    assert e.tolist() == [f32(vector_for(t, 4)) for t in texts]
    assert server.bodies[-1][1]["model"] == "nomic"


def test_embed_without_embeddings_says_so(kind: tuple[type, bool]) -> None:
    raw = (HTTP / "embeddings_not_enabled.http").read_bytes().split(b"\r\n\r\n", 1)[1]
    with EmbedServer(lambda path, body: (501, raw)) as server:
        with pytest.raises(HttpError) as info:
            run(kind, server.url, "embed", ["x"])
    assert info.value.status == 501
    message = json.loads(raw)["error"]["message"]
    assert str(info.value) == (
        "the server answered 501 to POST /v1/embeddings: the server does not serve embeddings: "
        f"start llama-server with --embeddings ({message})"
    )


def test_embed_fault_names_the_text(kind: tuple[type, bool]) -> None:
    def short_second(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        rows = [vector_for(t, 4)[: 3 if t == "t5" else 4] for t in body["input"]]
        return 200, answer(rows)

    with EmbedServer(short_second) as server:
        with pytest.raises(ProtocolError, match="text 5 has 3 values, not 4"):
            run(kind, server.url, "embed", [f"t{i}" for i in range(8)], limits={"embed_batch": 4})


def test_async_runs_batches_side_by_side() -> None:
    # The server answers the first embeddings request only once a second one is in flight:
    # the async client sends as many at once as the server has slots (2).
    both = threading.Barrier(2, timeout=60)
    handle = embed_handler(dim=4)

    def paired(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        both.wait()
        return handle(path, body)

    with EmbedServer(paired, slots=2) as server:
        e = run((AsyncClient, True), server.url, "embed", ["x"] * 4, limits={"embed_batch": 2})
    assert e.n == 4 and server.most == 2


@pytest.mark.parametrize(
    ("texts", "error"),
    [("one string", TypeError), ([], ValueError), (["a", 3], TypeError), (None, TypeError)],
)
def test_embed_arguments_checked(texts: Any, error: type) -> None:
    with Client(Config()) as client:
        with pytest.raises(error):
            client.embed(texts)


# --- rerank --------------------------------------------------------------------------------------


def rerank_answer(results: list[dict[str, Any]]) -> bytes:
    # llama-server's /rerank answer (server-common.cpp format_response_rerank)
    return json.dumps(
        {
            "model": MODEL,
            "object": "list",
            "usage": {"prompt_tokens": 9, "total_tokens": 9},
            "results": results,
        }
    ).encode()


def test_rerank_in_server_order(kind: tuple[type, bool]) -> None:
    results = [
        {"index": 2, "relevance_score": 0.9},
        {"index": 0, "relevance_score": 0.1},
        {"index": 1, "relevance_score": -2.5},
    ]
    with EmbedServer(lambda p, b: (200, rerank_answer(results))) as server:
        ranked = run(kind, server.url, "rerank", "q", ["a", "b", "c"])
    assert ranked == (Ranked(2, 0.9), Ranked(0, 0.1), Ranked(1, -2.5))
    path, body = server.bodies[-1]
    assert path == "/rerank" and body == {
        "model": "default",
        "query": "q",
        "documents": ["a", "b", "c"],
    }


def test_rerank_top_n(kind: tuple[type, bool]) -> None:
    results = [{"index": 1, "relevance_score": 3}]
    with EmbedServer(lambda p, b: (200, rerank_answer(results))) as server:
        ranked = run(kind, server.url, "rerank", "q", ["a", "b"], top_n=1)
    assert ranked == (Ranked(1, 3.0),)
    assert server.bodies[-1][1]["top_n"] == 1


@pytest.mark.parametrize(
    ("results", "words"),
    [
        (
            [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}],
            "repeats document 0",
        ),
        ([{"index": 5, "relevance_score": 1}], "not one of the 2 documents"),
        ([{"index": 0, "relevance_score": "high"}], "not a finite number"),
        ([{"index": 0, "relevance_score": "__big__"}], "not a finite number"),
        ([{"index": 0, "relevance_score": 1}], "no result for document 1"),
    ],
)
def test_rerank_faults(results: list[dict[str, Any]], words: str) -> None:
    with EmbedServer(lambda p, b: (200, rerank_answer(results))) as server:
        with pytest.raises(ProtocolError, match=words):
            run((Client, False), server.url, "rerank", "q", ["a", "b"])


def test_rerank_without_reranking_says_so(kind: tuple[type, bool]) -> None:
    raw = (HTTP / "rerank_not_enabled.http").read_bytes().split(b"\r\n\r\n", 1)[1]
    with EmbedServer(lambda p, b: (501, raw)) as server:
        with pytest.raises(HttpError) as info:
            run(kind, server.url, "rerank", "q", ["a"])
    message = json.loads(raw)["error"]["message"]
    assert str(info.value) == (
        "the server answered 501 to POST /rerank: the server does not serve reranking: "
        f"start llama-server with --reranking ({message})"
    )


def test_rerank_arguments_checked() -> None:
    with Client(Config()) as client:
        with pytest.raises(TypeError):
            client.rerank(3, ["a"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="top_n"):
            client.rerank("q", ["a"], top_n=0)
