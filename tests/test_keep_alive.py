"""Keep-alive (docs/client.md, rule KEEP-ALIVE), both clients and both twins, against a loopback
server that keeps connections alive and drops one where the test says (tests/_keepalive.py):
a connection whose answer was read to its end carries the next request; one the server closed
while idle is replaced at once, the request sent once on a fresh one, never counted as a try;
after a byte of an answer nothing is sent again; a stream closed early is not kept; at most
`max_connections` are open."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _drivers import FAST, until
from _drivers import cfg as any_cfg
from _keepalive import (
    AFTER,
    BEFORE,
    CUT,
    DURING,
    MESSAGES,
    STALL,
    SURPLUS,
    USES,
    KeepAliveServer,
    SyncUse,
)
from _pki import server_context
from llamafast import Completion, ProtocolError, Retrying, StalledError, WaitTimeoutError

# The connections counted here are the requests' own: no stop request (DELETE /v1/stream) after
# a stream closed early (docs/client.md, rule RESUME; tests/test_resume.py has those).
cfg = functools.partial(any_cfg, base={**FAST, "resume": False})


@pytest.fixture(params=list(USES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def using(kind: str, server: KeepAliveServer, **limits: Any) -> SyncUse:
    return USES[kind](cfg(server.url, ca_file=server.ca, **limits))


@pytest.fixture(params=["http", "https"])
def scheme(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The server's keywords for plain HTTP or for HTTPS (the async client's https is its own
    TLS transport, _tls.py: the same cases are met through it)."""
    if request.param == "http":
        return {}
    pki = request.getfixturevalue("pki")
    return {"tls": server_context(pki), "ca": pki.ca}


@pytest.fixture
def served(scheme: dict[str, Any]) -> Iterator[KeepAliveServer]:
    with KeepAliveServer(**scheme) as server:
        yield server


def calls(use: SyncUse, n: int) -> list[Any]:
    """`n` requests one after the other, chat, complete and models in turn: their events."""
    events: list[Any] = []
    for i in range(n):
        events += (use.chat, use.complete, use.models)[i % 3]()
    return events


def retried(events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, Retrying)]


def test_sequential_requests_share_one_connection(kind: str, served: KeepAliveServer) -> None:
    use = using(kind, served)
    try:
        events = calls(use, 30)
    finally:
        use.close()
    assert retried(events) == []
    assert served.accepted == 1
    assert [n for n, _ in served.answered] == [1] * 30
    assert served.arrived == 30  # nothing sent twice
    assert use.pool.opened == 1


def test_a_server_that_closes_after_each_stream_costs_one_resend_at_most(
    kind: str, scheme: dict[str, Any]
) -> None:
    # llama-server's manner: it says keep-alive, then closes after every streamed answer. The
    # first such close is learnt; from then on the client closes those connections itself.
    with KeepAliveServer(close_after_stream=True, **scheme) as server:
        use = using(kind, server)
        try:
            events: list[Any] = []
            for _ in range(10):
                events += use.chat() + use.models()
        finally:
            use.close()
    assert retried(events) == []
    assert len(server.answered) == 20
    assert use.pool.resent <= 1
    assert use.pool.closes_after_stream
    assert server.accepted <= 11  # one per stream, and the first whole answer's


@pytest.mark.parametrize("moment", [BEFORE, DURING, AFTER])
def test_a_kept_connection_the_server_dropped_is_replaced_without_a_try(
    kind: str, moment: str, scheme: dict[str, Any]
) -> None:
    # Request 3, a chat's POST, meets the connection that carried request 2's whole answer.
    with KeepAliveServer(plan={3: moment}, **scheme) as server:
        use = using(kind, server, retries=0)  # a counted try would fail the request
        try:
            events: list[Any] = []
            for call in (use.models, use.models, use.chat, use.chat, use.models):
                events += call()
                time.sleep(0.05)  # the close BEFORE a request is seen while the client is idle
        finally:
            use.close()
    assert retried(events) == []
    assert [n for n, _ in server.answered] == [1, 1, 2, 2, 2]
    assert server.accepted == 2
    # The request the server dropped came twice DURING or AFTER its send, never BEFORE it.
    assert server.arrived == (5 if moment == BEFORE else 6)


def test_once_a_byte_of_the_answer_came_nothing_is_sent_again(
    kind: str, scheme: dict[str, Any]
) -> None:
    with KeepAliveServer(plan={3: CUT}, **scheme) as server:
        use = using(kind, server)
        try:
            use.chat()
            use.chat()
            with pytest.raises(ProtocolError, match=r"not HTTP/1\.1"):
                use.chat()
        finally:
            use.close()
    assert server.arrived == 3
    assert server.accepted == 1


def test_a_stream_closed_early_is_not_kept(kind: str, served: KeepAliveServer) -> None:
    use = using(kind, served)
    try:
        use.chat(stop_after=1)
        use.chat()
        use.models()
    finally:
        use.close()
    assert [n for n, _ in served.answered] == [1, 2, 2]
    assert served.accepted == 2


@pytest.mark.parametrize("stall_timeout", [0.3, 0.6])
def test_a_stream_on_a_kept_connection_stalls_by_its_own_stall_timeout(
    kind: str, stall_timeout: float, scheme: dict[str, Any]
) -> None:
    # The stall watch of a kept connection's next stream (rule STALL): whatever timer the
    # streams before it left (here with a stall_timeout of 60 s), a stream that goes silent
    # ends in StalledError, not before its own stall_timeout and not long after; the stalled
    # connection is not kept.
    with KeepAliveServer(plan={3: STALL}, **scheme) as server:
        use = using(kind, server, retries=0, stall_timeout=60.0)
        try:
            use.chat()
            use.chat()
            start = time.monotonic()
            with pytest.raises(StalledError):
                use.chat(
                    limits=dataclasses.replace(
                        use.client.config.limits, stall_timeout=stall_timeout
                    )
                )
            waited = time.monotonic() - start
            use.models()
        finally:
            use.close()
    assert stall_timeout <= waited < stall_timeout + 5
    assert [n for n, _ in server.answered] == [1, 1, 1, 2]


def test_keep_alive_max_is_honoured(kind: str) -> None:
    with KeepAliveServer(most=3) as server:
        use = using(kind, server, retries=0)
        try:
            for _ in range(7):
                use.models()
        finally:
            use.close()
    assert [n for n, _ in server.answered] == [1, 1, 1, 2, 2, 2, 3]
    assert server.arrived == 7  # no request met a connection the server had ended
    assert use.pool.resent == 0


def test_a_connection_idle_past_the_servers_timeout_is_not_used(kind: str) -> None:
    with KeepAliveServer(header="timeout=1") as server:  # kept for 1 - 0.5 s at most
        use = using(kind, server, retries=0)
        try:
            use.models()
            time.sleep(0.7)
            use.models()
        finally:
            use.close()
    assert [n for n, _ in server.answered] == [1, 2]
    assert use.pool.resent == 0


def test_closing_the_client_closes_its_kept_connections(kind: str, served: KeepAliveServer) -> None:
    use = using(kind, served)
    use.models()
    assert served.open_now == 1
    use.close()
    until(lambda: served.open_now == 0, 5)


def test_threads_share_one_sync_client(served: KeepAliveServer) -> None:
    client = llamafast.Client(cfg(served.url, ca_file=served.ca))
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(10):
                if i % 2:
                    client.models()
                else:
                    client.complete(MESSAGES)
        except BaseException as err:  # the test reports it
            failures.append(err)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    client.close()
    assert failures == []
    assert len(served.answered) == 80
    assert served.accepted <= 8
    assert served.open_most <= 8


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_request_waiting_for_the_one_connection_gets_it_when_it_comes_free(
    package: Any, served: KeepAliveServer
) -> None:
    # max_connections=1: a second thread's request waits for the connection the first one's
    # stream holds, and is woken when that stream ends (the pool tells its waiters), not when
    # its own 30 s deadline would let it look again.
    client = package.Client(
        cfg(served.url, ca_file=served.ca, max_connections=1, wait_timeout=30.0)
    )
    done: list[Any] = []
    try:
        with client.stream(MESSAGES) as first:
            next(first)
            waiter = threading.Thread(target=lambda: done.append(client.complete(MESSAGES)))
            waiter.start()
            while not client._pool._waiting and waiter.is_alive():
                time.sleep(0.01)
            for _ in first:
                pass
        waiter.join(10)
        assert not waiter.is_alive(), "the waiting request was not woken"
    finally:
        client.close()
    assert isinstance(done[0], Completion)
    assert served.accepted == 1


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_task_waiting_for_the_one_connection_gets_it_when_it_comes_free(
    package: Any, served: KeepAliveServer
) -> None:
    # The same for the asyncio client's tasks: the waiting one is woken when the stream ends.
    async def run() -> Completion:
        client = package.AsyncClient(
            cfg(served.url, ca_file=served.ca, max_connections=1, wait_timeout=30.0)
        )
        try:
            async with client.stream(MESSAGES) as first:
                await anext(first)
                waiter = asyncio.ensure_future(client.complete(MESSAGES))
                while not client._pool._waiters and not waiter.done():
                    await asyncio.sleep(0.01)
                async for _ in first:
                    pass
            return await asyncio.wait_for(waiter, 10)
        finally:
            await client.aclose()

    assert isinstance(asyncio.run(run()), Completion)
    assert served.accepted == 1


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_max_connections_bounds_the_open_connections(package: Any) -> None:
    async def main(server: KeepAliveServer) -> list[Completion]:
        async with package.AsyncClient(cfg(server.url, max_connections=2)) as client:
            return list(await asyncio.gather(*(client.complete(MESSAGES) for _ in range(6))))

    with KeepAliveServer(delay=0.1) as server:
        done = asyncio.run(main(server))
    assert len(done) == 6
    assert server.open_most <= 2
    assert server.accepted <= 2


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_waiting_past_its_deadline_for_a_connection_names_max_connections(package: Any) -> None:
    async def main(server: KeepAliveServer) -> None:
        config = cfg(server.url, max_connections=1, wait_timeout=0.3)
        async with package.AsyncClient(config) as client:
            async with client.stream(MESSAGES) as holding:  # holds the one connection
                await anext(holding)
                with pytest.raises(WaitTimeoutError, match="max_connections"):
                    await client.complete(MESSAGES)
                async for _ in holding:
                    pass
            await client.complete(MESSAGES)  # its connection came free: kept, and reused

    with KeepAliveServer() as server:
        asyncio.run(main(server))
        assert server.accepted == 1
        assert server.arrived == 2


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_request_holding_a_connection_never_waits_for_a_second(package: Any) -> None:
    # With one connection allowed, the chat's late first byte still gets its /slots probe
    # (on a second connection): a request never waits for a connection it holds itself.
    with KeepAliveServer(delay=0.5) as server:
        config = cfg(server.url, max_connections=1, slot_check_delay=0.05)
        with package.Client(config) as client:
            client.complete(MESSAGES)
        paths = [path for _, path in server.answered]
    assert paths == ["/slots", "/v1/chat/completions"]


def test_a_connection_with_bytes_after_its_answer_is_not_kept(
    kind: str, scheme: dict[str, Any]
) -> None:
    with KeepAliveServer(plan={2: SURPLUS}, **scheme) as server:
        use = using(kind, server, retries=0)
        try:
            for _ in range(4):
                use.models()
                time.sleep(0.02)  # the surplus has come before the next request
        finally:
            use.close()
    assert [n for n, _ in server.answered] == [1, 1, 2, 2]
    assert server.arrived == 4


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_the_asyncio_client_closes_a_connection_idle_past_its_bound(package: Any) -> None:
    async def main(server: KeepAliveServer) -> None:
        async with package.AsyncClient(cfg(server.url)) as client:
            await client.models()
            assert server.open_now == 1
            await asyncio.sleep(0.8)  # the server's timeout=1, less the client's 0.5 s margin
            assert server.open_now == 0  # closed by the client while idle
            await client.models()

    with KeepAliveServer(header="timeout=1") as server:
        asyncio.run(main(server))
    assert [n for n, _ in server.answered] == [1, 2]


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_connections_kept_by_an_ended_event_loop_are_given_up(package: Any) -> None:
    # One AsyncClient across several asyncio.run calls: what each loop kept is shut when the
    # next loop finds it, so it counts against max_connections no longer.
    with KeepAliveServer() as server:
        client = package.AsyncClient(cfg(server.url, max_connections=2, connect_timeout=0.5))
        for _ in range(5):
            asyncio.run(client.models())
        assert server.accepted == 5
        assert client._pool._open == 1


def test_a_close_long_after_a_stream_is_not_taken_for_a_close_after_every_stream(
    kind: str,
) -> None:
    # The server's own idle close, 1.2 s after a stream, is no sign that it closes after every
    # stream: later streams' connections are still kept.
    with KeepAliveServer(plan={2: BEFORE}, idle_close=1.2) as server:
        use = using(kind, server, retries=0)
        try:
            use.chat()
            time.sleep(1.5)
            use.chat()
            use.chat()
        finally:
            use.close()
    assert not use.pool.closes_after_stream
    assert [n for n, _ in server.answered] == [1, 2, 2]


@pytest.mark.parametrize("package", [llamafast, llamafast.pure], ids=["selected", "pure"])
def test_a_connection_kept_again_is_closed_at_its_new_idle_bound(package: Any) -> None:
    # One idle timer per connection, armed at its first keep and re-armed when it fires: kept
    # again before it fired, the connection lives to its new bound, then is closed.
    async def main(server: KeepAliveServer) -> None:
        async with package.AsyncClient(cfg(server.url)) as client:
            await client.models()
            await asyncio.sleep(0.8)
            await client.models()  # kept again: idle until 0.8 + 1.5 s
            await asyncio.sleep(1.0)  # past the first keep's bound (1.5 s)
            assert server.open_now == 1  # not closed by the first keep's timer
            await asyncio.sleep(1.0)
            assert server.open_now == 0  # closed by the client at its new bound

    with KeepAliveServer(header="timeout=2") as server:  # kept for 2 - 0.5 s at most
        asyncio.run(main(server))
    assert [n for n, _ in server.answered] == [1, 1]


def test_a_wait_on_a_kept_connection_ends_by_its_own_deadline(kind: str) -> None:
    # The asyncio connection's one timer for its waits, armed for the earlier answer's later
    # deadline (connect_timeout, 2 s), is armed again for the chat's earlier one.
    with KeepAliveServer(delay=1.0) as server:
        use = using(kind, server, retries=0)
        try:
            use.models()
            short = dataclasses.replace(use.client.config.limits, wait_timeout=0.3)
            with pytest.raises(WaitTimeoutError):
                use.chat(limits=short)
        finally:
            use.close()
    assert server.answered[0] == (1, "/models")
