"""Resumed streams and the stop on close (docs/client.md, rule RESUME), both clients and both
twins, against a loopback server with llama-server's resumable-stream endpoints that breaks an
answer at the body byte a test names (tests/_resumable.py): a break after the head goes on from
the bytes read, with no gap and no repeat, the POST never sent again; what cannot resume is the
error of today, saying why; a stream closed early asks the server to stop (DELETE)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import llamafast
import llamafast.pure
from _drivers import DRIVERS, Outcome, cfg, req
from _resumable import EOF, RESET, STALL, ResumableServer, body_of
from llamafast import SseTimeoutError, StalledError, StreamClosedEarlyError, TruncatedError

LENGTH = len(body_of("reasoning_then_content"))


@pytest.fixture(params=list(DRIVERS))
def run(request: pytest.FixtureRequest, impl: Any) -> Any:
    """Run one request on a server: each client, each twin (`impl`: the Cython one's package is
    llamafast, skipped when it is not built)."""
    module = llamafast.pure if impl.IMPLEMENTATION == "python" else llamafast
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
        first = conv_of(server)
        server.sent.clear()
        run(server, stop_after=2)
        assert server.deleted.wait(10)
    deletes = server.of("DELETE")
    assert [d.query["conv_id"] for d in deletes] == [conv_of(server)]
    assert conv_of(server) != first


def test_each_request_has_a_fresh_random_id(run: Any) -> None:
    with ResumableServer() as server:
        for _ in range(3):
            run(server).ok()
    ids = [p.headers["x-conversation-id"] for p in server.of("POST")]
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
