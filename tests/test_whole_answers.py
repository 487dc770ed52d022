# The rules of an answer read whole (props, models, count_tokens, embed, rerank), the same for
# every such call because one exchange reads them all: once the server has answered (the head is
# in), the request is never sent again; the answer is the server's, refused when it is cut, too
# long or stops coming, and an error answer stays the HttpError it is, whatever its body.
"""Whole answers through both clients and both twins, against a raw loopback server."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _embed import EmbedServer, embed_handler, vector_for
from _embed import answer as embeddings_answer
from _hostile import HostileServer, Script, answer, silent
from _loopback import raw_response
from llamafast import (
    Config,
    ConnectError,
    HttpError,
    InferConfig,
    Limits,
    ProtocolError,
    StalledError,
    User,
)
from llamafast._core import MAX_SLOTS_BODY

CLIENTS = {
    "sync": llamafast.Client,
    "async": llamafast.AsyncClient,
    "pure-sync": llamafast.pure.Client,
    "pure-async": llamafast.pure.AsyncClient,
}

# Each call with what it asks the server, and a good answer's JSON.
PROPS = {"default_generation_settings": {"n_ctx": 256, "params": {}}, "total_slots": 1}
CALLS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "props": ("/props", lambda c: c.props()),
    "models": ("/models", lambda c: c.models()),
    "count_tokens": ("/v1/chat/completions/input_tokens", lambda c: c.count_tokens([User("hi")])),
    "embed": ("/v1/embeddings", lambda c: c.embed(["hi"])),
    "rerank": ("/rerank", lambda c: c.rerank("q", ["a"])),
}

# An answer whose head promises 100 bytes of body, and the first 14 of them.
PARTIAL = raw_response(200, "OK", b'{"only": "part' + b" " * 86)[:-86]


@pytest.fixture
def serve() -> Iterator[Callable[[str, Script], HostileServer]]:
    """A loopback server answering `path` by a script (the others as llama-server would)."""
    servers: list[HostileServer] = []

    def start(path: str, script: Script) -> HostileServer:
        servers.append(HostileServer({path: script}).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(params=list(CLIENTS))
def client_class(request: pytest.FixtureRequest) -> Any:
    return CLIENTS[request.param]


@pytest.fixture(params=list(CALLS))
def call(request: pytest.FixtureRequest) -> tuple[str, Callable[[Any], Any]]:
    return CALLS[request.param]


def run(client_class: Any, url: str, do: Callable[[Any], Any], limits: Limits | None = None) -> Any:
    limits = limits or Limits(
        retries=2,
        retry_base_ms=5,
        retry_max_ms=10,
        connect_timeout=2.0,
        wait_timeout=2.0,
        stall_timeout=1.0,
        load_timeout=2.0,
    )
    cfg = Config(InferConfig(url=url), limits)
    if client_class in (llamafast.Client, llamafast.pure.Client):
        with client_class(cfg) as client:
            return do(client)

    async def main() -> Any:
        async with client_class(cfg) as client:
            return await do(client)

    return asyncio.run(main())


def fail(
    client_class: Any, url: str, do: Callable[[Any], Any], limits: Limits | None = None
) -> BaseException:
    with pytest.raises(Exception) as info:  # each test names the one it expects
        run(client_class, url, do, limits)
    return info.value


def asked_once(server: HostileServer, path: str) -> None:
    assert server.count(path=path) == 1, [r.path for r in server.requests]


def test_an_answer_cut_inside_its_body_is_protocol_error_never_sent_again(
    serve: Any, client_class: Any, call: tuple[str, Callable[[Any], Any]]
) -> None:
    path, do = call
    server = serve(path, answer(PARTIAL))
    err = fail(client_class, server.url, do)
    assert type(err) is ProtocolError, repr(err)
    assert path in str(err) and "ended before its body did" in str(err)
    asked_once(server, path)


def test_an_answer_that_stops_coming_is_stalled_never_sent_again(
    serve: Any, client_class: Any, call: tuple[str, Callable[[Any], Any]]
) -> None:
    path, do = call
    server = serve(path, answer(PARTIAL, end="hold"))
    started = time.monotonic()
    err = fail(client_class, server.url, do)
    assert type(err) is StalledError, repr(err)
    assert path in str(err)
    assert time.monotonic() - started < 25  # a bound, not the server's 60 s life
    asked_once(server, path)


def test_an_answer_longer_than_its_limit_is_refused_not_cut(serve: Any, client_class: Any) -> None:
    # /props may hold MAX_SLOTS_BODY bytes: one more is not a /props answer
    body = json.dumps(PROPS).encode()
    body += b" " * (MAX_SLOTS_BODY + 1 - len(body))
    server = serve("/props", answer(raw_response(200, "OK", body)))
    err = fail(client_class, server.url, lambda c: c.props())
    assert type(err) is ProtocolError, repr(err)
    assert f"longer than {MAX_SLOTS_BODY} bytes" in str(err)
    asked_once(server, "/props")


def test_an_error_answer_with_a_long_body_is_its_http_error(
    serve: Any, client_class: Any, call: tuple[str, Callable[[Any], Any]]
) -> None:
    path, do = call
    body = json.dumps({"error": {"code": 500, "message": "x" * (1 << 20)}}).encode()
    server = serve(path, answer(raw_response(500, "Internal Server Error", body)))
    err = fail(client_class, server.url, do)
    assert type(err) is HttpError and err.status == 500, repr(err)
    asked_once(server, path)


def test_a_connection_refused_before_any_answer_is_retried(
    client_class: Any, call: tuple[str, Callable[[Any], Any]]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        err = fail(client_class, url, call[1])
    assert type(err) is ConnectError, repr(err)


def test_a_small_request_never_answered_names_connect_timeout(
    serve: Any, client_class: Any
) -> None:
    # errors that say what to do: the limit a user raises for a slow /props is connect_timeout
    server = serve("/props", silent())
    limits = Limits(retries=0, connect_timeout=0.2)
    err = fail(client_class, server.url, lambda c: c.props(), limits)
    assert type(err) is ConnectError, repr(err)
    assert (
        "GET /props was not answered within connect_timeout (0.2 s); to wait longer, raise "
        "connect_timeout (Limits.connect_timeout, or connect_timeout in [limits])"
    ) in str(err)


# --- one strict reader (docs/client.md, rule WHOLE; docs/assembler.md, rule STRICT-JSON) ------

# What no whole answer may hold, wherever it is: each is refused as a stream's chunk would be.
HOSTILE = {
    "nested 5,000 deep": "[" * 5000 + "]" * 5000,
    "an integer of 400 digits": "9" * 400,
    "1e400": "1e400",
    "NaN": "NaN",
    "-Infinity": "-Infinity",
    "a lone surrogate escape": '"\\ud800"',
}
# Each call's good answer, with a member the reader does not read: "x" (HOSTILE goes there).
GOOD = {
    "props": {**PROPS, "x": 0},
    "models": {"data": [{"id": "m"}], "x": 0},
    "count_tokens": {"input_tokens": 3, "x": 0},
    "rerank": {"results": [{"index": 0, "relevance_score": 0.5}], "x": 0},
}
WHAT = {
    "props": "GET /props",
    "models": "GET /models",
    "count_tokens": "POST /v1/chat/completions/input_tokens",
    "rerank": "POST /rerank",
}


def with_member(doc: dict[str, Any], value: str) -> bytes:
    """`doc` as JSON, its member "x" written as `value` (text that json.dumps cannot write)."""
    return json.dumps(doc).replace('"x": 0', f'"x": {value}').encode()


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("name", GOOD)
def test_a_whole_answer_that_is_not_strict_json_is_protocol_error_naming_the_call(
    serve: Any, client_class: Any, name: str, hostile: str
) -> None:
    path, do = CALLS[name]
    body = with_member(GOOD[name], HOSTILE[hostile])
    server = serve(path, answer(raw_response(200, "OK", body)))
    err = fail(client_class, server.url, do)
    assert type(err) is ProtocolError, repr(err)
    assert str(err).startswith(f"{WHAT[name]} answered something that is not JSON ("), str(err)
    asked_once(server, path)


@pytest.mark.parametrize("score", ["9" * 400, "-" + "9" * 400, "1e400", "NaN"])
def test_a_rerank_score_out_of_range_is_protocol_error(
    serve: Any, client_class: Any, score: str
) -> None:
    body = b'{"results":[{"index":0,"relevance_score":%s}]}' % score.encode()
    server = serve("/rerank", answer(raw_response(200, "OK", body)))
    err = fail(client_class, server.url, lambda c: c.rerank("q", ["a"]))
    assert type(err) is ProtocolError, repr(err)
    assert str(err).startswith("POST /rerank answered something that is not JSON ("), str(err)


def test_embed_s_parallelism_probe_of_a_deep_slots_answer_fails_quietly(
    serve: Any, client_class: Any
) -> None:
    # /slots only tells how many batches may run at once: an answer that is not JSON leaves it
    # at one, and the embeddings come as they would (AsyncClient asks; Client sends in turn).
    deep = raw_response(200, "OK", HOSTILE["nested 5,000 deep"].encode())
    server = HostileServer(
        {
            "/slots": answer(deep),
            "/v1/embeddings": answer(raw_response(200, "OK", embeddings_answer([[1.0, 2.0]]))),
        }
    ).start()
    one_each = Limits(embed_batch=1, wait_timeout=2.0, stall_timeout=1.0, retries=0)
    try:
        e = run(client_class, server.url, lambda c: c.embed(["a", "b", "c"], limits=one_each))
    finally:
        server.stop()
    assert e.shape == (3, 2) and server.count(path="/v1/embeddings") == 3


# --- bounded fan-out (docs/client.md, rule FAN-OUT) -------------------------------------------


def slow_embeddings(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    time.sleep(0.002)  # answers overlap, so the connections the client keeps open show
    return embed_handler(dim=3)(path, body)


@pytest.mark.parametrize("max_connections", [None, 4, 1])
def test_embed_opens_at_most_max_connections_whatever_slots_claims(
    client_class: Any, max_connections: int | None
) -> None:
    # A server that lists 5,000 slots, 2,400 texts in 300 batches: AsyncClient sends at most
    # max_connections (32 unless set) at once, Client one; the rows in order either way.
    texts = [f"t{i}" for i in range(2400)]
    bound = 32 if max_connections is None else max_connections  # 32 by default (FAN-OUT)
    given = {} if max_connections is None else {"max_connections": max_connections}
    limits = Limits(embed_batch=8, wait_timeout=30.0, retries=0, **given)
    with EmbedServer(slow_embeddings, slots=5000) as server:
        e = run(client_class, server.url, lambda c: c.embed(texts, limits=limits))
    assert 1 <= server.most <= bound, server.most
    assert len(server.bodies) == 300
    assert e.shape == (2400, 3)
    assert [list(e[i]) for i in (0, 1, 2399)] == [vector_for(t, 3) for t in ("t0", "t1", "t2399")]
