"""Resumed streams and the stop on close (docs/client.md, rule RESUME), both clients and both
twins, against a loopback server with llama-server's resumable-stream endpoints that breaks an
answer at the body byte a test names (tests/_resumable.py): a break after the head goes on from
the bytes read, with no gap and no repeat, the POST never sent again; what cannot resume is the
error of today, saying why; a stream closed early asks the server to stop (DELETE)."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from typing import Any

import pytest

from _drivers import DRIVERS, Outcome, cfg, req, until
from _examples import client_module
from _resumable import EOF, RESET, STALL, ResumableServer, body_of
from llamafast import SseTimeoutError, StalledError, StreamClosedEarlyError, TruncatedError
from llamafast._client import _stop
from llamafast._client._stop import MAX_THREADS

LENGTH = len(body_of("reasoning_then_content"))


@pytest.fixture(params=list(DRIVERS))
def run(request: pytest.FixtureRequest, impl: Any) -> Any:
    """Run one request on a server: each client, each twin (`impl`: the Cython one's package is
    llamafast, skipped when it is not built)."""
    module = client_module(impl)
    driver = DRIVERS[request.param](module)

    def go(server: ResumableServer, stop_after: int | None = None, **limits: Any) -> Outcome:
        return driver.run(cfg(server, **limits), req(None, thinking=True), stop_after)

    return go


def unbroken(run: Any) -> Outcome:
    with ResumableServer() as server:
        return run(server)


def conv_of(server: ResumableServer) -> str:
    (post,) = server.of("POST")
    return post.headers["x-conversation-id"]


@pytest.mark.parametrize("how", [EOF, RESET])
@pytest.mark.parametrize("cut", [0, 1, 17, 37, LENGTH // 3, LENGTH // 2, LENGTH - 20, LENGTH - 8])
def test_a_break_at_any_body_byte_resumes_to_the_same_answer(run: Any, cut: int, how: str) -> None:
    whole = unbroken(run)
    with ResumableServer(breaks={0: (cut, how)}) as server:
        out = run(server)
    assert out.ok() == whole.ok()
    assert out.events == whole.events
    assert len(server.of("POST")) == 1
    (get,) = server.of("GET")
    assert get.query["conv_id"] == conv_of(server)
    # A reset drops what the client had not read yet: it goes on from what it had read.
    assert int(get.query["from"]) == cut if how == EOF else int(get.query["from"]) <= cut


def test_a_stall_resumes_too(run: Any) -> None:
    whole = unbroken(run)
    with ResumableServer(breaks={0: (LENGTH // 2, STALL)}) as server:
        out = run(server, stall_timeout=0.3)
    assert out.ok() == whole.ok()
    assert out.events == whole.events
    assert len(server.of("POST")) == 1
    assert server.of("GET")[0].query["from"] == str(LENGTH // 2)


def test_two_breaks_with_progress_between_resume_twice(run: Any) -> None:
    whole = unbroken(run)
    with ResumableServer(breaks={0: (40, EOF), 1: (LENGTH // 2, EOF)}) as server:
        out = run(server)
    assert out.ok() == whole.ok()
    assert [g.query["from"] for g in server.of("GET")] == ["40", str(LENGTH // 2)]


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        ((404, "Stream not found or expired"), "404"),
        ((400, "Stream offset lost, please restart"), "Stream offset lost"),
    ],
)
def test_a_refused_resume_is_the_error_of_today_saying_why(
    run: Any, refusal: tuple[int, str], said: str
) -> None:
    with ResumableServer(breaks={0: (LENGTH // 2, EOF)}, refusal=refusal) as server:
        out = run(server)
    err = out.raised(StreamClosedEarlyError)
    assert "resum" in str(err) and said in str(err)
    assert isinstance(err.__cause__, TruncatedError)  # the reader's error (STREAM-ERRORS)
    assert len(server.of("POST")) == 1 and len(server.of("GET")) == 1


def test_a_second_break_before_a_new_byte_ends_the_stream(run: Any) -> None:
    with ResumableServer(breaks={0: (50, EOF), 1: (50, EOF)}) as server:
        out = run(server)
    err = out.raised(StreamClosedEarlyError)
    assert "resum" in str(err)
    assert len(server.of("POST")) == 1 and len(server.of("GET")) == 1


def test_a_stall_that_cannot_resume_is_a_stalled_error(run: Any) -> None:
    with ResumableServer(breaks={0: (50, STALL)}, refusal=(404, "nope")) as server:
        out = run(server, stall_timeout=0.3)
    err = out.raised(StalledError)
    assert "resum" in str(err) and "stall_timeout" in str(err)
    assert isinstance(err.__cause__, SseTimeoutError)


def test_a_server_without_resumable_streams_gets_nothing_more(run: Any) -> None:
    with ResumableServer(breaks={0: (50, EOF)}, endpoints=False) as server:
        out = run(server)
        err = out.raised(StreamClosedEarlyError)
        assert "resum" in str(err) and "File Not Found" in str(err)
        assert [s.method for s in server.sent] == ["POST", "GET"]


def test_resume_off_sends_no_id_and_nothing_after_a_break(run: Any) -> None:
    with ResumableServer(breaks={0: (50, EOF)}) as server:
        out = run(server, resume=False)
        again = run(server, stop_after=2, resume=False)
    err = out.raised(StreamClosedEarlyError)
    assert "resum" not in str(err)
    assert again.error is None
    assert [s.method for s in server.sent] == ["POST", "POST"]
    assert all("x-conversation-id" not in s.headers for s in server.sent)


def test_closing_a_stream_early_asks_the_server_to_stop(run: Any) -> None:
    with ResumableServer() as server:
        out = run(server, stop_after=2)
        assert out.error is None
        assert server.deleted.wait(10)
    (delete,) = server.of("DELETE")
    assert delete.path == "/v1/stream" and delete.query == {"conv_id": conv_of(server)}


def test_a_finished_stream_leaves_nothing_to_stop(run: Any) -> None:
    with ResumableServer() as server:
        run(server).ok()
        server.sent.clear()
        run(server, stop_after=2)
        assert server.deleted.wait(10)
    deletes = server.of("DELETE")
    assert [d.query["conv_id"] for d in deletes] == [conv_of(server)]


def _closed_early(
    module: Any,
    kind: str,
    server: ResumableServer,
    count: int,
    between: Any = None,
    made: list[Any] | None = None,
) -> Any:
    """`count` streams of one client of `kind` ("sync", "async"), each closed after 2 events,
    in turn, `between()` after each; the client's Stopper (put in `made` at once)."""
    config = cfg(server)
    one = req(None, thinking=True)
    if kind == "sync":
        with module.Client(config) as client:
            if made is not None:
                made.append(client._stopper)
            for _ in range(count):
                assert DRIVERS["sync"].run_on(client, one, 2).error is None
                if between is not None:
                    between()
        return client._stopper

    async def main() -> Any:
        async with module.AsyncClient(config) as client:
            if made is not None:
                made.append(client._stopper)
            for _ in range(count):
                assert (await DRIVERS["async"].run_on(client, one, 2)).error is None
                if between is not None:
                    between()
        return client._stopper

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_burst_of_closes_sends_every_stop_on_a_few_threads(impl: Any, kind: str) -> None:
    # Each DELETE answered late, so the stops of streams closed in quick succession pile up:
    # they go on at most MAX_THREADS threads (a thread per stop had started ten), all sent.
    module = client_module(impl)
    most = [0]
    made: list[Any] = []
    watching = threading.Event()

    def stop_threads() -> int:
        return sum(t.name == "llamafast-stop" for t in threading.enumerate())

    before = stop_threads()  # other clients' idle ones, ending (none start meanwhile)

    def watch() -> None:  # the client's stop threads, as it counts them and as running
        while not watching.is_set():
            if made:
                most[0] = max(most[0], made[0].threads(), stop_threads() - before)
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ResumableServer(delete_s=0.2) as server:
            _closed_early(module, kind, server, 10, made=made)
            until(lambda: len(server.of("DELETE")) == 10)
    finally:
        watching.set()
        watcher.join()
    assert 1 <= most[0] <= MAX_THREADS
    conv_ids = {d.query["conv_id"] for d in server.of("DELETE")}
    assert len(conv_ids) == 10  # each stream's own


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_stops_in_turn_go_on_one_kept_connection(
    impl: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server that keeps the connection after a DELETE's answer (llama-server does, after any
    # whole answer) gets every stop of streams closed in turn on one connection; once idle, the
    # stopper's threads end and the connection is closed.
    monkeypatch.setattr(_stop, "IDLE_S", 0.3)
    module = client_module(impl)
    with ResumableServer(keep_deletes=True) as server:

        def delete_answered() -> None:
            until(lambda: server.deleted.is_set())
            server.deleted.clear()

        stopper = _closed_early(module, kind, server, 5, delete_answered)
        assert len(server.of("DELETE")) == 5
        assert len(server.delete_connections) == 1
        until(lambda: stopper.threads() == 0 and server.open_count() == 0)
        # The next stop starts a thread again, on a fresh connection.
        _closed_early(module, kind, server, 1, delete_answered)
        assert len(server.delete_connections) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_kept_connection_the_server_closed_is_not_sent_a_stop(impl: Any, kind: str) -> None:
    module = client_module(impl)
    with ResumableServer(keep_deletes=True) as server:

        def dropped() -> None:
            until(lambda: server.deleted.is_set())
            server.deleted.clear()
            server.drop_connections()  # as one idle past its Keep-Alive timeout

        _closed_early(module, kind, server, 3, dropped)
    assert len(server.of("DELETE")) == 3  # each once: none lost, none sent twice
    assert len(server.delete_connections) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_sends_its_own_stops(impl: Any) -> None:
    # The parent's stop thread (idle now) is not the child's: a stop in the child starts one.
    module = client_module(impl)
    one = req(None, thinking=True)
    with ResumableServer() as server, module.Client(cfg(server)) as client:
        DRIVERS["sync"].run_on(client, one, 2)
        until(lambda: len(server.of("DELETE")) == 1)
        pid = os.fork()
        if pid == 0:  # the child: its stop, then out (nothing of pytest's runs here)
            code = 1
            try:
                _stop.IDLE_S = 0.05  # (the child's own module) its thread ends soon after
                DRIVERS["sync"].run_on(client, one, 2)
                until(lambda: not client._stopper.threads())  # its thread sent it, and ended
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        until(lambda: len(server.of("DELETE")) == 2)


def test_a_streams_id_carries_the_next_once_read_to_its_end(impl: Any) -> None:
    # The server keeps a finished stream's buffer for minutes and frees it when a new stream
    # takes its id: a client's streams in turn share one id, so the server holds one buffer
    # per stream in flight, not one per request. A stream closed early gives its id up.
    module = client_module(impl)
    with ResumableServer() as server:
        with module.Client(cfg(server)) as client:
            for stop_after in (None, None, 2, None, None):
                DRIVERS["sync"].run_on(client, req(None, thinking=True), stop_after)
        assert server.deleted.wait(10)
    ids = [p.headers["x-conversation-id"] for p in server.of("POST")]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4]
    assert [d.query["conv_id"] for d in server.of("DELETE")] == [ids[2]]


@pytest.mark.parametrize("kind", list(DRIVERS))
def test_streams_in_flight_at_once_never_share_an_id(impl: Any, kind: str) -> None:
    module = client_module(impl)
    with ResumableServer() as server:
        driver = DRIVERS[kind](module)
        outs = driver.run_many(cfg(server), [req(None, thinking=True)] * 4)
        assert all(o.ok() for o in outs)
    ids = [p.headers["x-conversation-id"] for p in server.of("POST")]
    assert len(ids) == 4 and len(set(ids)) == 4
